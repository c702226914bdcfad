"""The fused GPU local steps (:mod:`fedopt.kernels.gpu.local_steps`) against the NumPy reference.

* ``cudasim`` tests launch the Numba-CUDA kernel on tiny problems (3 clients holding 6, 1 and 9
  rows, 2 local steps, 32-thread blocks): on the CUDA simulator where no GPU is present
  (``tests/conftest.py`` sets ``NUMBA_ENABLE_CUDASIM=1``), on the device otherwise. Minibatches of
  1, 3, 4 and 5 rows and full batches put short, exact and spilling last tiles of 4 rows.
* the ``gpu`` test runs FedNMap through :func:`fedopt.run` on CuPy arrays; it is skipped unless the
  gpu backend works on this machine.
"""

from __future__ import annotations

import sys
import traceback

import numpy as np
import pytest

from fedopt.kernels import (
    CLIP,
    CLIP_VECTOR,
    IDENTITY,
    KIND_NAMES,
    LEAST_SQUARES,
    LOGISTIC,
    MCP,
    MCP_WEIGHTED,
    SCAD,
    SCAD_WEIGHTED,
    SOFT,
    SOFT_MASKED,
    SOFT_WEIGHTED,
    SOFTMAX,
    reference,
)

cuda = pytest.importorskip("numba.cuda", reason="numba-cuda is not installed (pip install 'fedopt[test]')")

from numba import config  # noqa: E402
from numba import types as nb_types  # noqa: E402
from numba.np import numpy_support  # noqa: E402

from fedopt.kernels.gpu import local_steps  # noqa: E402  (only once numba.cuda is known to import)

if config.ENABLE_CUDASIM:
    from numba.cuda.simulator import kernelapi

    _simulator_shared_array = kernelapi.FakeCUDAShared.array

NO_CUDA = "no CUDA device, and the CUDA simulator is off (NUMBA_ENABLE_CUDASIM=1 must be set before numba is imported)"
OFFSETS = np.array([0, 6, 7, 16])  # clients of 6, 1 and 9 rows
STEPS = 2
BATCHES = (1, 3, 4, 5, 0)  # 0: every row of the client
# theta of each prox code at the first step (the second step's is 1.5 times larger)
THETA = {
    IDENTITY: [0.0],
    SOFT: [0.2, 0.9],
    SOFT_WEIGHTED: [0.2, 0.9],
    CLIP: [-0.25, 0.3],
    CLIP_VECTOR: [],
    MCP: [0.15, 0.4, 2.0],
    SCAD: [0.15, 0.3, 0.6, 0.6 / 2.7, 2.7 / 1.7],
    SOFT_MASKED: [0.2, 0.9],
    MCP_WEIGHTED: [0.15, 0.4, 2.0],
    SCAD_WEIGHTED: [0.15, 0.3, 0.6, 0.6 / 2.7, 2.7 / 1.7],
}
LOSSES = {LEAST_SQUARES: "least_squares", LOGISTIC: "logistic"}


def tolerances(dtype):
    return dict(rtol=1e-10, atol=1e-12) if dtype == np.float64 else dict(rtol=1e-5, atol=1e-6)


def _shared_array(self, shape, dtype, alignment=None):
    """The simulator's ``cuda.shared.array`` with an atomic look-up-or-create (``dict.setdefault``)."""
    if shape == 0 or alignment is not None:  # the dynamic shared buffer, or an error: no look-up
        return _simulator_shared_array(self, shape, dtype, alignment)
    if isinstance(dtype, nb_types.Type):
        dtype = numpy_support.as_dtype(dtype)
    caller = traceback.extract_stack(sys._getframe())[-2][0:2]  # the kernel's source line
    return self._allocations.setdefault(caller, np.empty(shape, dtype))


@pytest.fixture
def fast_simulator(monkeypatch):
    """A short GIL switch interval: the simulator's threads meet at barriers about 10x faster.

    The simulator gives every thread of a block the same static shared array by looking it up
    and creating it when missing, in two steps; with frequent thread switches two threads can
    both create it and then share nothing (a device has no such step). The look-up is made
    atomic here.
    """
    if config.ENABLE_CUDASIM:
        monkeypatch.setattr(kernelapi.FakeCUDAShared, "array", _shared_array)
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(previous)


