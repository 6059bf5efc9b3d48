"""The task runner: what every training program does, written once.

What runs a training program (pretraining's trainer, the fine-tuning
driver, feature extraction) describes the model of its task as a
model_spec.ModelSpec (the variables it builds, the per-micro-batch shares of the
training loss, the eval loss and metrics, the predictions) and its input as a
function building input_fns, then calls

  prepared = runner.prepare(options, spec, model)  # engine, init_checkpoint
  runner.run(prepared, make_input_fn, runner.TrainingSchedule(...),
             train_files, runner.EvalStage(...), runner.PredictStage(...))

where `options` is the options.RunOptions built from the program's flags
(common/option_flags.py) and `model` the run_directory.Model it resolved
(its config, vocab and casing, which `prepare` writes into --output_dir).
The runner owns the rest, once: the engine (engine_setup.py: strategy,
horovod or BytePS, precision, RunConfig), what the optimizer is handed (the
run's Precision, and the distribution.Replicas it sums over, which carries
the stop vote), the model_fn (model_spec.py), the non-finite loss guard,
input sharding (one decision: the InputContext of
engine_setup.input_context), skipping corrupt records, the Estimator,
train / evaluate / predict with the hooks of training_hooks.py and the
throughput hook, preemption (a stop signal ends training after the step in
flight, checkpointed), eval_results.txt and the run summary.
"""

import atexit
import dataclasses
import functools
import os
import shutil
import tempfile
from typing import Any, Callable, Optional, Sequence

from absl import logging
import tensorflow.compat.v1 as tf

from bertkit.common import errors
from bertkit.common import options as run_options
from bertkit.engine.checkpointing import checkpoints
from bertkit.engine.checkpointing import run_directory
from bertkit.engine.distributed import cluster_environment
from bertkit.engine.distributed import distribution
from bertkit.engine.input import input_pipeline
from bertkit.engine.input import record_checks
from bertkit.engine.loop import engine_setup
from bertkit.engine.loop import evaluation as held_out
from bertkit.engine.loop import model_spec
from bertkit.engine.loop import preemption
from bertkit.engine.loop import training_clock
from bertkit.engine.loop import training_hooks
from bertkit.engine.report import run_summary
from bertkit.engine.report import throughput
from bertkit.engine.update import gradient_update

TRAIN, EVAL, PREDICT = (model_spec.TRAIN, model_spec.EVAL,
                        model_spec.PREDICT)


@dataclasses.dataclass(frozen=True)
class PreparedRun:
  """A prepared run.

  Attributes:
    spec: the program's model_spec.ModelSpec.
    setup: the engine (engine_setup.Setup); `setup.is_chief` tells whether
      this process writes results.
    options: the options.RunOptions it was prepared from.
    replicas: the distribution.Replicas the optimizer sums over (it carries
      the run's stop vote).
  """
  spec: model_spec.ModelSpec
  setup: engine_setup.Setup
  options: run_options.RunOptions
  replicas: distribution.Replicas


def prepare(options, spec, model):
  """Sets up the engine of a run, checks --init_checkpoint and describes
  the run's --output_dir.

  Args:
    options: the options.RunOptions (checked when they were built).
    spec: the program's model_spec.ModelSpec.
    model: the run_directory.Model it trains (run_directory.resolve), whose
      description the chief writes into --output_dir once --init_checkpoint
      fits it.

  Returns:
    A PreparedRun.

  Raises:
    UserError: options that contradict the machine or the global batch, an
      --output_dir holding another program's run, or an --init_checkpoint
      that does not fit the model; before anything is written.
  """
  checkpoints.check_resumable(options.output_dir, spec)
  if options.init_checkpoint:
    checkpoints.check_init_checkpoint(options.init_checkpoint,
                                      spec.variable_shapes(),
                                      model.config_source)
  setup = engine_setup.prepare(options)
  accumulation = options.optimizer.num_accumulation_steps
  if accumulation > 1:
    logging.info(
        "gradient accumulation: %d micro-batches of %d examples per replica, "
        "one update per %d examples", accumulation,
        distribution.micro_batch_size(options.train_batch_size,
                                      setup.plan.num_replicas, accumulation),
        options.train_batch_size)
  if setup.is_chief:
    run_directory.write_description(options.output_dir, model)
  # One vote per run: the optimizer sums it, StopOnSignalHook reads the sum.
  replicas = distribution.Replicas(process_group=setup.process_group,
                                   stop_vote=preemption.StopVote())
  return PreparedRun(spec=spec, setup=setup, options=options,
                     replicas=replicas)


