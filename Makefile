# Two commands do everything on a fresh machine:
#   make run    install, then run the default sweep (the offline model ladder)
#   make test   install (with test tools and a headless browser), then run the test suite
VENV ?= .venv
PY := $(VENV)/bin/python
# CPU installs pin torch's CPU wheel through this constraints file; GPU users: see README.
CONSTRAINTS ?= constraints/cpu.txt
PYTEST_ARGS ?=
# Test files spread over this many processes (pytest-xdist; a file's tests stay in one process, so
# its module fixtures are built once). Most tests wait on a subprocess or run single-threaded.
TEST_WORKERS ?= 2

.PHONY: run test install install-dev browser dist clean

$(VENV)/bin/python:
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=24"

install: $(VENV)/bin/python
	$(PY) -m pip install --quiet -c $(CONSTRAINTS) -e ".[quant]"

install-dev: $(VENV)/bin/python
	$(PY) -m pip install --quiet -c $(CONSTRAINTS) -e ".[quant,serve,scale,dev]"

browser:
	@scripts/install_browser.sh

run: install
	$(PY) -m selector $(ARGS)

test: install-dev browser
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# A wheel and an sdist in dist/ that carry the configs and the default eval set (README: Install as a package).
dist: $(VENV)/bin/python
	$(PY) -m pip install --quiet -c $(CONSTRAINTS) "build>=1.2"
	$(PY) -m build

clean:
	rm -rf $(VENV) outputs .pytest_cache dist build
