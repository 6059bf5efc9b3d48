"""distribution.py: choosing and building the strategy from flag values."""


import pytest
import tensorflow.compat.v1 as tf

from bertkit.common import options
from bertkit.common.errors import UserError
from bertkit.engine.distributed import distribution
from bertkit.engine.loop import preemption


def flag_values(**overrides):
  """The DistributionOptions of these tests' runs, with `overrides`."""
  values = dict(distribution_strategy=None, cpu_replicas=0, num_gpus=0,
                multi_gpu=False, all_reduce_alg="auto",
                collective_timeout_seconds=600)
  values.update(overrides)
  return options.DistributionOptions(**values)


@pytest.fixture(autouse=True)
def no_cluster(monkeypatch):
  monkeypatch.delenv("TF_CONFIG", raising=False)


def test_central_storage_computes_on_every_local_device():
  plan = distribution.plan(
      flag_values(distribution_strategy="central_storage", cpu_replicas=2), 0)
  assert plan.name == "central_storage"
  assert plan.devices == ["/cpu:0", "/cpu:1"] and plan.num_replicas == 2
  assert distribution.describe(plan, 8) == (
      "strategy=central_storage replicas=2 (1 worker(s) x /cpu:0,/cpu:1) "
      "global_batch=8 per_replica_batch=4")


@pytest.mark.parametrize("alg", ["hierarchical_copy", "one_device", "ring"])
def test_central_storage_has_no_all_reduce_choice(alg):
  with pytest.raises(UserError) as e:
    distribution.plan(
        flag_values(distribution_strategy="central_storage", cpu_replicas=2,
                    all_reduce_alg=alg), 0)
  assert str(e.value) == (
      "--all_reduce_alg=%s does not apply to central_storage: gradients are "
      "always reduced to the variables' device" % alg)


def test_central_storage_keeps_one_copy_of_each_variable_on_the_cpu(graph):
  del graph
  plan = distribution.plan(
      flag_values(distribution_strategy="central_storage", cpu_replicas=2), 0)
  strategy = distribution.build_strategy(plan)
  assert strategy.num_replicas_in_sync == 2
  with strategy.scope():
    var = tf.get_variable("w", initializer=tf.ones([3]))
  copies = strategy.experimental_local_results(var)
  assert len(copies) == 1
  assert copies[0].device.endswith("device:CPU:0")


def test_replicas_sum_through_the_process_group_with_the_stop_vote(graph):
  """What the optimizer is handed: one all-reduce carries the tensors and
  the stop vote, whose sum is recorded for the hook."""
  compressed = []

  def sum_across_processes(tensors, compress):
    compressed.append(compress)
    return [t * 2.0 for t in tensors]  # two processes holding equal values

  vote = preemption.StopVote()
  replicas = distribution.Replicas(
      distribution.ProcessGroup("test", 0, 2, sum_across_processes), vote)
  sums, recorded = replicas.sum_with_stop_vote([tf.constant([1.0, 3.0])])
  with tf.Session() as sess:
    assert sess.run(sums)[0].tolist() == [2.0, 6.0]
    assert sess.run(recorded) == 0.0  # no signal came
  assert compressed == [True] and not vote.agreed
  with tf.Session() as sess:
    sess.run(vote.record(tf.constant(1.0)))
  assert vote.agreed


def test_default_replicas_are_the_graphs_with_no_vote(graph):
  """A single-process user of optimization.py: one replica, no vote."""
  value = tf.constant(5.0)
  sums, recorded = distribution.Replicas().sum_with_stop_vote([value])
  assert sums == [value] and recorded.type == "NoOp"