@dataclasses.dataclass(frozen=True)
class TrainingSchedule:
  """How long training runs.

  Attributes:
    num_train_steps: the global step it ends at (the optimizer updates of
      the whole run).
    num_warmup_steps: the learning rate's warm-up updates.
    time_budget_seconds: seconds of training (training_clock.py) the
      schedule runs over instead, training stopping when they are spent (or
      at num_train_steps, whichever comes first); None: steps.
    warmup_seconds: a time budget's warm-up.
  """
  num_train_steps: int = 0
  num_warmup_steps: int = 0
  time_budget_seconds: Optional[float] = None
  warmup_seconds: float = 0.0


@dataclasses.dataclass(frozen=True)
class EvalStage:
  """Evaluation.

  Attributes:
    files: the records to evaluate, or None for no evaluation stage (under
      a TF_CONFIG cluster train_and_evaluate evaluates them during
      training, or the training records without).
    batch_size: its batch (None: the prediction's).
    steps: its steps (None: the whole input).
    message: logged before evaluating, or None.
    during_training: evaluate inside the training session
      (evaluation.HeldOutEvaluationHook): every `every_n_steps` global steps
      and at the end, with eval_history.jsonl; False: after training, as
      upstream does.
    every_n_steps: see during_training; None: at the end only.
    target, target_metric: stop training at the first evaluation whose
      `target_metric` reaches `target` (None: no target).
  """
  files: Optional[Sequence[str]] = None
  batch_size: Optional[int] = None
  steps: Optional[int] = None
  message: Optional[str] = None
  during_training: bool = False
  every_n_steps: Optional[int] = None
  target: Optional[float] = None
  target_metric: str = held_out.TARGET_METRIC


@dataclasses.dataclass(frozen=True)
class Watch:
  """What watches training besides the throughput.

  Attributes:
    clock: the run's training_clock.TrainingClock.
    evaluation: the evaluation.HeldOutEvaluationHook, or None.
    time_budget_seconds: the time budget, or None.
  """
  clock: Any = None
  evaluation: Any = None
  time_budget_seconds: Optional[float] = None


@dataclasses.dataclass(frozen=True)
class PredictStage:
  """Prediction, after evaluation.

  Attributes:
    files: the records to predict, or None for no prediction stage.
    batch_size: its batch.
    message: logged before predicting, or None.
    use_predictions: on the chief, function(list of the prediction dicts,
      in input order) -> evaluation figures of them (written as eval
      results) or None.
  """
  files: Optional[Sequence[str]] = None
  batch_size: Optional[int] = None
  message: Optional[str] = None
  use_predictions: Optional[Callable] = None
  on_every_replica: bool = False  # this process's replicas, or one device


