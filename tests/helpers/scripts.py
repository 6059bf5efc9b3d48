"""Running the scripts/ wrappers and reading the NAME=VALUE settings they
take."""

import os
import re
import subprocess
import sys

from conftest import REPO_ROOT


def run_script(name, *args, env=None):
  full_env = dict(os.environ, PYTHON=sys.executable, TF_CPP_MIN_LOG_LEVEL="2")
  full_env.update(env or {})
  return subprocess.run(
      ["bash", os.path.join(REPO_ROOT, "scripts", name)] + list(args),
      env=full_env, capture_output=True, text=True, timeout=900)


def run_ok(name, *args, env=None):
  result = run_script(name, *args, env=env)
  assert result.returncode == 0, result.stderr[-3000:]
  return result


def settings_of(name):
  """Every setting of a script: the variables it reads with a default
  (${NAME:-...}); a fine-tuning script's `setting NAME` lines, in
  scripts/fine_tune.sh and its task's configs/fine_tuning file."""
  with open(os.path.join(REPO_ROOT, "scripts", name)) as f:
    text = f.read()
  task = re.search(r"^TASK_SETTINGS=(\w+)$", text, re.M)
  if not task:
    return set(re.findall(r"\$\{([A-Z_]+):?-", text))
  settings = set()
  for path in (os.path.join("scripts", "fine_tune.sh"),
               os.path.join("configs", "fine_tuning", task.group(1) + ".sh")):
    with open(os.path.join(REPO_ROOT, path)) as f:
      settings |= set(re.findall(r"^setting ([A-Z_0-9]+) ", f.read(), re.M))
  return settings
