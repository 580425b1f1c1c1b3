# rewardseal — one virtual environment for the whole repository (.venv), pinned by requirements.lock.
# `make test` alone works on a fresh clone: it runs setup, lint and the generated-code check first.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.setup-stamp
DISTS  := clients/python services/worker services/control services/mockmed
SRC    := clients/python/src services/worker/src services/control/src services/mockmed/src
HAND   := $(SRC) tests tools bench deploy

.PHONY: setup proto proto-check lint test demo up down status bench lock clean

setup: $(STAMP)

$(STAMP): requirements.lock clients/python/pyproject.toml services/worker/pyproject.toml services/control/pyproject.toml services/mockmed/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.lock
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation $(addprefix -e ,$(DISTS))
	touch $@

## Regenerate the committed stubs in clients/python/src/rewardseal/v1 from proto/.
proto: setup
	$(PY) tools/genproto.py

## Fail when the committed stubs differ from what the pinned grpcio-tools generates now.
proto-check: setup
	$(PY) tools/genproto.py --check

lint: setup
	cd proto && ../$(VENV)/bin/buf lint
	$(VENV)/bin/ruff check $(HAND)
	$(VENV)/bin/ruff format --check $(HAND)
	$(VENV)/bin/mypy $(SRC) tools deploy/docker/healthcheck.py

test: setup lint proto-check
	$(PY) -m pytest

demo: setup
	$(PY) -m rewardseal.demo
	$(PY) tools/demo.py

## The local stack for interactive use: control, the seeded worker and MockMed as background
## processes on free loopback ports (pid files, logs, data and stack.json in .run/). `up` prints
## how to call them; `down` stops them (data stays in .run/data); see tools/stack.py.
up: setup
	$(PY) tools/stack.py up

status:
	$(or $(wildcard $(PY)),$(PYTHON)) tools/stack.py status

down:
	$(or $(wildcard $(PY)),$(PYTHON)) tools/stack.py down

## Benchmarks (not tests): results go to bench/results/*.json; see bench/README.md.
bench: setup
	$(PY) bench/worker_bench.py
	$(PY) bench/stack_bench.py

## Re-pin requirements.lock from requirements.in (run after changing requirements.in).
lock: setup
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.in
	$(PY) -m pip freeze --all --exclude-editable --disable-pip-version-check | grep -v -e '^-e ' -e '^pip==' > requirements.lock

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
