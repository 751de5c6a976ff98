"""Training: recipes, the loop, checkpoints and schedules (``zoo.train``)."""