def run(prepared, make_input_fn, schedule=TrainingSchedule(),
        train_files=None, evaluation=EvalStage(), prediction=PredictStage()):
  """Trains, evaluates and predicts, as the files given ask.

  Args:
    prepared: the PreparedRun of `prepare`.
    make_input_fn: function(files, mode, global_batch_size, num_replicas) ->
      an Estimator input_fn(params, input_context=None) over `files` (mode
      TRAIN: shuffled as the task wants and repeated; EVAL / PREDICT: one
      ordered pass, the records of EVAL with their labels).
    schedule: the TrainingSchedule.
    train_files: the training records, or None not to train.
    evaluation: the EvalStage.
    prediction: the PredictStage.

  Raises:
    errors.TrainingStopped: a stop signal ended training (checkpointed).
    errors.TrainingFailed: training cannot go on (one line says why).
  """
  setup, options = prepared.setup, prepared.options
  clock = start_clock(setup, options.output_dir)
  run_arguments = {"precision": setup.precision}
  if schedule.time_budget_seconds:
    run_arguments["time_budget"] = gradient_update.TimeBudget(
        schedule.time_budget_seconds, schedule.warmup_seconds, clock,
        setup.is_chief)
  estimator = make_estimator(model_spec.model_fn_builder(
      prepared.spec, options.init_checkpoint, options.optimizer,
      schedule.num_train_steps, schedule.num_warmup_steps, run_arguments,
      prepared.replicas, checkpoint_saver=checkpoint_saver(setup)), setup)
  throughput_summary, result, eval_files = None, None, evaluation.files
  if train_files and evaluation.target and held_out.reached_before(
      options.output_dir, evaluation.target):
    train_files = None
  if train_files:
    cleaned = list(train_files)
    if options.skip_corrupt_records:
      cleaned = skip_corrupt_records(setup, cleaned)
    # Evaluating the training records reads the cleaned copies too.
    eval_files = [dict(zip(train_files, cleaned)).get(f, f)
                  for f in eval_files or ()] or None
    eval_input_fn = make_input_fn(
        eval_files or cleaned, EVAL,
        evaluation.batch_size or prediction.batch_size, 1)
    watch = Watch(clock=clock, time_budget_seconds=schedule.time_budget_seconds)
    if eval_files and evaluation.during_training:
      watch = dataclasses.replace(watch, evaluation=(
          held_out.HeldOutEvaluationHook(
              eval_input_fn, prepared.spec.eval_outputs,
              evaluation.every_n_steps, evaluation.steps,
              options.output_dir, clock, options.train_batch_size,
              setup.is_chief, setup.run_config.session_config,
              evaluation.target, setup.extra_info, evaluation.target_metric)))
    throughput_summary = train(
        estimator, setup,
        for_this_process(setup, make_input_fn(
            cleaned, TRAIN, options.train_batch_size,
            setup.plan.num_replicas), cleaned),
        eval_input_fn, schedule.num_train_steps, evaluation.steps,
        input_files=cleaned, stop_vote=prepared.replicas.stop_vote,
        watch=watch)
    if watch.evaluation is not None and watch.evaluation.last_result:
      result, eval_files = watch.evaluation.last_result, None
  if eval_files:
    if evaluation.message:
      logging.info("%s", evaluation.message)
    result = estimator.evaluate(
        make_input_fn(eval_files, EVAL, evaluation.batch_size, 1),
        steps=evaluation.steps)
  if prediction.files:
    result = _predict_stage(estimator, prepared, make_input_fn, prediction,
                            result)
  if setup.is_chief:
    if result is not None:
      run_summary.write_eval_results(options.output_dir, result)
    target = (throughput_summary or {}).get("time_to_target")
    run_summary.print_run_summary(
        options.output_dir, throughput_summary, result,
        target and held_out.describe_target(target))


def checkpoint_saver(setup):
  """What makes the chief's checkpoint saver (checkpoints.PeriodicSaverHook:
  nothing saved or written before the first step), or None where
  Estimator's own saves: a TF_CONFIG cluster's collective training adds its
  own saver whatever the run hands it."""
  config = setup.run_config
  if setup.plan.cluster or not config.save_checkpoints_steps:
    return None
  return functools.partial(checkpoints.PeriodicSaverHook, config.model_dir,
                           config.save_checkpoints_steps)


def start_clock(setup, output_dir):
  """The run's training clock, continued from the checkpoint it resumes.

  The chief also drops the evaluations recorded past that checkpoint
  (a run killed between an evaluation and the next checkpoint redoes them).
  """
  clock = training_clock.TrainingClock()
  step = input_pipeline.checkpoint_step(output_dir)
  if not step:
    return clock
  recorded = training_clock.read_checkpoint_clock(output_dir, step)
  if recorded is None:
    logging.warning("no training clock recorded for checkpoint step %d in "
                    "%s; training time counts from this run", step,
                    output_dir)
  else:
    clock.resume_from(*recorded)
  if setup.is_chief:
    held_out.keep_history_up_to(output_dir, step)
  return clock


