"""Train a causal LM on a text corpus from one TOML: its [text] table names the corpus, tokenizer
and context (dhwt.languages.text_task), its [train] table holds TrainConfig keys.

    python experiments/wikitext/run.py experiments/wikitext/cpu.toml --out runs/wt2-cpu \
        [--data ../shared/data] [--steps N] [--eval-windows N] [--resume]

--steps and --eval-windows override the file (smoke tests: a few steps, a few evaluation windows).
The trainer reads the snapshots/metrics layout of every dhwt run; `dhwt knn RUN@STEP ...` compares
its embeddings afterwards.
"""

from __future__ import annotations

import argparse
import os
import tomllib

from dhwt.languages.text_task import load_text_task
from dhwt.training.config import TrainConfig
from dhwt.training.trainer import train


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("config")
    parser.add_argument("--out", required=True)
    parser.add_argument("--data", help="WikiText-2 folder or archive (else WIKITEXT2_PATH / "
                                       "DHWT_DATA / HF datasets)")
    parser.add_argument("--steps", type=int)
    parser.add_argument("--eval-windows", type=int)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    with open(args.config, "rb") as fh:
        spec = tomllib.load(fh)
    text, options = spec["text"], dict(spec["train"])
    if args.steps is not None:
        options["steps"] = args.steps
    if args.data:
        os.environ["WIKITEXT2_PATH"] = args.data
    task = load_text_task(text["corpus"], text["tokenizer"], text["seq_len"],
                          eval_windows=args.eval_windows or text.get("eval_windows"))
    result = train(TrainConfig.from_dict(options, args.config), task, args.out, args.resume)
    print(f"trained {result.step} steps in {result.seconds:.1f} s: {args.out}")


if __name__ == "__main__":
    main()
