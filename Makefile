# Two commands on a fresh machine with Python 3.11:
#   make run    set up .venv, then vocab -> data -> pretrain + eval -> export on the sample
#   make test       set up .venv with test tools, then every test not marked slow
#   make test-all   the same, then every test (what CI runs)
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
VPY := $(VENV)/bin/python
WORK_DIR ?= $(CURDIR)/runs/sample
PYTEST_ARGS ?=
# Tests run in this many pytest-xdist workers; a module's tests stay on one
# worker (tests/conftest.py groups them), so its fixtures are built once.
TEST_WORKERS ?= 2
PYTEST := TF_CPP_MIN_LOG_LEVEL=2 $(VPY) -m pytest -q -n $(TEST_WORKERS)

.PHONY: run test test-all venv clean

$(VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip
	$(VPY) -m pip install --quiet -r requirements.txt
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed requirements-dev.txt
	$(VPY) -m pip install --quiet -r requirements-dev.txt
	touch $@

venv: $(VENV)/.installed

run: $(VENV)/.installed
	PYTHON=$(VPY) WORK_DIR=$(WORK_DIR) MAX_SEQ_LENGTH=128 \
	  bash scripts/run_create.sh DUPE_FACTOR=2
	PYTHON=$(VPY) WORK_DIR=$(WORK_DIR) NUM_TRAIN_STEPS=100 \
	  NUM_WARMUP_STEPS=10 SAVE_CHECKPOINTS_STEPS=50 MAX_EVAL_STEPS=10 \
	  bash scripts/run_pre.sh --log_every_n_steps=20
	@echo "Hugging Face model: $(WORK_DIR)/pretrain/export/huggingface" \
	  "(transformers.BertForPreTraining.from_pretrained); Google layout and" \
	  "SavedModel next to it"

test: $(VENV)/.installed-dev
	$(PYTEST) -m "not slow" $(PYTEST_ARGS)

test-all: $(VENV)/.installed-dev
	$(PYTEST) $(PYTEST_ARGS)

clean:
	rm -rf runs
