"""Compile one Python source into a serial and a parallel Numba kernel, and pick one per call."""

from __future__ import annotations

import hashlib
import os
import types
from pathlib import Path

import numba
from llvmlite import ir
from numba import types as nbtypes
from numba.extending import intrinsic
from numba.np.ufunc import parallel as _numba_parallel

from fedopt._backend import numba_cache_enabled


def cache_folder(folder: Path) -> Path:
    """Where Numba caches the kernels of ``folder``: the subfolder of ``NUMBA_CACHE_DIR`` that it names
    after ``folder`` when that is set, else ``folder/__pycache__``."""
    from numba.core import caching, config

    if config.CACHE_DIR:
        return Path(config.CACHE_DIR) / caching.UserProvidedCacheLocator.get_suitable_cache_subpath(
            str(folder / "__init__.py"))
    return folder / "__pycache__"


def drop_stale_cache(folder: Path = Path(__file__).parent) -> bool:
    """Delete the Numba cache files of ``folder`` (:func:`cache_folder`) when a Python source of
    ``folder`` or of its parent package's ``__init__.py`` changed since they were written; True when it did.

    Numba checks a cached function against its own source file only, but a kernel's cache also
    holds the helpers and constants it compiled in from the other files: after an edit of
    ``minibatch.py`` alone, the kernels of ``models.py`` would load with the old helpers (and
    buffers of the old sizes). A digest of the sources, kept beside the cache, tells. A read-only
    install, whose cache Numba keeps elsewhere, is left alone: an upgrade rewrites every file.
    """
    sources = [*sorted(folder.glob("*.py")), folder.parent / "__init__.py"]
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in sources)).hexdigest()
    cache = cache_folder(folder)
    stamp = cache / "fedopt-sources.sha256"
    try:
        if stamp.read_text() == digest:
            return False
    except OSError:
        pass
    try:
        cache.mkdir(parents=True, exist_ok=True)
        for path in cache.glob("*.nb[ic]"):
            path.unlink(missing_ok=True)
        partial = cache / f"fedopt-sources.{os.getpid()}"
        partial.write_text(digest)
        partial.replace(stamp)  # whole or absent for a concurrent reader (pytest-xdist workers)
    except OSError:
        return False
    return True


if numba_cache_enabled():
    drop_stale_cache()

# GNU OpenMP, Numba's threading layer where libgomp is installed, keeps a thread that finished its
# share of a parallel region spinning for a while before it sleeps. Two processes running parallel
# kernels on the same cores (two runs, a run beside a sweep) then spin against each other's
# threads: FedNMap rounds on the digits took 8 ms instead of 0.25 ms on two cores. Alone, sleeping
# at once costs 3-8 % of a round, and 16 us of the smallest parallel call (34 against 18 us for a
# 2^16-element prox; BENCHMARKS.md). It takes effect when Numba first starts its threads, after
# this import; OMP_WAIT_POLICY=active keeps spinning.
if "GOMP_SPINCOUNT" not in os.environ:
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")

#: Below this many elements the fork/join of a parallel region costs more than it saves
#: (measured on a 2-core machine, soft-thresholding: even at 32 768 float64 and 65 536 float32
#: elements, 2x faster in parallel at 65 536 float64).
PARALLEL_MIN_WORK = 1 << 16


def renamed_copy(func: types.FunctionType, suffix: str) -> types.FunctionType:
    """A copy of ``func`` with its own qualified name, so Numba caches it in its own file."""
    copy = types.FunctionType(func.__code__, func.__globals__, func.__name__ + suffix, func.__defaults__,
                              func.__closure__)
    copy.__qualname__ = func.__qualname__ + suffix
    copy.__doc__ = func.__doc__
    return copy