def make_case(rng, kind, dtype, d, batch, fit_intercept, shifted, prox_kind, features=None):
    """Host arrays ``(args, start)``: the arguments of ``local_steps_linear`` before ``Z, P``, and the
    initial point of every client (features ``X`` as given, else normal in ``dtype``)."""
    m = OFFSETS[-1]
    n = len(OFFSETS) - 1
    X = rng.standard_normal((m, d)).astype(dtype) if features is None else features
    y = (rng.standard_normal(m) if kind == LEAST_SQUARES else np.sign(rng.standard_normal(m))).astype(dtype)
    if batch:
        rows = np.stack([np.stack([rng.integers(OFFSETS[i], OFFSETS[i + 1], batch) for i in range(n)])
                         for _ in range(STEPS)])
    else:
        rows = np.empty((STEPS, n, 0), np.int64)
    p = d + fit_intercept
    D = (0.1 * rng.standard_normal((n, p))).astype(dtype) if shifted else np.empty((0, 0), dtype)
    thetas = np.array([THETA[prox_kind]] * STEPS, np.float64).reshape(STEPS, -1) * [[1.0], [1.5]]
    if prox_kind == SOFT_WEIGHTED:
        w = rng.uniform(0.0, 2.0, (1, p))
    elif prox_kind == CLIP_VECTOR:
        w = np.stack([-rng.uniform(0.1, 0.4, p), rng.uniform(0.1, 0.4, p)])
    elif prox_kind == SOFT_MASKED:  # the last coordinate (an intercept, where there is one) unshrunk
        w = np.stack([rng.uniform(0.0, 2.0, p), np.arange(p) < p - 1])
    elif prox_kind in (MCP_WEIGHTED, SCAD_WEIGHTED):  # the last coordinate's lam weighted 0: the identity
        w = (rng.uniform(0.5, 2.0, p) * (np.arange(p) < p - 1))[None, :]
    else:
        w = np.empty((0, 0))
    scale = 1 / 255 if X.dtype == np.uint8 else 0.7
    start = (0.3 * rng.standard_normal((n, p))).astype(dtype)
    args = (X, y, OFFSETS, rows, kind, 1, scale, fit_intercept, D, 0.4, prox_kind, thetas, w.astype(dtype))
    return args, start


def run_kernel(args, start, inplace=False, device_rows=False, **options):
    """``local_steps_linear`` on device copies of ``X, y, D, w, Z, P`` (``offsets``, ``thetas`` and,
    unless ``device_rows``, ``rows`` stay on the host); ``(Z, P)`` on the host."""
    X, y, offsets, rows, kind, n_out, scale, fit_intercept, D, lr, prox_kind, thetas, w = args
    Z = cuda.to_device(start)
    P = Z if inplace else cuda.to_device(start)
    rows = cuda.to_device(rows) if device_rows else rows
    result = local_steps.local_steps_linear(cuda.to_device(X), cuda.to_device(y), offsets, rows, kind, n_out, scale,
                                            fit_intercept, cuda.to_device(D), lr, prox_kind, thetas,
                                            cuda.to_device(w), Z, P, **{"block": 32, **options})
    assert result is not None and result[0] is Z and result[1] is P
    return Z.copy_to_host(), P.copy_to_host()


def check(args, start, inplace=False, **options):
    """The kernel's ``(Z, P)`` equal the reference's from the same start (``P`` the array ``Z`` when ``inplace``)."""
    dtype = start.dtype
    Z_ref = start.copy()
    Z_ref, P_ref = reference.local_steps_linear(*args, Z_ref, Z_ref if inplace else start.copy())
    Z, P = run_kernel(args, start.copy(), inplace=inplace, **options)
    assert Z.dtype == P.dtype == dtype
    np.testing.assert_allclose(Z, Z_ref, **tolerances(dtype))
    np.testing.assert_allclose(P, P_ref, **tolerances(dtype))


