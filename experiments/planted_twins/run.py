"""The planted-twins study (issue 33): train every arm as an ordinary `dhwt train` run.

    DHWT_DATA=../shared/data python experiments/planted_twins/run.py OUT [--only SUBSTRING ...]

Corpus: WikiText-2, byte-level BPE of 2,048 tokens (dhwt.text.tokenizers), twins planted
after tokenization (dhwt.text.twins). Arms (CORPORA x objective x tie schedule), each one
run of seeds 1-3 (one ensemble; a seed fixes the body's init and the data order in every run,
so arms pair by seed): see ARMS. Model and training: base.toml beside this file (--base: another
file of shared settings, e.g. gpu.toml). Run
directories: OUT/runs/NAME, configs OUT/configs/NAME.toml, wall times OUT/times.jsonl.

Resumable: a finished run is skipped, an interrupted one continues with `--resume` (a run killed
before its first checkpoint starts again), so the same command after a kill goes on where it
stopped. One run at a time, one thread (base.toml). Analysis: analyse.py.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))  # dhwt from this checkout, as the runs use
#: Twin corpora: name -> [data] keys (none: the control, the same corpus without twins).
CORPORA = {
    "control": {},
    "sem100-p0.5": {"twins": 100, "twin_p": 0.5, "twin_kind": "sem"},
    "sem100-p0.3": {"twins": 100, "twin_p": 0.3, "twin_kind": "sem"},
    "sem100-p0.1": {"twins": 100, "twin_p": 0.1, "twin_kind": "sem"},
    "sem10-p0.1": {"twins": 10, "twin_p": 0.1, "twin_kind": "sem"},
    "cnd100": {"twins": 100, "twin_kind": "cnd"},
}
SCHEDULES = ("tied", "untied")
#: (corpus, objective), the most telling first, so that a study cut short still answers the
#: price question (masked control, p = 0.1, p = 0.5), then the causal arms, then N = 10, then
#: p = 0.3 (added once the first six arms showed there was time).
ARMS = [("control", "mlm"), ("sem100-p0.1", "mlm"), ("sem100-p0.5", "mlm"),
        ("control", "clm"), ("sem100-p0.1", "clm"), ("cnd100", "clm"), ("sem10-p0.1", "mlm"),
        ("sem100-p0.3", "mlm")]
TWIN_SEED = 7


def run_names() -> list[tuple[str, dict[str, object]]]:
    """(run name, the keys that differ from base.toml) of every run, in training order."""
    runs = []
    for corpus, objective in ARMS:
        keys = dict(CORPORA[corpus])
        if keys:
            keys["twin_seed"] = TWIN_SEED
        for schedule in SCHEDULES:
            runs.append((f"{objective}-{corpus}-{schedule}",
                         {"objective": objective, **keys, "tie_schedule": schedule}))
    return runs


def toml_value(value: object) -> str:
    return json.dumps(value) if isinstance(value, (str, list)) else repr(value)


def dhwt(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    return subprocess.run([sys.executable, "-m", "dhwt", *args], env=env, capture_output=True,
                          text=True)


def train(out: Path, name: str, keys: dict[str, object], base: Path) -> str:
    from dhwt.runs.run import is_finished, is_run, load_run

    run = out / "runs" / name
    if is_finished(run):
        return f"{name}: done already"
    config = out / "configs" / f"{name}.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(base.read_text()
                      + "".join(f"{k} = {toml_value(v)}\n" for k, v in keys.items()))
    run.parent.mkdir(parents=True, exist_ok=True)
    resume = is_run(run) and bool(load_run(run).checkpoint_steps)
    start = time.time()
    done = dhwt("train", *(["--resume"] if resume else ["--config", str(config)]), "--out",
                str(run), *([] if resume or not run.exists() else ["--overwrite"]))
    if done.returncode:
        return f"{name}: FAILED: {done.stderr.strip().splitlines()[-1:]}"
    wall = time.time() - start
    with open(out / "times.jsonl", "a") as log:
        log.write(json.dumps({"run": name, "wall_s": round(wall, 1), "resumed": resume,
                              "end": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}) + "\n")
    return f"{name}: trained in {wall:.0f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--only", nargs="*", default=[],
                        help="train only runs whose name contains one of these")
    parser.add_argument("--base", type=Path, default=HERE / "base.toml",
                        help="the shared settings (gpu.toml: the larger run)")
    args = parser.parse_args()
    out = args.out.resolve()
    for name, keys in run_names():
        if not args.only or any(s in name for s in args.only):
            print(train(out, name, keys, args.base.resolve()), flush=True)


if __name__ == "__main__":
    main()
