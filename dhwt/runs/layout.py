"""The run directory, created all at once or not at all.

Layout (DESIGN.md): config.toml (the resolved config, written first), metrics.jsonl,
checkpoints/, embeddings/, figures/, report.md, data/ when the dataset was built from a
grammar for this run, and tensorboard/ when the run logs to TensorBoard. RunPaths names each
place: the door through which the code that writes a run (the trainer, `dhwt train`, studies)
finds it, as readers go through dhwt.load_run's Run, which is built on it. StudyPaths is the
door to a study directory (study.toml, data/, runs/NAME, analysis/NAME, jobs/, report.md).

`create_run_dir` fills a hidden staging directory beside the target and renames it into place
only when everything in it (config, dataset, validation) succeeded, so a run that fails before
training leaves nothing behind. Missing parent directories are created (as `mkdir -p`) and
removed again if the creation fails. An existing target is refused unless `overwrite` and dhwt
made it as a run (dhwt.directories: the marker, the lock, what is never replaced); then it is
replaced only after the new one is complete.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from dhwt.directories import Lock, check_target, create
from dhwt.filenames import (ANALYSIS, CHECKPOINTS, CONFIG, DATA, EMBEDDINGS, FIGURE, FIGURES,
                            JOBS, METRICS, REPORT, RUNS, SESSIONS, STUDY_FILE, TENSORBOARD,
                            TOKEN_COUNTS, TWINS)

__all__ = ["CHECKPOINTS", "CONFIG", "DATA", "EMBEDDINGS", "EXISTS", "FIGURE", "FIGURES", "METRICS",
           "REPORT", "SESSIONS", "TENSORBOARD", "TOKEN_COUNTS", "TWINS", "RunPaths", "StudyPaths",
           "create_run_dir", "refuse_existing", "run_paths", "study_paths"]

EXISTS = "pass --overwrite to replace it or --resume to continue it"


@dataclass(frozen=True)
class RunPaths:
    """The places inside the run directory `root` (run_paths builds them): the only paths into
    a run built by hand. data: the dataset built from a grammar for this run (absent
    otherwise); twins: the planted twins' truth (text with twins only); figure: the training
    figure of the end-of-run report.

    Examples:
        >>> paths = run_paths("runs/u5k")
        >>> paths.metrics.as_posix(), paths.checkpoints.as_posix()
        ('runs/u5k/metrics.jsonl', 'runs/u5k/checkpoints')
    """

    root: Path
    config: Path
    metrics: Path
    sessions: Path
    checkpoints: Path
    embeddings: Path
    token_counts: Path
    twins: Path
    tensorboard: Path
    data: Path
    figures: Path
    figure: Path
    report: Path


def run_paths(run_dir: str | Path) -> RunPaths:
    """RunPaths of `run_dir`."""
    root = Path(run_dir)
    return RunPaths(root, *(root / name for name in (
        CONFIG, METRICS, SESSIONS, CHECKPOINTS, EMBEDDINGS, TOKEN_COUNTS, TWINS, TENSORBOARD, DATA,
        FIGURES, FIGURE, REPORT)))


@dataclass(frozen=True)
class StudyPaths:
    """The places inside the study directory `root` (study_paths builds them), the second door
    beside RunPaths: study_file, the study file as run; data, a grammar study's dataset; runs,
    the folder of its run directories (`run(NAME)`); analysis, a text study's report of each
    run (`analysis_of(NAME)`); jobs, the files of its jobs; report, its report.md.

    Examples:
        >>> paths = study_paths("studies/exor")
        >>> paths.run("tied").as_posix(), paths.analysis_of("tied").as_posix()
        ('studies/exor/runs/tied', 'studies/exor/analysis/tied')
    """

    root: Path
    study_file: Path
    data: Path
    runs: Path
    analysis: Path
    jobs: Path
    report: Path

    def run(self, name: str) -> Path:
        """The directory of the study's run `name`."""
        return self.runs / name

    def analysis_of(self, name: str) -> Path:
        """The report folder of a text study's run `name`."""
        return self.analysis / name


def study_paths(study_dir: str | Path) -> StudyPaths:
    """StudyPaths of `study_dir`."""
    root = Path(study_dir)
    return StudyPaths(root, *(root / name for name in (STUDY_FILE, DATA, RUNS, ANALYSIS, JOBS,
                                                       REPORT)))


def refuse_existing(run_dir: Path, overwrite: bool, inputs: Iterable[object] = ()) -> None:
    """DhwtError if `run_dir` exists and may not be replaced (dhwt.directories.check_target)."""
    check_target(run_dir, "run", overwrite=overwrite, inputs=inputs, exists=EXISTS)


def create_run_dir(run_dir: Path, config_toml: str, *, overwrite: bool = False,
                   inputs: Iterable[object] = (), fill: Callable[[Path], object] | None = None
                   ) -> Lock:
    """Create `run_dir` with config.toml (written first of the run's files) and whatever
    `fill(staging_dir)` adds, and return its write lock, held, with `fill`'s result as `value`.

    `fill` may build a dataset and validate it; if it or anything else raises, nothing stays
    behind (an OSError, such as a full disk, as a DhwtError naming `run_dir`). `inputs`: paths
    the command reads, which an overwritten `run_dir` must not hold.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> tmp = tempfile.TemporaryDirectory()
        >>> run_dir = Path(tmp.name) / "runs" / "tied"
        >>> create_run_dir(run_dir, "steps = 10\\n").release()
        >>> sorted(path.name for path in run_dir.iterdir())
        ['.dhwt', '.lock', 'checkpoints', 'config.toml', 'embeddings', 'figures']
        >>> create_run_dir(run_dir, "steps = 10\\n")
        Traceback (most recent call last):
          ...
        dhwt.errors.DhwtError: .../tied already exists; pass --overwrite to replace it or
        --resume to continue it
        >>> tmp.cleanup()
    """
    def build(staging: Path) -> object:
        paths = run_paths(staging)
        paths.config.write_text(config_toml, encoding="utf-8")
        result = fill(staging) if fill is not None else None
        for folder in (paths.checkpoints, paths.embeddings, paths.figures):
            folder.mkdir()
        return result

    return create(Path(run_dir), "run", build, overwrite=overwrite, inputs=inputs, exists=EXISTS)
