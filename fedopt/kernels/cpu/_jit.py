"""Compile one Python source into a serial and a parallel Numba kernel, and pick one per call."""

from __future__ import annotations

import types

import numba

from fedopt._backend import numba_cache_enabled

#: Below this many elements the fork/join of a parallel region costs more than it saves
#: (measured on a 2-core machine: parallel pays from about 1e5 float64 elements).
PARALLEL_MIN_WORK = 1 << 17


def _renamed_copy(func: types.FunctionType, suffix: str) -> types.FunctionType:
    """A copy of ``func`` with its own qualified name, so Numba caches it in its own file."""
    copy = types.FunctionType(func.__code__, func.__globals__, func.__name__ + suffix, func.__defaults__, func.__closure__)
    copy.__qualname__ = func.__qualname__ + suffix
    copy.__doc__ = func.__doc__
    return copy


class Kernel:
    """A kernel written with ``prange``, compiled lazily both serially and with ``parallel=True``.

    ``kernel(work, *args)`` runs the parallel variant when ``work`` (elements touched) is at least
    :data:`PARALLEL_MIN_WORK` and Numba has more than one thread, else the serial one; both give
    the same result because every ``prange`` iteration writes its own elements.
    """

    def __init__(self, func: types.FunctionType, fastmath=False):
        options = dict(cache=numba_cache_enabled(), nogil=True, error_model="numpy", fastmath=fastmath)
        self.__doc__ = func.__doc__
        self.serial = numba.njit(**options)(func)
        self.parallel = numba.njit(parallel=True, **options)(_renamed_copy(func, "_parallel"))

    def __call__(self, work: int, *args):
        if work >= PARALLEL_MIN_WORK and numba.get_num_threads() > 1:
            return self.parallel(*args)
        return self.serial(*args)


#: Fast-math flags for sums: reassociation lets the compiler vectorize a reduction. The flags
#: that assume no NaN or inf (``nnan``, ``ninf``) are left out, so divergence stays visible.
REDUCTION_MATH = {"reassoc", "nsz", "contract", "arcp"}


def kernel(func=None, *, fastmath=False):
    """Decorator form of :class:`Kernel`: ``@kernel`` or ``@kernel(fastmath=REDUCTION_MATH)``."""
    if func is None:
        return lambda f: Kernel(f, fastmath)
    return Kernel(func, fastmath)


def inline(func: types.FunctionType):
    """A small helper compiled into its callers (``inline='always'``)."""
    return numba.njit(inline="always", error_model="numpy", cache=numba_cache_enabled())(func)
