"""The tasks the programs give the runner, one folder each: pretraining (the
masked LM and next-sentence heads, their losses, the run), classification,
glue, squad, ner and swag (their data, heads, records, outputs and options,
each described once for fine_tuning's driver), and features
(extract_features: token features, sentence pooling)."""
