"""Fine-tuning tasks the runner runs: the classifier and SQuAD (their data,
features, heads and outputs)."""