def _predict_stage(estimator, prepared, make_input_fn, prediction, result):
  """Predicts `prediction.files`; returns the run's evaluation figures:
  those of its predictions on the chief when it has any, else `result`."""
  if prediction.message:
    logging.info("%s", prediction.message)
  input_fn = make_input_fn(prediction.files, PREDICT, prediction.batch_size, 1)
  predicted = (list(predictions(prepared, input_fn))
               if prediction.on_every_replica else predict(estimator, input_fn))
  if not prepared.setup.is_chief or prediction.use_predictions is None:
    return result
  result = prediction.use_predictions(predicted) or result
  latest = tf.train.latest_checkpoint(prepared.options.output_dir)
  if result is not None and latest and "global_step" not in result:
    # None when predicting straight from --init_checkpoint.
    result["global_step"] = int(tf.train.load_variable(latest, "global_step"))
  return result


def prediction_strategy(setup):
  """The strategy whose replicas predict together, or None (one device).

  Several replicas of this process predict together; a run of several
  processes predicts on one device in each.
  """
  plan = setup.plan
  if setup.strategy is None or plan.num_workers > 1 or len(plan.devices) < 2:
    return None
  return setup.strategy


def predictions(prepared, input_fn):
  """Yields the prediction dicts of every record of `input_fn`, in order.

  The replicas of the run's strategy in this process (mirrored,
  central_storage) predict each batch together (replicated_predictions,
  prediction_strategy); otherwise one device predicts. The weights are
  --init_checkpoint's, or those of the run's output_dir when it holds a
  checkpoint.

  Args:
    prepared: the PreparedRun of `prepare`, its spec having `predictions`.
    input_fn: an Estimator input_fn of the records, in order.
  """
  options = prepared.options
  estimator = make_estimator(model_spec.model_fn_builder(
      prepared.spec, options.init_checkpoint, options.optimizer, 0, 0, {},
      prepared.replicas,
      predict_strategy=prediction_strategy(prepared.setup)), prepared.setup)
  yield from estimator.predict(input_fn, yield_single_examples=True)


def predict(estimator, input_fn):
  """The prediction dicts of every record of `input_fn`, in order."""
  predictions = []
  for prediction in estimator.predict(input_fn, yield_single_examples=True):
    predictions.append(prediction)
    if len(predictions) % 1000 == 0:
      logging.info("Predicted %d records", len(predictions))
  return predictions


def for_this_process(setup, input_fn, files):
  """`input_fn` reading this process's share of the training `files`.

  One decision for every engine: tf.distribute strategies hand the input_fn
  their InputContext (one pipeline per worker); horovod ranks and BytePS
  workers get theirs from engine_setup.input_context. The input_fns share
  out whole files when there are at least as many as pipelines, else
  records; the log says which, from the same input_pipeline.process_share
  the input_fn uses.
  """
  context = engine_setup.input_context(setup)
  if context is None:
    return input_fn
  share = input_pipeline.process_share(files, context)
  rank, size = share.pipeline_id, share.num_pipelines
  if share.by_record:
    logging.info("%s rank %d of %d reads one record in %d, from record "
                 "%d, of %d input file(s) (fewer files than ranks)",
                 setup.plan.name, rank, size, size, rank, len(files))
  else:
    logging.info("%s rank %d reads %d of %d input files, first %s",
                 setup.plan.name, rank, len(share.files), len(files),
                 share.files[0])

  def input_fn_of_rank(params=None):
    return input_fn(params, input_context=context)

  return input_fn_of_rank


