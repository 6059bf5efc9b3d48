#!/usr/bin/env python3
"""Runs a horovod (Gloo) job inside a Slurm allocation: one srun task a rank.

Usage, in an sbatch script or an salloc shell:

    python scripts/slurm/horovod_srun.py [--network-interface IF] \\
        -- python run_pretraining.py --distribution_strategy=horovod ...
    python scripts/slurm/horovod_srun.py --hosts     # prints host:slots,...

This horovod is built with Gloo and without MPI, so `srun` alone cannot
start its ranks: Gloo ranks meet through a rendezvous server, which
horovodrun runs. horovodrun, however, starts the ranks itself (ssh to the
other nodes) and, when it gets SIGTERM, kills them 5 seconds later, which
cuts short the checkpoint a stopped rank writes. So this launcher does
horovodrun's part and leaves the rest to Slurm:

1. it assigns the ranks to the allocation's tasks as Slurm's default block
   distribution does (the tasks of node 0 first, then node 1, ...), with
   horovod's own assignment function, and starts horovod's rendezvous
   server with that plan on this node;
2. it runs `srun` over the whole allocation; each task (this script again,
   with --task) checks that its Slurm task id, node and local id are the
   plan's, sets the HOROVOD_* variables horovodrun would set and replaces
   itself with the command, so the ranks are Slurm's tasks and get Slurm's
   signals (scancel, the time limit, --signal) directly.

The launcher ignores SIGINT and SIGTERM: srun receives them too and deals
with its tasks, and the rendezvous server must live until srun returns.
It exits with srun's exit code.

`--hosts` prints the allocation as horovodrun's -H list (`node1:4,node2:4`),
for `horovodrun -np $SLURM_NTASKS -H "$(... --hosts)" --gloo ...` where ssh
between the nodes is allowed.
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, REPO_ROOT)

# pylint: disable=g-import-not-at-top,wrong-import-position
from bertkit.common import errors
from bertkit.common import slurm_env
from bertkit.common.errors import UserError

# The plan, from the launcher to the tasks: a JSON list of
# [hostname, rank, local_rank, cross_rank, size, local_size, cross_size].
PLAN_ENV = "BERT_HOROVOD_SLURM_PLAN"
SLOT_FIELDS = ("hostname", "rank", "local_rank", "cross_rank", "size",
               "local_size", "cross_size")


def slurm_var(name):
  value = os.environ.get(name, "")
  if not value:
    raise UserError("%s is not set: run this inside a Slurm allocation "
                    "(sbatch or salloc) with several tasks" % name)
  return value


def allocation_hosts():
  """[(node name, tasks on it)] of this allocation, in Slurm's node order."""
  nodelist = slurm_var("SLURM_JOB_NODELIST")
  counts_text = slurm_var("SLURM_TASKS_PER_NODE")
  nodes = slurm_env.expand_hostlist(nodelist)
  counts = slurm_env.expand_tasks_per_node(counts_text)
  if len(counts) != len(nodes):
    raise UserError("SLURM_TASKS_PER_NODE=%s gives tasks for %d node(s) but "
                    "SLURM_JOB_NODELIST=%s names %d" % (
                        counts_text, len(counts), nodelist, len(nodes)))
  return list(zip(nodes, counts))


def host_list(hosts):
  return ",".join("%s:%d" % pair for pair in hosts)


def rendezvous_address(interface):
  """This node's IPv4 address on `interface`, or that of its host name."""
  if not interface:
    return socket.gethostbyname(socket.gethostname())
  import psutil  # pylint: disable=import-outside-toplevel
  for address in psutil.net_if_addrs().get(interface, []):
    if address.family == socket.AF_INET:
      return address.address
  raise UserError("--network-interface %s: this node has no IPv4 address "
                  "on it (interfaces: %s)" % (
                      interface, ", ".join(sorted(psutil.net_if_addrs()))))


