"""Training components: the loop over an ensemble of seeds with tie schedules (Trainer), the
checkpoint codec (state), groups of runs as one ensemble, members' init and freezing, lr
schedules, torchrun; and the lifecycles: a run's (dhwt.training.runner: train_run, train_group)
and a study's (dhwt.training.study, its jobs dhwt.training.study_jobs). Configs are
dhwt.config's.
"""