def skip_corrupt_records(setup, input_files):
  """The input files without their corrupt records (--skip_corrupt_records).

  Cleaned copies of the affected files live in a temporary directory removed
  at exit; the count goes to the log and the throughput summary.
  """
  scratch = tempfile.mkdtemp(prefix="bert-clean-records-")
  atexit.register(shutil.rmtree, scratch, True)
  files, skipped = record_checks.without_corrupt_records(input_files,
                                                         scratch)
  setup.extra_info["corrupt_records_skipped"] = len(skipped)
  if skipped:
    logging.warning("--skip_corrupt_records: skipped %d corrupt record(s): %s",
                    len(skipped), "; ".join(
                        "%s record %d (byte %d)" % s for s in skipped))
  else:
    logging.info("--skip_corrupt_records: no corrupt record in %d file(s)",
                 len(input_files))
  return files


def make_estimator(model_fn, setup, params=None):
  """The Estimator of a training program, with the loss Estimator watches.

  Estimator always stops on a NaN loss through its own NanTensorHook. Where a
  non-finite loss must not stop the run (fp16 overflow steps, or
  --nostop_on_nonfinite_loss), it is shown a finite stand-in; NonFiniteLossHook
  reports the real value.
  """
  if setup.precision.stop_on_nonfinite_loss:
    wrapped = model_fn
  else:
    def wrapped(features, labels, mode, params):
      spec = model_fn(features, labels, mode, params)
      if mode != TRAIN:
        return spec
      finite = tf.where(tf.is_finite(spec.loss), spec.loss,
                        tf.zeros_like(spec.loss))
      return spec._replace(loss=finite)
  return tf.estimator.Estimator(model_fn=wrapped, config=setup.run_config,
                                params=params)


def task_name(plan):
  """`worker-0`, `chief-0`, `rank-1`, or `local` for naming per-task files."""
  group = distribution.process_group()
  if group:
    return "rank-%d" % group.rank
  if plan.cluster:
    return cluster_environment.cluster_task()[0]
  return "local"


