"""HF transformers' GPT2LMHeadModel trained on dhwt's footing: the external reference arm of the
tying comparison (issue 34).

The same data as a dhwt run of the study file: the corpus, tokenizer and windows of its [data]
table read through dhwt (dhwt.text.text_task), each seed's training windows drawn by the
generator a dhwt member of that seed draws them with (stream "data" of the seed, dhwt.training
.trainer), and the same evaluation windows and weights (perplexity = exp of the weighted mean
cross-entropy over every valid position). The model is GPT-2 as HF builds it (its own init,
learned positions, tanh gelu, pre-LN, final LayerNorm, dropout 0.1 at its places), widths from
the study's [train] table, tied (`tie_word_embeddings`) or untied; AdamW with the study's betas,
eps, weight decay and constant learning rate. Writes one JSON line per evaluation to OUT.

    DHWT_DATA=../shared/data python experiments/tying_wikitext/hf_reference.py \\
        experiments/tying_wikitext/gpt2_convention.toml --tie tied --seed 1 --out hf-tied-1.jsonl

Needs the bench extra (transformers); dhwt itself never imports it.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from dhwt.models.init import member_generator
from dhwt.text.text_task import load_text_task
from dhwt.training.trainer import DATA_STREAM
from dhwt.userfiles import parse_toml


def build(train: dict, vocab: int, tied: bool) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=vocab, n_positions=train["seq_len"], n_embd=train["d_model"],
                        n_layer=train["n_layers"], n_head=train["n_heads"],
                        n_inner=train["d_ff"], resid_pdrop=train["dropout"],
                        embd_pdrop=train["dropout"], attn_pdrop=train["dropout"],
                        tie_word_embeddings=tied, bos_token_id=0, eos_token_id=0)
    config._attn_implementation = "sdpa"
    return GPT2LMHeadModel(config)


@torch.no_grad()
def valid_loss(model: torch.nn.Module, batch, rows: int = 256) -> float:
    """sum(weights * CE) over the evaluation windows, as dhwt's metrics compute it."""
    model.eval()
    total = 0.0
    for start in range(0, batch.inputs.shape[0], rows):
        part = slice(start, start + rows)
        logits = model(input_ids=batch.inputs[part]).logits
        ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch.targets[part].reshape(-1),
                             ignore_index=-100, reduction="none")
        total += float((batch.weights[part].reshape(-1) * ce).sum())
    model.train()
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("study")
    parser.add_argument("--tie", choices=["tied", "untied"], required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--steps", type=int, help="default: the study's")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    study = parse_toml(Path(args.study).read_text("utf-8"), f"study file {args.study}")
    data, train = study["data"], {**study["train"], "seq_len": study["data"]["seq_len"]}
    torch.set_num_threads(train.get("threads", 1))
    task = load_text_task(data["corpus"], data["tokenizer"], data["seq_len"])
    torch.manual_seed(args.seed)  # HF draws its init from the global generator
    model = build(train, len(task.vocab), args.tie == "tied")
    optimizer = torch.optim.AdamW(model.parameters(), lr=train["lr"],
                                  betas=(train["beta1"], train["beta2"]), eps=train["eps"],
                                  weight_decay=train["weight_decay"], foreach=True)
    data_stream = member_generator(args.seed, DATA_STREAM)
    valid = task.eval_batch("valid")
    steps, every = args.steps or train["steps"], train["eval_every"]
    start = time.perf_counter()
    with open(args.out, "w") as out:
        for step in range(steps + 1):
            if step % every == 0 or step == steps:
                loss = valid_loss(model, valid)
                line = {"step": step, "seed": args.seed, "tie": args.tie, "split": "valid",
                        "loss": loss, "perplexity": math.exp(loss),
                        "seconds": round(time.perf_counter() - start, 1)}
                out.write(json.dumps(line) + "\n")
                out.flush()
                print(line, flush=True)
            if step == steps:
                break
            batch = task.train_batch(data_stream, train["batch_size"])
            logits = model(input_ids=batch.inputs).logits
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch.targets.reshape(-1))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    main()
