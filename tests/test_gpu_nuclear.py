"""The gpu backend's nuclear prox at the edges the reference handles: NaN and inf matrices, entries
near the dtype's largest value, zero matrices.

Its array code runs here with NumPy standing in for CuPy (only the module's CUDA kernel objects
need CuPy, and they are never built); on a device the same cases run against CuPy itself.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import fedopt.kernels
from fedopt.kernels import reference

TOL = {np.float64: 1e-10, np.float32: 1e-5}


def edge_matrices(dtype, n_rows, n_cols):
    """Rows read as ``(n_rows, n_cols)`` matrices: normal, NaN, inf, -inf, huge, zero."""
    rng = np.random.default_rng(3)
    p = n_rows * n_cols
    normal = rng.normal(size=p)
    with_nan, with_inf, with_minus_inf = normal.copy(), normal.copy(), normal.copy()
    with_nan[1], with_inf[0], with_minus_inf[p - 1] = np.nan, np.inf, -np.inf
    huge = normal / np.abs(normal).max() * (np.finfo(dtype).max / 2)  # its singular values would overflow
    return np.stack([normal, with_nan, with_inf, with_minus_inf, huge, np.zeros(p)]).astype(dtype)


def check(prox_nuclear, asarray, to_host, dtype, n_rows, n_cols, tau):
    z = edge_matrices(dtype, n_rows, n_cols)
    expected = reference.prox_nuclear(z, n_rows, tau, np.empty_like(z))
    out = asarray(np.empty_like(z))
    with np.errstate(invalid="ignore", over="ignore"):  # NumPy in CuPy's place warns where CuPy does not
        assert prox_nuclear(asarray(z), n_rows, tau, out) is out
    actual = to_host(out)
    assert np.isnan(actual[1:4]).all() and np.isfinite(actual[[0, 4, 5]]).all()
    np.testing.assert_allclose(actual, expected, rtol=TOL[dtype], atol=TOL[dtype], equal_nan=True)


@pytest.fixture
def elementwise_on_numpy(monkeypatch):
    """``fedopt/kernels/gpu/elementwise.py`` loaded with NumPy as ``cupy``."""
    fake = types.ModuleType("cupy")
    fake.__dict__.update({name: getattr(np, name) for name in dir(np) if not name.startswith("__")})
    fake.ElementwiseKernel = lambda *args, **kwargs: None
    monkeypatch.setitem(sys.modules, "cupy", fake)
    path = Path(fedopt.kernels.__file__).parent / "gpu" / "elementwise.py"
    spec = importlib.util.spec_from_file_location("_elementwise_on_numpy", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SHAPES = [(3, 3), (2, 5), (4, 6)]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n_rows, n_cols", SHAPES)
@pytest.mark.parametrize("tau", [0.7, 1e30])
def test_gpu_nuclear_prox_array_code_matches_the_reference(elementwise_on_numpy, dtype, n_rows, n_cols, tau):
    check(elementwise_on_numpy.prox_nuclear, np.asarray, np.asarray, dtype, n_rows, n_cols, tau)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n_rows, n_cols", SHAPES)
def test_gpu_nuclear_prox_matches_the_reference_at_the_edges(dtype, n_rows, n_cols):
    cp = pytest.importorskip("cupy")
    from fedopt.kernels import gpu

    check(gpu.prox_nuclear, cp.asarray, cp.asnumpy, dtype, n_rows, n_cols, 0.7)
