"""What a run is asked to do, validated once: TrainConfig (data, model, tying, optimisation,
placement; readable from and writable to a run's config.toml), the tie-schedule language, the
device rule, and StudyConfig (a study file: its data, runs and analysis). Upstream of training
and of the run directory, which both read it."""

from dhwt.checks import parse_seeds, split_init_from
from dhwt.config.run import TrainConfig
from dhwt.config.schedule import TieEvent, TieSchedule
from dhwt.config.study import StudyConfig

__all__ = ["StudyConfig", "TieEvent", "TieSchedule", "TrainConfig", "parse_seeds", "split_init_from"]
