"""Model FLOPs of a pretraining example, and the utilisation they give.

What the benchmark divides by a peak to report model FLOP utilisation (MFU),
and what benchmarks/compare_pytorch.py uses against NumPy's matmul rate.
"""


def pretraining_flops(hidden_size, num_layers, intermediate_size, vocab_size,
                      seq_length, max_predictions_per_seq):
  """Model FLOPs of one pretraining example, forward and backward.

  Counts the matrix multiplications only, each multiply-add as 2 FLOPs, and
  the backward pass as twice the forward (one product for the input gradient,
  one for the weight gradient):

    encoder   = 6 * W * S,  W = L * (4 H^2 + 2 H I)
                (query, key, value and attention-output kernels, H x H each;
                intermediate and output kernels, H x I each)
    attention = 3 * L * (2 S^2 H + 2 S^2 H) = 12 * L * S^2 * H
                (Q K^T and probs V over all heads, forward + backward)
    mlm_head  = 6 * P * (H^2 + H V)
                (transform dense and tied vocab projection, on the P masked
                positions only; in training the pretraining model's
                get_masked_lm_output runs on the filled slots alone, as the
                PyTorch peer does, so where records leave slots empty both
                compute a little less than this counts)

  Embedding lookups, biases, layer norms, softmax, the pooler and the
  next-sentence head are left out (< 1% for the released shapes).

  Args:
    hidden_size: H.
    num_layers: L.
    intermediate_size: I.
    vocab_size: V.
    seq_length: S.
    max_predictions_per_seq: P.

  Returns:
    dict of ints: encoder, attention, mlm_head and total FLOPs per example.
  """
  h, s, p = hidden_size, seq_length, max_predictions_per_seq
  encoder_weights = num_layers * (4 * h * h + 2 * h * intermediate_size)
  result = {
      "encoder": 6 * encoder_weights * s,
      "attention": 12 * num_layers * s * s * h,
      "mlm_head": 6 * p * (h * h + h * vocab_size),
  }
  result["total"] = sum(result.values())
  return result


def flops_for_config(config, seq_length, max_predictions_per_seq):
  """`pretraining_flops` of a BertConfig; returns the total per example."""
  return pretraining_flops(
      config.hidden_size, config.num_hidden_layers, config.intermediate_size,
      config.vocab_size, seq_length, max_predictions_per_seq)["total"]


def add_mfu(row, flops_per_example, peak_tflops, peak_scales_with_replicas):
  """Sets model_gflop_per_example, model_tflops (achieved) and mfu of a row.

  Args:
    row: dict with examples_per_sec and replicas.
    flops_per_example: from `pretraining_flops`.
    peak_tflops: peak of one device, or None (no MFU).
    peak_scales_with_replicas: True when every replica has its own device
      (GPUs); False when the replicas share one CPU whose peak is given.
  """
  eps = row["examples_per_sec"]
  row["model_gflop_per_example"] = flops_per_example / 1e9
  row["model_tflops"] = eps * flops_per_example / 1e12 if eps else None
  peak = None
  if peak_tflops:
    peak = peak_tflops * (row["replicas"] if peak_scales_with_replicas else 1)
  row["peak_tflops"] = peak
  row["mfu"] = row["model_tflops"] / peak if peak and eps else None