def launch(command, interface):
  """Starts the rendezvous server and srun; returns srun's exit code."""
  try:
    # pylint: disable=import-outside-toplevel
    from horovod.runner.common.util import hosts as horovod_hosts
    from horovod.runner.http.http_server import RendezvousServer
  except ImportError as e:
    raise UserError("horovod is not importable by %s (%s): run "
                    "scripts/install_horovod.sh" % (sys.executable, e))
  hosts = allocation_hosts()
  num_ranks = sum(count for _, count in hosts)
  plan = horovod_hosts.get_host_assignments(
      horovod_hosts.parse_hosts(host_list(hosts)), num_ranks)
  server = RendezvousServer()
  port = server.start()
  server.init(plan)
  env = dict(os.environ,
             HOROVOD_GLOO_RENDEZVOUS_ADDR=rendezvous_address(interface),
             HOROVOD_GLOO_RENDEZVOUS_PORT=str(port),
             HOROVOD_CONTROLLER="gloo", HOROVOD_CPU_OPERATIONS="gloo",
             PYTHONUNBUFFERED="1")
  env[PLAN_ENV] = json.dumps(
      [[getattr(slot, f) for f in SLOT_FIELDS] for slot in plan])
  if interface:
    env["HOROVOD_GLOO_IFACE"] = interface
  print("horovod on Slurm: %d ranks on %s, rendezvous at %s:%d" % (
      num_ranks, host_list(hosts), env["HOROVOD_GLOO_RENDEZVOUS_ADDR"],
      port), file=sys.stderr, flush=True)
  for signum in (signal.SIGINT, signal.SIGTERM):
    signal.signal(signum, signal.SIG_IGN)
  try:
    srun = subprocess.Popen(
        ["srun", "--ntasks=%d" % num_ranks, "--distribution=block",
         sys.executable, os.path.abspath(__file__), "--task", "--"] + command,
        env=env, preexec_fn=restore_default_signals)
    return srun.wait()
  except FileNotFoundError:
    raise UserError("srun is not on PATH: run this on a node of the Slurm "
                    "allocation") from None
  finally:
    server.stop()


def restore_default_signals():
  """srun must see SIGINT and SIGTERM, which the launcher ignores."""
  for signum in (signal.SIGINT, signal.SIGTERM):
    signal.signal(signum, signal.SIG_DFL)


def become_rank(command):
  """In an srun task: sets this task's HOROVOD_* variables, runs `command`."""
  plan = [dict(zip(SLOT_FIELDS, slot))
          for slot in json.loads(slurm_var(PLAN_ENV))]
  rank = int(slurm_var("SLURM_PROCID"))
  node, local = slurm_var("SLURMD_NODENAME"), int(slurm_var("SLURM_LOCALID"))
  if rank >= len(plan):
    raise UserError("Slurm task %d is beyond the %d ranks planned" % (
        rank, len(plan)))
  slot = plan[rank]
  if (slot["hostname"], slot["local_rank"]) != (node, local):
    raise UserError(
        "Slurm task %d runs on %s as local task %d, but horovod's plan puts "
        "rank %d on %s as local rank %d: run the step with the default block "
        "distribution" % (rank, node, local, rank, slot["hostname"],
                          slot["local_rank"]))
  os.environ.update({"HOROVOD_" + field.upper(): str(slot[field])
                     for field in SLOT_FIELDS})
  os.environ.pop(PLAN_ENV)
  try:
    os.execvp(command[0], command)
  except OSError as e:
    raise UserError("cannot run %s: %s" % (command[0], e.strerror))


def parse_args(argv):
  parser = argparse.ArgumentParser(
      description=__doc__.split("\n\n")[0],
      usage="%(prog)s [--network-interface IF] -- COMMAND...\n"
            "       %(prog)s --hosts")
  parser.add_argument("--hosts", action="store_true",
                      help="print the allocation as horovodrun's -H list")
  parser.add_argument("--network-interface", default="",
                      help="interface the nodes reach each other by "
                           "(horovodrun's option of that name); default: "
                           "the address of this node's host name")
  parser.add_argument("--task", action="store_true", help=argparse.SUPPRESS)
  parser.add_argument("command", nargs=argparse.REMAINDER,
                      help="after --: the command every rank runs")
  args = parser.parse_args(argv)
  if args.command[:1] == ["--"]:
    args.command = args.command[1:]
  if not args.hosts and not args.command:
    raise UserError("no command: give it after --, e.g. -- python "
                    "run_pretraining.py --distribution_strategy=horovod ...")
  return args


def main(argv):
  args = parse_args(argv[1:])
  if args.hosts:
    print(host_list(allocation_hosts()))
    return 0
  if args.task:
    become_rank(args.command)
  return launch(args.command, args.network_interface)


if __name__ == "__main__":
  sys.exit(errors.main_with_user_errors(main)(sys.argv))
