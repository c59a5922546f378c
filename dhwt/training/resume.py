"""What a resume of a run checks and changes before it trains (dhwt.training.runner): that the
config asked equals the run's config.toml (steps may only grow: an extension), that a group
extends from one step, and whether a run has finished already (left as it is)."""

from __future__ import annotations

from pathlib import Path

from dhwt.config.run import TrainConfig
from dhwt.directories import atomic_write_bytes
from dhwt.errors import DhwtError
from dhwt.runs import layout
from dhwt.runs.checkpoints import latest_checkpoint
from dhwt.runs.history import check_history
from dhwt.runs.layout import run_paths
from dhwt.runs.metrics import read_metrics
from dhwt.runs.result import RunResult
from dhwt.runs.run import is_finished


def check_resumable(run_dir: Path, config: TrainConfig) -> TrainConfig:
    """The run's saved config; DhwtError unless `run_dir` is a run whose config.toml equals
    `config` in every field but where it runs (TrainConfig.identity) and steps, which may only
    grow (an extension)."""
    saved_path = run_paths(run_dir).config
    if not saved_path.is_file():
        raise DhwtError(f"cannot resume {run_dir}: it has no {layout.CONFIG} (not a run directory)")
    saved = TrainConfig.from_toml(saved_path)
    check_extension(run_dir, config.optim.steps, saved)
    wanted, have = config.resume_key(), saved.resume_key()
    for key, value in wanted.items():
        if have[key] != value:
            raise DhwtError(f"cannot resume {run_dir} with {key} = {value!r}: the run was "
                            f"configured with {have[key]!r} (see {saved_path})")
    return saved


def check_extension(run_dir: Path, steps: object, saved: TrainConfig) -> None:
    """DhwtError if `steps` (an int: a resume's steps) would shorten the run `saved` configures."""
    if isinstance(steps, int) and not isinstance(steps, bool) and steps < saved.optim.steps:
        raise DhwtError(f"cannot resume {run_dir} with steps = {steps}: the run is configured "
                        f"for {saved.optim.steps} steps, and --steps may extend it, not shorten "
                        "it")


def check_group_extension(runs: list[tuple[TrainConfig, Path]], saved: list[TrainConfig]
                          ) -> None:
    """DhwtError unless extending the group `runs` (their config.toml: `saved`) extends every
    run from one step: the runs extended (whose config.toml has fewer steps than asked) must be
    configured for the same steps, and a run whose config.toml has the new steps already must
    not have finished them (an extension of the group stopped before it rewrote every
    config.toml leaves such a run)."""
    extended = [(d, s.optim.steps) for (c, d), s in zip(runs, saved)
                if s.optim.steps < c.optim.steps]
    short, steps = extended[0]
    for (config, run_dir), s in zip(runs, saved):
        if s.optim.steps == config.optim.steps and is_finished(run_dir):
            raise DhwtError(f"cannot extend {short} as part of a group: {run_dir} has finished "
                            f"its {config.optim.steps} steps already; resume {short} on its own "
                            "with --steps")
    for run_dir, other in extended[1:]:
        if other != steps:
            raise DhwtError(f"cannot extend {short} and {run_dir} as one group: they are "
                            f"configured for {steps} and {other} steps; resume each on its own "
                            "with --steps")


def extend(run_dir: Path, config: TrainConfig) -> None:
    """Record that the run in `run_dir` now trains to `config`'s steps (its config.toml), which
    leaves it unfinished until it has trained them (dhwt.runs.run.is_finished), and remove the
    report of the steps before."""
    atomic_write_bytes(run_paths(run_dir).config, config.to_toml().encode())
    run_paths(run_dir).report.unlink(missing_ok=True)


def finished(run_dir: Path, saved: TrainConfig) -> RunResult | None:
    """The result of a run that has finished (dhwt.runs.run.is_finished), read from disk; None
    if it has not, or if its record lost the snapshot of its last step (the trainer writes it
    again); DhwtError if it lost more (dhwt.runs.history)."""
    if not is_finished(run_dir):
        return None
    path, _ = latest_checkpoint(run_paths(run_dir).checkpoints)  # a damaged one is an error
    if check_history(run_dir, saved, saved.optim.steps) is not None:
        return None
    final = [r for r in read_metrics(run_paths(run_dir).metrics) if r["step"] == saved.optim.steps]
    return RunResult(run_dir, saved.optim.steps, final, path, 0.0, start=saved.optim.steps,
                     touched=False)
