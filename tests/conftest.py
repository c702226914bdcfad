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


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture
def cpu_variant(monkeypatch):
    """``cpu_variant(parallel)``: the Numba CPU kernels run their parallel variant at every size
    (``parallel``), or their serial variant at every size. Without it a case meant for the serial
    variant compiles the parallel one too once its sizes pass the work threshold (5-15 s for each
    kernel and dtype on a cold cache)."""
    from fedopt.kernels.cpu import _jit

    def use(parallel: bool):
        monkeypatch.setattr(_jit, "PARALLEL_MIN_WORK", 0 if parallel else 1 << 62)

    return use
