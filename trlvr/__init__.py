"""trlvr: Tandem RLVR. A trainable senior co-writes every rollout with a frozen junior; GRPO
updates the senior on its own tokens only.

    from trlvr import TandemGRPOTrainer, TandemConfig, make_pair

The names load on first use (PEP 562), so `import trlvr` imports neither torch nor TRL.
Command line: `trlvr --help`; a first run: `trlvr demo --out runs/demo`.
"""

import importlib

__version__ = "0.1.0"

# public name -> the module that defines it (loaded when the name is first read)
_LAZY = {
    "TandemGRPOTrainer": "trlvr.training",
    "TandemConfig": "trlvr.config",
    "make_pair": "trlvr.engine",
}
__all__ = ["TandemConfig", "TandemGRPOTrainer", "__version__", "make_pair"]


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # later reads skip this function
        return value
    raise AttributeError(f"module 'trlvr' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
