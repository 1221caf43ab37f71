"""What every method shares: configuration, models, meters, tracking, the training run and the CLI."""
