# rewardseal — one virtual environment for the whole repository (.venv), pinned by requirements.lock.
# `make test` alone works on a fresh clone: it runs setup, lint and the generated-code check first.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.setup-stamp
# The verifiers environment is its own distribution; its verifiers-free modules (reward, corpus
# certification, scripted policy) are tested in the main venv, the verifiers plugin in
# tests/integrations.
ENVDIST := clients/python/envs/rewardseal_mockmed_extradup
# rewardseal (core rules, clients, trainers) <- rewardseal-server (services/common: server plumbing)
# <- worker / control / MockMed; rewardseal-kit (clients/python/kit: the synthetic world) imports
# them and nothing in production imports it (`lint-imports`, [tool.importlinter] in pyproject.toml).
KIT    := clients/python/kit
DISTS  := clients/python services/common services/worker services/control services/mockmed $(KIT) $(ENVDIST)
SRC    := clients/python/src services/common/src services/worker/src services/control/src \
	services/mockmed/src $(KIT)/src $(ENVDIST)
# The second worked example (a synthetic helpdesk; examples/helpdesk/README.md).
HELPDESK := examples/helpdesk
DISTS  += $(HELPDESK)
SRC    += $(HELPDESK)/src
HAND   := $(SRC) tests tools bench deploy

.PHONY: setup proto proto-check lint test demo up down status bench lock clean wheels
.PHONY: setup-integrations test-integrations lock-integrations test-compose test-browser doctor
.PHONY: test-quickstart

## What this machine lacks, one line each (Python 3.11, PostgreSQL server binaries, grpcurl,
## Chromium, free disk for .venv-integrations); exit 1 if anything is missing. tools/prereqs.py.
doctor:
	@$(PYTHON) tools/prereqs.py

setup: $(STAMP)

$(STAMP): requirements.lock $(addsuffix /pyproject.toml,$(DISTS))
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.lock
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation $(addprefix -e ,$(DISTS))
	touch $@

## The client for a trainer's own environment (docs/trainers.md, "Install the client"): the
## `rewardseal` wheel (and the kit's) into $(DIST)/, built with .venv's setuptools, no download.
## `pip install dist/rewardseal-*.whl` brings only its light dependencies (clients/python/pyproject.toml).
DIST ?= dist

wheels: setup
	$(PY) -m pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation \
		--wheel-dir $(DIST) clients/python $(KIT)
	@ls $(DIST)/rewardseal-*.whl $(DIST)/rewardseal_kit-*.whl

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
	$(VENV)/bin/lint-imports --no-cache --no-logo
	$(PY) tools/unasync.py --check

## Two pytest processes by default (pytest-xdist): most tests wait on servers, databases and child
## processes, so a second process keeps the other core busy. A file stays on one process
## (--dist loadfile), so its module-scoped servers start once. PYTEST_PROCS=0 runs in one process.
PYTEST_PROCS ?= 2

test: setup lint proto-check
	$(PY) -m pytest -n $(PYTEST_PROCS) --dist loadfile

## The operator console in a real browser (tests/browser, left out of `make test`): Debian's
## chromium and chromium-driver, installed here when missing (apt-get, as root), driven headless
## by Selenium through /usr/bin/chromedriver (Selenium Manager never downloads a driver);
## screenshots in .run/console/. Where they cannot be installed the test skips with a message,
## except with CI=true or REWARDSEAL_REQUIRE_BROWSER=1, where it fails. docs/console.md.
test-browser: setup
	@if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			chromium chromium-driver >/dev/null) \
		|| echo "test-browser: could not install chromium and chromium-driver (apt-get, root)"; \
	fi
	@$(PYTHON) tools/prereqs.py chromium || true
	$(PY) -m pytest tests/browser -p no:cacheprovider

demo: setup
	$(PY) -m rewardseal_kit.demo
	$(PY) tools/demo.py
	$(PY) -m rewardseal_kit.proof.integrity.demo

## The proof report: every ExtraDup family and an oracle outage, scored by a tier-0 screen reward
## and the certified tier-2 worker side by side (MockMed + worker started and stopped for it).
## Then the integrity proof: a policy drifting toward the banner lie, audited per boundary by the
## control plane (control, MockMed and three workers started and stopped for it).
## Writes .run/proof/{proof,integrity}.{json,md,png} (git-ignored); exit 1 if a check fails.
## docs/proof.md.
.PHONY: proof
proof: setup
	$(VENV)/bin/rewardseal-kit proof --trials 3 --json .run/proof/proof.json \
		--markdown .run/proof/proof.md --png .run/proof/proof.png
	$(VENV)/bin/rewardseal-kit proof --integrity --json .run/proof/integrity.json \
		--markdown .run/proof/integrity.md --png .run/proof/integrity.png

## The local stack for interactive use: control, the seeded worker and MockMed as background
## processes on free loopback ports (pid files, logs, data and stack.json in .run/). `up` prints
## how to call them; `down` stops them (data stays in .run/data); see tools/stack.py. RUN_DIR=DIR
## keeps a stack elsewhere.
RUN_DIR ?= .run

