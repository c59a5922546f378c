"""Training components: the loop over an ensemble of seeds with tie schedules (Trainer), the
checkpoint codec (state), groups of runs as one ensemble, members' init and freezing, lr
schedules, torchrun. Training runs through dhwt.commands.train; configs are dhwt.config's.
"""
