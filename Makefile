# Everything a fresh machine needs: `make example` (the main job) and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml constraints-dev.txt | sha1sum | cut -c1-12)

.PHONY: setup example lint test test-fast golden

$(STAMP): pyproject.toml constraints-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints-dev.txt -e ".[export,test]"
	touch $(STAMP)

setup: $(STAMP)

# Export the seed issue's RMSNorm (torch backend: runs on any machine), then run the generated module.
example: $(STAMP)
	$(VENV)/bin/thunder-aot export thunder_aot.examples.gpt_oss:rmsnorm \
		--shapes "1x15x2880:bf16; 1x568x2880:bf16; 1x1369x2880:bf16; 1x[1..2048]x2880:bf16" \
		--backend torch --out build/example/rmsnorm_torch.py
	$(PY) examples/run_generated.py build/example/rmsnorm_torch.py

# Formatting, lint, and generated/ regenerating byte for byte (`thunder-aot check`); CI runs it first.
lint: $(STAMP)
	$(VENV)/bin/ruff check thunder_aot tests tools examples
	$(VENV)/bin/black --check -q thunder_aot tests tools examples
	$(VENV)/bin/thunder-aot check generated

# Two workers (pytest-xdist): Thunder's tracing is single-threaded Python, and CI has two cores; one
# torch thread per worker (OMP_NUM_THREADS, inherited by the tests' subprocesses), not two each
# competing for the two cores. Each test has a time limit (pyproject.toml); the slowest are listed
# at the end.
test: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n 2 --dist worksteal --durations=30

# The fast tier for development: no test marked `traces` (Thunder tracing, whole modules under
# Triton's interpreter; tests/conftest.py fails an unmarked test that traces), under 2 minutes.
test-fast: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n 2 --dist worksteal -m "not traces and not gpu and not slow"

# Refresh the golden files in generated/ after changing the generator or its templates.
golden: $(STAMP)
	$(VENV)/bin/thunder-aot check --update generated