class Kernel:
    """A kernel written with ``prange``, compiled lazily both serially and with ``parallel=True``.

    ``kernel(work, *args)`` runs the parallel variant when ``work`` (elements touched) is at least
    :data:`PARALLEL_MIN_WORK` and Numba has more than one thread, else the serial one; both give
    the same result because every ``prange`` iteration writes its own elements.

    The choice is made in Python, not by a compiled function that calls both variants: Numba
    caches such a caller broken when the parallel variant it links was itself loaded from the
    cache (the next process that loads the caller crashes; numba 0.68.1).

    A kernel that creates no arrays (``allocates=False``) has its serial variant compiled without
    Numba's reference counts: the call then skips a reference-counted wrapper of each array
    argument, 0.25 against 0.17 us for a six-argument kernel on 1 000 elements (see :func:`function`).
    """

    def __init__(self, func: types.FunctionType, fastmath=False, allocates=True):
        options = dict(cache=numba_cache_enabled(), nogil=True, error_model="numpy", fastmath=fastmath)
        self.__doc__ = func.__doc__
        self.serial = numba.njit(_nrt=allocates, **options)(func)
        self.parallel = numba.njit(parallel=True, **options)(renamed_copy(func, "_parallel"))

    def __call__(self, work: int, *args):
        return self.on(threads(work), *args)

    def on(self, n_threads: int, *args):
        """The call on ``n_threads`` (from :func:`threads`): the parallel variant for more than one."""
        return (self.parallel if n_threads > 1 else self.serial)(*args)


def threads(work: int) -> int:
    """The threads a :class:`Kernel` call of ``work`` elements runs on (1: its serial variant)."""
    return thread_count() if work >= PARALLEL_MIN_WORK else 1


def thread_count() -> int:
    """``numba.get_num_threads()``, this thread's setting, without its locks once Numba's thread
    pool runs: the public call takes two locks to check that the pool was started, 0.66 us a call
    against 0.09 us for the count alone (7 % of a soft-thresholding of 1e5 float32 elements)."""
    if getattr(_numba_parallel, "_is_initialized", False):
        return _numba_parallel._get_num_threads()
    return numba.get_num_threads()


#: Fast-math flags for sums: reassociation lets the compiler vectorize a reduction. The flags
#: that assume no NaN or inf (``nnan``, ``ninf``) are left out, so divergence stays visible.
REDUCTION_MATH = {"reassoc", "nsz", "contract", "arcp"}


def kernel(func=None, *, fastmath=False, allocates=True):
    """Decorator form of :class:`Kernel`: ``@kernel`` or ``@kernel(fastmath=REDUCTION_MATH, allocates=False)``."""
    if func is None:
        return lambda f: Kernel(f, fastmath, allocates)
    return Kernel(func, fastmath, allocates)


def function(func=None, *, fastmath=False, allocates=False):
    """A helper compiled on its own and called from kernels: ``@function`` or ``@function(fastmath=...)``.

    Unlike :func:`inline`, its loops are optimized apart from its caller's code, and it compiles
    once rather than into every caller: a large helper inlined into the parallel kernels doubled
    their compile time.

    It is compiled without Numba's reference counts unless it ``allocates`` (creates arrays, or
    calls ``np.dot``): with them every array a call passes, to it or from it to an inline
    helper, costs two atomic operations, 12 % of the time of a softmax local step on the digits.
    Numba refuses to compile a helper without them that creates an array or returns a view, so
    leaving ``allocates`` off cannot free memory early.
    """
    options = dict(cache=numba_cache_enabled(), nogil=True, error_model="numpy", fastmath=fastmath, _nrt=allocates)
    if func is None:
        return lambda f: numba.njit(**options)(f)
    return numba.njit(**options)(func)


def inline(func: types.FunctionType):
    """A small helper compiled into its callers (``inline='always'``)."""
    return numba.njit(inline="always", error_model="numpy", cache=numba_cache_enabled())(func)


@intrinsic
def prefetch(typingctx, array, row, column):
    """Ask the CPU to start loading the cache line of ``array[row, column]`` (2-D); no effect on results.

    For data whose position is known ahead (the next local step's minibatch rows): the load then
    overlaps the current step's arithmetic instead of stalling the next one.
    """

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0])
        row_offset = builder.mul(args[1], builder.extract_value(data.strides, 0))
        column_offset = builder.mul(args[2], builder.extract_value(data.strides, 1))
        byte_pointer = builder.bitcast(data.data, ir.IntType(8).as_pointer())
        address = builder.gep(byte_pointer, [builder.add(row_offset, column_offset)])
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [address.type, i32, i32, i32])
        fn = builder.module.declare_intrinsic("llvm.prefetch", fnty=fnty)
        builder.call(fn, [address, i32(0), i32(3), i32(1)])  # a read, kept in every cache level, of data
        return context.get_dummy_value()

    return nbtypes.void(array, row, column), codegen


@intrinsic
def float64_from_bits(typingctx, bits):
    """The float64 whose IEEE 754 bits are the int64 ``bits``: a bit cast, which vectorizes (unlike
    ``math.ldexp``, a library call)."""

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return nbtypes.float64(nbtypes.int64), codegen
