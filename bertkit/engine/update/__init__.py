"""One training step's update: the gradients of K micro-batches summed,
reduced once and applied (gradient_update.py), the optimizers
(optimizers.py), the learning-rate schedules (lr_schedules.py), and what a
step hands the hooks that watch it (train_step.py)."""
