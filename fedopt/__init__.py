"""fedopt: composite federated optimization on compiled kernels.

Minimise ``sum_i w_i f_i(x) + phi(x)`` over simulated clients with FedNMap, FedCanon, DEPOSITUM,
LIPPAX and their baselines; the hot loops are Numba (CPU) and CuPy + Numba-CUDA (GPU) kernels.
Submodules load on first use, so ``import fedopt`` stays cheap and never imports CuPy or Numba.
"""

from __future__ import annotations

import importlib

# The function, bound after its module so that ``fedopt.run`` is the function (numpy-only imports).
from fedopt.run import Divergence, DivergenceError, run

__version__ = "0.1.0"

_SUBMODULES = ("algorithms", "datasets", "estimators", "kernels", "metrics", "problems", "regularizers")

__all__ = ["Divergence", "DivergenceError", "__version__", "available_backends", "get_backend", "run", "run_batch",
           *_SUBMODULES]


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"fedopt.{name}")
    if name == "run_batch":
        from fedopt.batch import run_batch

        return run_batch
    if name in ("get_backend", "available_backends"):
        from fedopt import _backend

        return _backend.get_backend if name == "get_backend" else _backend.available
    raise AttributeError(f"module 'fedopt' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)
