"""Backends: which array module and which kernel table do the work.

``"numpy"``
    The readable NumPy reference (:mod:`fedopt.kernels.reference`); the oracle of the tests.
``"numba"``
    Numba-compiled CPU kernels (:mod:`fedopt.kernels.cpu`).
``"gpu"``
    CuPy arrays with CuPy element-wise kernels and Numba-CUDA kernels (:mod:`fedopt.kernels.gpu`).
``"auto"``
    ``"gpu"`` when a working device compiles and runs a tiny kernel, else ``"numba"``.

Probing is lazy and happens once per process. Importing :mod:`fedopt` never imports CuPy, and a
CuPy that is installed without a driver or without the CUDA libraries leaves the CPU backends
working: only asking for ``backend="gpu"`` fails, with :class:`BackendUnavailableError` saying why.
"""

from __future__ import annotations

import functools
import importlib
import os
import platform
from dataclasses import dataclass
from types import ModuleType

import numpy as np

BACKENDS = ("numpy", "numba", "gpu", "auto")

#: The dtypes the kernels are compiled for; anything else is converted to float64.
FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


class BackendUnavailableError(RuntimeError):
    """The requested backend cannot run on this machine; the message says why and what to install."""


@dataclass(frozen=True)
class Backend:
    """One backend: its name, its array module ``xp`` and its kernel module ``kernels``.

    Every kernel module exposes the same functions with the same signatures (see
    :mod:`fedopt.kernels`), so the layers above call ``backend.kernels.name(...)`` without
    knowing which one is active.
    """

    name: str
    xp: ModuleType
    kernels: ModuleType

    def __reduce__(self):
        """Pickled by name (modules do not pickle): a problem sent to another process finds its backend there."""
        return get_backend, (self.name,)

    def asarray(self, a, dtype=None):
        """``a`` as a C-contiguous array of this backend (float32 stays, other floats become float64)."""
        if dtype is None and not hasattr(a, "dtype"):  # a list or a number: the dtype its values take
            a = np.asarray(a)
        array = self.xp.asarray(a, dtype=canonical_dtype(a if dtype is None else dtype))
        return array if array.flags.c_contiguous else self.xp.ascontiguousarray(array)

    def to_numpy(self, a) -> np.ndarray:
        """A host NumPy copy (or view) of ``a``."""
        return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)

    def synchronize(self) -> None:
        """Wait until the work queued on this backend has finished (device kernels run asynchronously,
        so a clock read without this counts their launches, not their work). A no-op on the CPU."""
        if self.name == "gpu":
            self.xp.cuda.get_current_stream().synchronize()


def canonical_dtype(a_or_dtype) -> np.dtype:
    """float32 stays float32; every other real dtype becomes float64 (the kernels' two signatures)."""
    dtype = np.dtype(getattr(a_or_dtype, "dtype", a_or_dtype))
    if dtype.kind == "c":
        raise TypeError(f"complex values ({dtype}) are not supported: the models and regularizers are real; "
                        "pass the real part (a.real) if that is what you mean")
    return dtype if dtype in FLOAT_DTYPES else np.dtype(np.float64)


def numba_cache_enabled() -> bool:
    """Numba's on-disk cache is on unless ``FEDOPT_NUMBA_CACHE=0``."""
    return os.environ.get("FEDOPT_NUMBA_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


@functools.cache
def _gpu_problem() -> str | None:
    """Why the GPU backend cannot run here, or None when it can. Probed once per process."""
    try:
        cupy = importlib.import_module("cupy")
    except Exception as exc:  # ImportError, or a broken install raising anything at import
        return f"CuPy is not importable ({exc.__class__.__name__}: {exc}); install fedopt[gpu]"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "CuPy found no CUDA device"
        # A compiled kernel, not just is_available(): a missing NVRTC breaks only JIT kernels.
        probe = cupy.ElementwiseKernel("T x", "T y", "y = x + 1", "fedopt_probe")
        if float(probe(cupy.zeros(4, dtype=cupy.float32)).sum()) != 4.0:
            return "a CuPy test kernel returned a wrong result"
    except Exception as exc:
        return f"CuPy cannot run a kernel ({exc.__class__.__name__}: {exc})"
    if not hasattr(np, "row_stack"):
        # numba-cuda (0.30.4 and older) registers an overload of np.row_stack, which NumPy 2.5
        # removed; it was an alias of vstack, so restoring the alias lets its kernels compile.
        np.row_stack = np.vstack
    try:
        importlib.import_module("numba.cuda")
    except Exception as exc:
        return f"numba.cuda is not importable ({exc}); install fedopt[gpu]"
    return None


def gpu_available() -> bool:
    """True when the ``"gpu"`` backend works on this machine (probed once, lazily)."""
    return _gpu_problem() is None


@functools.cache
def _make_backend(name: str) -> Backend:
    if name == "numpy":
        return Backend("numpy", np, importlib.import_module("fedopt.kernels.reference"))
    if name == "numba":
        return Backend("numba", np, importlib.import_module("fedopt.kernels.cpu"))
    problem = _gpu_problem()
    if problem is not None:
        raise BackendUnavailableError(f"backend='gpu' is unavailable: {problem}. Use backend='numba' or 'auto'.")
    return Backend("gpu", importlib.import_module("cupy"), importlib.import_module("fedopt.kernels.gpu"))


def get_backend(name: str | Backend = "auto") -> Backend:
    """The :class:`Backend` called ``name`` (one of ``"numpy"``, ``"numba"``, ``"gpu"``, ``"auto"``)."""
    if isinstance(name, Backend):
        return name
    if name not in BACKENDS:
        raise ValueError(f"backend={name!r} is unknown; choose one of {', '.join(map(repr, BACKENDS))}")
    if name == "auto":
        name = "gpu" if gpu_available() else "numba"
    return _make_backend(name)


def backend_for(array, backend: str | Backend | None = None) -> Backend:
    """The backend to run on ``array``: the one named, or else the natural one for its type.

    A CuPy array runs on ``"gpu"`` and any other array on ``"numba"``. Naming a backend that
    cannot hold the array (a CuPy array on a CPU backend, or the reverse) is an error.
    """
    on_device = type(array).__module__.startswith("cupy")
    if backend is None:
        return get_backend("gpu" if on_device else "numba")
    chosen = get_backend(backend)
    if on_device != (chosen.name == "gpu"):
        where = "a CuPy (device) array" if on_device else "a host array"
        raise ValueError(
            f"backend={chosen.name!r} cannot run on {where}; move the array with "
            f"cupy.asarray / cupy.asnumpy or pick backend={'gpu' if on_device else 'numba'!r}"
        )
    return chosen


def available() -> list[str]:
    """Names of the backends that work on this machine (``"auto"`` excluded)."""
    return ["numpy", "numba"] + (["gpu"] if gpu_available() else [])


# ---------------------------------------------------------------------------- the host's CPU
@functools.cache
def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what :mod:`platform` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.cache
def host_cpu_name() -> str | None:
    """The CPU the compiled kernels are tuned for (``llvmlite.binding.get_host_cpu_name()``, e.g.
    ``znver4``): the same code can run 3-10x apart on two x86 generations."""
    try:
        import llvmlite.binding as llvm

        return llvm.get_host_cpu_name()
    except Exception:  # llvmlite missing or unusable: the CPU model still says what ran
        return None

