"""The tasks the training programs give the runner: pretraining (the masked
LM and next-sentence heads, their losses), the classifier and SQuAD (their
data, features, heads and outputs; fine_tuning holds what the two share)."""
