"""Training: the loop over an ensemble of seeds with a tie schedule (its config: dhwt.config).

`train(config, task, run_dir)` trains every seed of `config.seeds` at once and writes the run
directory (config.toml, metrics.jsonl, checkpoints/, embeddings/, figures/, report.md) that
analysis reads. `dhwt train` is `dhwt.training.command.train_command`.
"""

from dhwt.training.trainer import RunResult, train, train_group

__all__ = ["RunResult", "train", "train_group"]
