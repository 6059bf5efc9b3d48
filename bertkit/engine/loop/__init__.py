"""The run loop every training program hands its model to (runner.py), and
what it is made of: the model spec a task describes and the model_fn made of
it (model_spec.py), the engine's set-up (engine_setup.py) and precision
(precision.py), the hooks (training_hooks.py), the training clock
(training_clock.py), held-out evaluation (evaluation.py) and preemption
(preemption.py)."""
