"""Training: the config, the loop over an ensemble of seeds with a tie schedule, and the run dir.

`train(config, task, run_dir)` trains every seed of `config.seeds` at once and writes the run
directory (config.toml, metrics.jsonl, checkpoints/, embeddings/, figures/, report.md) that
analysis reads. `dhwt train` is `dhwt.training.command.train_command`.
"""

from dhwt.training.config import TrainConfig, parse_seeds
from dhwt.training.trainer import RunResult, train, train_group

__all__ = ["RunResult", "TrainConfig", "parse_seeds", "train", "train_group"]
