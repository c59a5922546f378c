"""What a run is asked to do, validated once: TrainConfig (data, model, tying, optimisation,
placement; readable from and writable to a run's config.toml), the tie-schedule language, and the
device rule. Upstream of training and of the run directory, which both read it."""

from dhwt.checks import parse_seeds, split_init_from
from dhwt.config.run import TrainConfig
from dhwt.config.schedule import TieEvent, TieSchedule

__all__ = ["TieEvent", "TieSchedule", "TrainConfig", "parse_seeds", "split_init_from"]