class TestLocalStepsKernel:
    pytestmark = [  # noqa: RUF012 (pytest reads this list)
        pytest.mark.cudasim,
        pytest.mark.skipif(not cuda.is_available(), reason=NO_CUDA),
        pytest.mark.usefixtures("fast_simulator"),
    ]

    @pytest.mark.parametrize("kind", list(LOSSES), ids=LOSSES.get)
    @pytest.mark.parametrize("prox_kind", sorted(KIND_NAMES), ids=KIND_NAMES.get)
    def test_float64_matches_reference(self, kind, prox_kind):
        """Every prox code, batches of 1, 3, 4, 5 rows and full batches; d of 5 and 8 with and
        without an intercept and a shift ``D``."""
        rng = np.random.default_rng(10 * kind + prox_kind)
        for case, batch in enumerate(BATCHES):
            d = (5, 8)[case % 2]
            args, start = make_case(rng, kind, np.float64, d, batch, fit_intercept=case % 3 != 1,
                                    shifted=case % 2 == 0, prox_kind=prox_kind)
            check(args, start)

    @pytest.mark.parametrize("kind", list(LOSSES), ids=LOSSES.get)
    @pytest.mark.parametrize("prox_kind", [SOFT, CLIP, IDENTITY, CLIP_VECTOR], ids=KIND_NAMES.get)
    def test_float32_matches_reference(self, kind, prox_kind):
        rng = np.random.default_rng(100 + 10 * kind + prox_kind)
        for case, batch in enumerate((3, 5, 0)):
            args, start = make_case(rng, kind, np.float32, 8, batch, fit_intercept=case != 1, shifted=case != 2,
                                    prox_kind=prox_kind)
            check(args, start)

    @pytest.mark.parametrize("dtype", [np.float64, np.float32])
    def test_uint8_pixels_are_scaled(self, dtype):
        rng = np.random.default_rng(7)
        pixels = rng.integers(0, 256, (OFFSETS[-1], 8), dtype=np.uint8)
        for batch in (5, 0):
            args, start = make_case(rng, LOGISTIC, dtype, 8, batch, True, True, SOFT, features=pixels)
            check(args, start, device_rows=True)

    @pytest.mark.parametrize("prox_kind", [SOFT, IDENTITY, MCP])
    def test_in_place_prox_replaces_the_state(self, prox_kind):
        """With ``P`` the array ``Z`` itself, each step continues from ``prox(z)`` (FedMiD's loop)."""
        rng = np.random.default_rng(3)
        args, start = make_case(rng, LEAST_SQUARES, np.float64, 5, 3, True, True, prox_kind)
        check(args, start, inplace=True)

    @pytest.mark.parametrize("tile", [1, 2, 8])
    def test_other_tiles_and_several_coordinates_a_thread(self, tile):
        """``d = 40`` spreads 41 coordinates over 32 threads (a second, mostly idle, slot per thread)."""
        rng = np.random.default_rng(tile)
        for batch in (5, 0):
            args, start = make_case(rng, LOGISTIC, np.float64, 40, batch, True, True, SCAD)
            check(args, start, tile=tile)

    def test_wide_block_folds_the_sums_twice(self):
        """512 threads: 512 partial sums per row fold to 32, then to 2."""
        rng = np.random.default_rng(5)
        args, start = make_case(rng, LEAST_SQUARES, np.float64, 5, 3, True, False, SOFT)
        check(args, start, block=512)

    def test_declines_csr_features_softmax_and_centered_rows(self):
        import scipy.sparse as sp

        rng = np.random.default_rng(0)
        args, start = make_case(rng, LOGISTIC, np.float64, 5, 3, False, False, SOFT)
        Z, P = start.copy(), start.copy()
        csr = (sp.csr_matrix(args[0]), *args[1:])
        assert local_steps.local_steps_linear(*csr, Z, P) is None
        softmax = (*args[:4], SOFTMAX, 3, *args[6:])
        assert local_steps.local_steps_linear(*softmax, Z, P) is None
        assert local_steps.local_steps_linear(*args, Z, P, center=np.zeros(args[0].shape[1])) is None
        np.testing.assert_array_equal(Z, start)

    def test_declines_a_model_too_wide_for_shared_memory(self):
        """p = 2 049 float64 coordinates on 256 threads need 9 x 256 x 24 bytes of state: over 48 KB."""
        assert local_steps._shared_bytes(256, 4, 4, 8) <= local_steps.MAX_SHARED_BYTES  # the MNIST shape fits
        rng = np.random.default_rng(0)
        X = rng.normal(size=(6, 2048))
        Z = np.zeros((2, 2049))
        args = (X, np.ones(6), np.array([0, 3, 6]), np.empty((1, 2, 0), np.int64), LOGISTIC, 1, 1.0, True,
                np.empty((0, 0)), 0.1, SOFT, np.array([[0.1, 1.0]]), np.empty((0, 0)))
        assert local_steps.local_steps_linear(*args, Z, Z.copy()) is None

    def test_refuses_unknown_prox_kind_and_bad_launch_sizes(self):
        rng = np.random.default_rng(0)
        args, start = make_case(rng, LOGISTIC, np.float64, 5, 3, False, False, SOFT)
        with pytest.raises(ValueError, match="unknown prox kind"):
            local_steps.local_steps_linear(*args[:10], 99, *args[11:], start.copy(), start.copy())
        with pytest.raises(ValueError, match="power of two"):
            local_steps.local_steps_linear(*args, start.copy(), start.copy(), block=48)
        with pytest.raises(ValueError, match="tile"):
            local_steps.local_steps_linear(*args, start.copy(), start.copy(), tile=0)
        with pytest.raises(ValueError, match="tile=64 must be at most the block's 32 threads"):  # rows left unset
            local_steps.local_steps_linear(*args, start.copy(), start.copy(), block=32, tile=64)


@pytest.mark.gpu
def test_fednmap_on_the_gpu_takes_the_fused_path_and_matches_numba(monkeypatch):
    import fedopt
    from fedopt.datasets import partition
    from fedopt.kernels import gpu
    from fedopt.problems import Logistic
    from fedopt.regularizers import L1

    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 12))
    y = (X @ rng.normal(size=12) + 0.5 * rng.normal(size=300) > 0).astype(int)
    calls = []

    def spy(*args, **kwargs):
        result = local_steps.local_steps_linear(*args, **kwargs)
        calls.append(result is not None)
        return result

    monkeypatch.setattr(gpu, "local_steps_linear", spy)
    kw = dict(rounds=5, local_steps=4, lr_local=0.3, gamma=2.0, batch_size=7, seed=5)
    results = {}
    for backend in ("numba", "gpu"):
        problem = Logistic(partition(X, y, 6, "sorted"), fit_intercept=True, backend=backend)
        results[backend] = fedopt.run("fednmap", problem, L1(0.01), **kw)
    assert calls and all(calls)  # every round's local loop ran in the fused kernel
    np.testing.assert_allclose(results["gpu"].x, results["numba"].x, rtol=1e-10, atol=1e-12)