up: setup
	@$(PYTHON) tools/prereqs.py grpcurl || true
	$(PY) tools/stack.py up --run-dir $(RUN_DIR)

# Nothing up is an answer (exit 0, one line), not a make error; an unhealthy stack exits 1.
status:
	@if [ -x $(PY) ]; then $(PY) tools/stack.py status --not-up-ok --run-dir $(RUN_DIR); \
	else echo "the stack is not up ($(VENV) is missing; \`make up\` sets it up and starts it)"; fi

down:
	@if [ -x $(PY) ]; then $(PY) tools/stack.py down --run-dir $(RUN_DIR); \
	else echo "nothing to stop ($(VENV) is missing, so no stack was started from here)"; fi

## Benchmarks (not tests): results go to bench/results/*.json; see bench/README.md.
bench: setup
	$(PY) bench/worker_bench.py
	$(PY) bench/stack_bench.py
	$(PY) bench/trainer_bench.py
	$(PY) bench/integrity_bench.py
	$(PY) bench/peer_bench.py
	$(PY) bench/http_bench.py

## Re-pin requirements.lock from requirements.in (run after changing requirements.in).
lock: setup
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.in
	$(PY) -m pip freeze --all --exclude-editable --disable-pip-version-check | grep -v -e '^-e ' -e '^pip==' > requirements.lock

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis

## Trainer integrations (TRL, verl, verifiers on CPU torch) in their own, heavy virtual environment
## (.venv-integrations, pinned by requirements-integrations.lock). `make test` leaves
## tests/integrations out (pyproject addopts: --ignore=tests/integrations); this runs only them.
IVENV  := .venv-integrations
IPY    := $(IVENV)/bin/python
ISTAMP := $(IVENV)/.setup-stamp
IOFFLINE := HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled \
	TOKENIZERS_PARALLELISM=false RAY_USAGE_STATS_ENABLED=0

# A fresh .venv-integrations measured 2.2 GB; setup stops first, in one line, below this free space.
INTEGRATIONS_MIN_FREE_GB ?= 3

setup-integrations: $(ISTAMP)

# Clients nobody here wrote, installed without their dependencies (what their code under test
# needs is pinned in requirements-integrations.in); kept out of the lock so that installing the
# lock never pulls in the rest of theirs.
INODEPS := requirements-integrations-nodeps.in

$(ISTAMP): requirements-integrations.lock $(INODEPS) $(addsuffix /pyproject.toml,$(DISTS))
	@test -x $(IPY) || $(PYTHON) tools/prereqs.py disk --min-free-gb $(INTEGRATIONS_MIN_FREE_GB)
	test -x $(IPY) || $(PYTHON) -m venv $(IVENV)
	$(IPY) -m pip install --quiet --disable-pip-version-check -r requirements-integrations.lock
	$(IPY) -m pip install --quiet --disable-pip-version-check --no-deps -r $(INODEPS)
	$(IPY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation $(addprefix -e ,$(DISTS))
	touch $@

test-integrations: setup-integrations
	$(IOFFLINE) $(IPY) -m pytest tests/integrations -p no:cacheprovider

## The learning proof (docs/proof.md, "Learning proof"): TRL's GRPOTrainer on a tiny policy,
## trained twice from one supervised warm start, paid by the tier-0 screen and by the certified
## tier-2 receipt, both measured by the worker; the integrity gate audits the screen-paid run.
## Writes .run/proof/learning.{json,md,png} (git-ignored); under 10 min on 2 CPU cores.
.PHONY: proof-learning
proof-learning: setup-integrations
	$(IOFFLINE) $(IPY) -m rewardseal_kit.proof.learning --json .run/proof/learning.json \
		--markdown .run/proof/learning.md --png .run/proof/learning.png

## Re-pin requirements-integrations.lock from requirements-integrations.in.
lock-integrations:
	test -x $(IPY) || $(PYTHON) -m venv $(IVENV)
	$(IPY) -m pip install --quiet --disable-pip-version-check -r requirements-integrations.in
	$(IPY) -m pip install --quiet --disable-pip-version-check --no-deps -r $(INODEPS)
	$(IPY) -m pip freeze --all --exclude-editable --disable-pip-version-check | grep -v -e '^-e ' -e '^pip==' \
		$$(sed -n 's/^\([A-Za-z0-9._-]*\)==.*/-e ^\1==/p' $(INODEPS)) > requirements-integrations.lock

## deploy/docker-compose.yml run as local processes from its own commands, environment, health
## checks and depends_on order, against a throwaway PostgreSQL: the honest episode is VERIFIED
## and certified, the banner lie WRONG_EFFECT (about 1-2 min; `make test` leaves it out).
test-compose: setup
	$(PY) -m pytest tests/compose -p no:cacheprovider

## The README's quickstart as it stands, on a fresh clone of this checkout's HEAD in a temporary
## directory: its own .venv from requirements.lock, then `make demo` (several minutes; `make test`
## leaves it out). docs/development.md.
test-quickstart: setup
	$(PY) -m pytest tests/quickstart -p no:cacheprovider
