# Every target creates the virtual environment it needs (.venv) on first use.
PY      := .venv/bin/python
STAMP   := .venv/.installed
OUT     ?= runs/demo

.PHONY: demo test test-slow lint bench env clean

$(STAMP): pyproject.toml
	python3 -m venv .venv
	.venv/bin/pip install -q --upgrade pip
	# torch pinned first: its CPU wheel lies on local disk; unpinned, pip would fetch a CUDA build
	.venv/bin/pip install -q torch==2.13.0
	.venv/bin/pip install -q -e '.[dev]'
	touch $(STAMP)

env: $(STAMP)

demo: $(STAMP)
	.venv/bin/trlvr demo --out $(OUT)

test: $(STAMP)
	$(PY) -m pytest

test-slow: $(STAMP)
	$(PY) -m pytest -m slow

lint: $(STAMP)
	.venv/bin/ruff check trlvr tests bench

bench: $(STAMP)
	bash bench/run_all.sh

clean:
	rm -rf .venv runs
