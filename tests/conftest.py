"""Test configuration: the CUDA simulator on machines without an NVIDIA driver, and shared fixtures."""

import ctypes.util
import os

# Numba reads NUMBA_ENABLE_CUDASIM when numba.cuda is first imported, so it is set before any test
# module imports numba. With a real driver the Numba-CUDA kernels run on the device instead.
if ctypes.util.find_library("cuda") is None and not os.path.exists("/dev/nvidiactl"):
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

# The built-in experiments switch to the papers' data sets when their files are in the cache;
# the tests run on the embedded data whatever this machine has cached.
os.environ["FEDOPT_DATA"] = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_no_data_cache")

import numpy as np
import pytest

from fedopt._backend import gpu_available


def pytest_configure(config):
    # Set here, not in pyproject.toml: naming a numba class there imports numba before the
    # simulator switch above is read.
    config.addinivalue_line("filterwarnings", "error::numba.core.errors.NumbaPerformanceWarning")


def pytest_collection_modifyitems(config, items):
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU with a working CuPy (fedopt[gpu])")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _numba_threads(request):
    """The Numba CPU kernels run on one thread, so their serial variants, unless a test is marked
    ``parallel`` (or asks for the parallel variants through ``cpu_variant``). The parallel variants
    have their own parity tests; a test of something else that passed their work threshold
    compiled them again (5-15 s each on a cold cache), and with one pytest worker per core their
    threads contended for the cores (the warm suite took 201 s, and 161 s with this fixture)."""
    import numba

    previous = numba.get_num_threads()
    _use_numba_threads(parallel=request.node.get_closest_marker("parallel") is not None)
    yield
    numba.set_num_threads(previous)


def _use_numba_threads(parallel: bool):
    """All of Numba's threads for ``parallel``, else one."""
    import numba

    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS if parallel else 1)


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture
def cpu_variant(monkeypatch):
    """``cpu_variant(parallel)``: the Numba CPU kernels run their parallel variant at every size, on
    all of Numba's threads (``parallel``), or their serial variant at every size."""
    from fedopt.kernels.cpu import _jit

    def use(parallel: bool):
        monkeypatch.setattr(_jit, "PARALLEL_MIN_WORK", 0 if parallel else 1 << 62)
        _use_numba_threads(parallel)

    return use
