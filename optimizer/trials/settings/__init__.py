"""How a trial's settings (batch size, epochs, learning rate, workers) reach the script: flags,
templates, Hydra overrides and config files (:mod:`~optimizer.trials.settings.config_args`),
and the config files themselves, read and copied (:mod:`~optimizer.trials.settings.config_files`)."""