# Size: the estimator and its inputs, then what the engine hands over.
def train(estimator, setup, train_input_fn, eval_input_fn, max_steps,
          eval_steps, input_files=None, stop_vote=None, watch=Watch()):
  """Trains to `max_steps` global steps with throughput logging.

  SIGTERM/SIGINT stop training after the step in flight (preemption.py).

  Args:
    estimator: from make_estimator.
    setup: the engine_setup.Setup.
    train_input_fn: training input.
    eval_input_fn: evaluation input (train_and_evaluate under TF_CONFIG).
    max_steps: the global step to train to.
    eval_steps: evaluation steps under TF_CONFIG.
    input_files: the TFRecord files train_input_fn reads, to name the one
      holding a corrupt record.
    stop_vote: the preemption.StopVote the optimizer sums; with several
      processes it decides when they stop.
    watch: the run's Watch: its clock (evaluation is left out of the
      throughput figures), held-out evaluation and time budget.

  Returns:
    The throughput summary dict (see throughput.ThroughputHook).

  Raises:
    errors.TrainingStopped: a stop signal ended training (checkpoint written).
    errors.TrainingFailed: training cannot go on (one line says why).
  """
  run_options = setup.options
  hook = throughput.ThroughputHook(
      run_options.output_dir, run_options.train_batch_size,
      setup.plan.num_replicas, max_steps,
      log_every=run_options.log_every_n_steps,
      warmup_steps=run_options.throughput_warmup_steps,
      is_chief=setup.is_chief, extra_info=setup.extra_info, clock=watch.clock,
      time_budget_seconds=watch.time_budget_seconds)
  stop_hook = training_hooks.StopOnSignalHook(
      stop_vote if setup.plan.num_workers > 1 else None)
  # The evaluation hook first: its end() adds the time to target to the
  # summary the throughput hook's end() writes.
  hooks = [watch.evaluation] if watch.evaluation is not None else []
  fingerprint = training_hooks.WeightsFingerprintHook(
      run_options.output_dir, task_name(setup.plan), setup.strategy)
  hooks += [hook, fingerprint, stop_hook]
  if watch.time_budget_seconds:
    hooks.append(training_hooks.TimeBudgetHook(watch.time_budget_seconds))
  hooks.append(training_hooks.NonFiniteLossHook(setup.precision))
  watchdog = None
  if setup.plan.num_workers > 1 and setup.plan.collective_timeout_seconds:
    watchdog = training_hooks.StallWatchdogHook(
        setup.plan.collective_timeout_seconds)
    hooks.append(watchdog)
  if run_options.profile_steps:
    hooks.append(training_hooks.ProfilerHook(run_options.output_dir,
                                             *run_options.profile_steps))
  listeners = [throughput.CheckpointMarker(hook)]
  if watch.clock is not None and setup.is_chief:
    listeners.append(held_out.ClockRecorder(run_options.output_dir,
                                            watch.clock))
  if setup.process_engine:
    # A non-zero rank saves its final weights in its scratch model_dir.
    hooks.append(setup.process_engine.broadcast_hook(
        None if setup.is_chief else setup.run_config.model_dir))
    if not setup.is_chief:
      # Saving listeners need a CheckpointSaverHook; only rank 0 has one.
      listeners = []
  try:
    with preemption.catching_stop_signals():
      if setup.plan.cluster:
        tf.estimator.train_and_evaluate(
            estimator,
            tf.estimator.TrainSpec(train_input_fn, max_steps=max_steps,
                                   hooks=hooks, saving_listeners=listeners),
            tf.estimator.EvalSpec(eval_input_fn, steps=eval_steps,
                                  start_delay_secs=0, throttle_secs=60))
      else:
        estimator.train(train_input_fn, max_steps=max_steps, hooks=hooks,
                        saving_listeners=listeners)
  except tf.train.NanLossDuringTrainingError:
    raise errors.TrainingFailed(
        "the training loss became NaN; stopping without checkpointing it. "
        "Lower --learning_rate or check the data") from None
  except tf.errors.OpError as e:
    raise _training_failure(e, setup, input_files) from None
  finally:
    # Training failed in this process: no step is coming, and the error
    # says why (hooks' end() does not run after an exception).
    if watchdog:
      watchdog.stop()
  if stop_hook.stopped_at_step is not None or preemption.requested_signal():
    if setup.process_engine:
      setup.process_engine.barrier()
    raise errors.TrainingStopped(_stop_message(setup, stop_hook.final_step))
  return getattr(hook, "summary", None)


def _training_failure(error, setup, input_files):
  """The TrainingFailed for an OpError that ended training, or `error`."""
  saving = checkpoints.save_failure_message(error, setup.run_config.model_dir)
  if saving:
    return errors.TrainingFailed(saving)
  reason = errors.op_error_reason(error.message)
  if isinstance(error, (tf.errors.DeadlineExceededError,
                        tf.errors.UnavailableError)):
    return errors.TrainingFailed(
        "lost contact with another worker (%s: %s); rerun every worker with "
        "the same command to resume from the last checkpoint" %
        (type(error).__name__, reason))
  if setup.process_engine and setup.process_engine.lost_a_rank(error.message):
    return errors.TrainingFailed(
        "another %s rank failed or died, and %s shut down; rerun the same "
        "command to resume every rank from the last checkpoint" % (
            setup.plan.name, setup.plan.name))
  if isinstance(error, tf.errors.DataLossError):
    return errors.TrainingFailed(record_checks.corrupt_input_message(
        input_files or [], reason))
  return error


def _stop_message(setup, step):
  """The line of a process that stopped on a signal at global step `step`
  (None: no training step ran, e.g. the run was already complete)."""
  latest = tf.train.latest_checkpoint(setup.run_config.model_dir)
  if step is None:
    step = int(tf.train.load_variable(latest, "global_step")) if latest else 0
  checkpoint = "model.ckpt-%d" % step
  if setup.is_chief and latest:
    checkpoint = os.path.basename(latest)
  return preemption.stop_message(step, checkpoint, setup.is_chief)
