"""CPU (Numba) benchmarks of every prox and of the fused normal-map step, against memory copy and NumPy.

For each operator, p in {1e3, 1e4, 1e5, 1e6, 1e7} elements, float64 and float32, as one row of p
and as 100 rows of p / 100: the time through the public API (``reg.prox(z, step, out=out)`` /
``reg.normal_map_step(...)`` into preallocated outputs), its achieved bandwidth over the
operator's minimal traffic, the ratio to the copy bandwidth measured in the same process, the
speed-up over the best pure-NumPy expression of the same operator, and the time of the backend
kernel call alone over the plainest Numba loop of the operation (``fedopt.bench.plain_prox``; both
checked against the kernel's result once, untimed). ``--bench-sizes`` selects sizes by p.

Minimal traffic, in passes of ``p * itemsize`` bytes (spec section 1.3), every operand read once:

* elementwise closed forms (l1, elastic net, box, nonnegative, MCP, SCAD): read z + write out = 2;
* weighted l1: + read the weights, one row that the rows share = 3 on one row, 2 + 1 / 100 on 100;
* l2 ball: norm pass + scale pass (read, read, write) = 3;
* simplex, l1 ball: Condat's threshold reads z once, then the shrink pass reads and writes = 3;
* group lasso (contiguous groups of 10, fused per group in cache): read + write = 2;
* fused normal map: read z, g, c, z_ref, x_ref and write z_out, x_out.

The nuclear-norm prox (an SVD, compute-bound) is timed at one 300 x 300 matrix against the bare
``numpy.linalg.svd``: no bandwidth, only the ratio SVT time / SVD time.
"""

from __future__ import annotations

import numpy as np
import pytest

from fedopt import regularizers as R
from fedopt._backend import get_backend
from fedopt.bench import capture_kernel_call, plain_normal_map_soft, plain_prox
from fedopt.kernels import reference

from conftest import TARGET_X_PLAIN, TARGET_X_PLAIN_ROWS

SIZES = (1_000, 10_000, 100_000, 1_000_000, 10_000_000)
F64, F32 = np.dtype(np.float64), np.dtype(np.float32)
ROWS = (1, 100)
GROUP_SIZE = 10
STEP = 0.5  # prox step: thresholds of about half a standard deviation on N(0, 1) data


def _fmt_p(p: int) -> str:
    return f"{p:.0e}".replace("e+0", "e").replace("e+", "e")


def _tag(dtype) -> str:
    return "f64" if np.dtype(dtype) == F64 else "f32"


def _layout(p, n) -> str:
    return "" if n == 1 else f"-{n}x{_fmt_p(p // n)}"


def _tol(dtype) -> dict:
    return {"rtol": 1e-10, "atol": 1e-12} if np.dtype(dtype) == F64 else {"rtol": 2e-5, "atol": 2e-6}


def _kernel_time(kbench, call, p) -> float | None:
    """Best time of the backend kernel call that ``call()`` makes (None when disabled)."""
    kernel = capture_kernel_call(get_backend("numba"), call)
    return kbench.plain_time([kernel], p) if kernel is not None else None


# ---- the operators: a regularizer, its traffic in passes, and its best NumPy expression --------
class Case:
    """One prox benchmark: ``reg``, ``passes`` of ``p * itemsize`` bytes and ``numpy(z, out)``;
    ``shared`` passes more over one row, read once for all the rows (the weighted l1's weights)."""

    def __init__(self, reg, passes, numpy_fn, shared=0):
        self.reg, self.passes, self.numpy, self.shared = reg, passes, numpy_fn, shared

    def nbytes(self, n, q, itemsize) -> int:
        """The minimal traffic on ``n`` rows of ``q`` elements."""
        return (self.passes * n + self.shared) * q * itemsize


def _soft_numpy(tau, scale=1.0):
    """``scale * (z - clip(z, -tau, tau))``: the fastest NumPy soft threshold (2-3 passes, no temporaries)."""

    def fn(z, out):
        np.clip(z, -tau, tau, out=out)
        np.subtract(z, out, out=out)
        if scale != 1.0:
            np.multiply(out, scale, out=out)
        return out

    return fn


def _mcp_numpy(tau, knee, inv, dtype, p):
    """Firm thresholding ``copysign(max(|z| - tau, 0) * inv, z)``, then ``z`` where ``|z| > knee``."""
    a = np.empty(p, dtype)
    mask = np.empty(p, bool)

    def fn(z, out):
        aa, m = a[: z.size].reshape(z.shape), mask[: z.size].reshape(z.shape)
        np.abs(z, out=aa)
        np.greater(aa, knee, out=m)
        np.subtract(aa, tau, out=out)
        np.maximum(out, 0, out=out)
        np.multiply(out, inv, out=out)
        np.copysign(out, z, out=out)
        np.copyto(out, z, where=m)
        return out

    return fn


def _scad_numpy(tau, knee1, knee2, shift, inv, dtype, p):
    """Soft threshold, then the middle branch where ``|z| > knee1``, then ``z`` where ``|z| > knee2``."""
    a, mid, mask = np.empty(p, dtype), np.empty(p, dtype), np.empty(p, bool)

    def fn(z, out):
        np.abs(z, out=a)
        np.subtract(a, tau, out=out)
        np.maximum(out, 0, out=out)
        np.copysign(out, z, out=out)
        np.subtract(a, shift, out=mid)
        np.multiply(mid, inv, out=mid)
        np.copysign(mid, z, out=mid)
        np.greater(a, knee1, out=mask)
        np.copyto(out, mid, where=mask)
        np.greater(a, knee2, out=mask)
        np.copyto(out, z, where=mask)
        return out

    return fn


def make_case(name: str, p: int, dtype) -> Case:
    rng = np.random.default_rng(7)
    if name == "l1":
        return Case(R.L1(1.0), 2, _soft_numpy(STEP * 1.0))
    if name == "l1w":
        weights = rng.uniform(0.0, 2.0, p)
        # NumPy gets its thresholds precomputed (a caller with a fixed step could cache them):
        # a lower bound on the kernel's speed-up.
        upper = (STEP * weights).astype(dtype)
        lower = -upper

        def fn(z, out):
            np.clip(z, lower, upper, out=out)
            np.subtract(z, out, out=out)
            return out

        return Case(R.L1(1.0, weights=weights), 2, fn, shared=1)
    if name == "enet":
        l1, l2 = 1.0, 1.0
        return Case(R.ElasticNet(l1, l2), 2, _soft_numpy(STEP * l1, 1.0 / (1.0 + STEP * l2)))
    if name == "group":
        lam = 1.0
        tau = STEP * lam * np.sqrt(GROUP_SIZE)

        def fn(z, out):
            blocks = z.reshape(-1, GROUP_SIZE)
            norms = np.sqrt(np.einsum("ij,ij->i", blocks, blocks))
            with np.errstate(divide="ignore"):
                factor = np.maximum(1.0 - tau / norms, 0.0)
            np.multiply(blocks, factor[:, None], out=out.reshape(-1, GROUP_SIZE))
            return out

        return Case(R.GroupLasso(lam, groups=GROUP_SIZE), 2, fn)
    if name == "box":
        return Case(R.Box(-1.0, 1.0), 2, lambda z, out: np.clip(z, -1.0, 1.0, out=out))
    if name == "nonneg":
        return Case(R.NonNegative(), 2, lambda z, out: np.maximum(z, 0, out=out))
    if name == "l2ball":
        radius = 1.0

        def fn(z, out):
            norm = np.linalg.norm(z)
            return np.multiply(z, min(1.0, radius / norm), out=out)

        return Case(R.L2Ball(radius), 3, fn)
    if name == "l1ball":
        radius = 0.1 * p  # ||z||_1 ~ 0.8 p: the projection is active, about a fifth of z survives
        return Case(R.L1Ball(radius), 3, lambda z, out: reference.project_l1_ball(z[None], radius, out[None]))
    if name == "simplex":
        radius = 1.0
        return Case(R.Simplex(radius), 3, lambda z, out: reference.project_simplex(z[None], radius, out[None]))
    if name == "mcp":
        lam, gamma = 1.0, 3.0
        return Case(R.MCP(lam, gamma), 2, _mcp_numpy(STEP * lam, gamma * lam, 1.0 / (1.0 - STEP / gamma), dtype, p))
    if name == "scad":
        lam, a = 1.0, 3.7
        return Case(
            R.SCAD(lam, a),
            2,
            _scad_numpy(STEP * lam, (1 + STEP) * lam, a * lam, a * STEP * lam / (a - 1), 1.0 / (1.0 - STEP / (a - 1)),
                        dtype, p),
        )
    raise ValueError(name)


PROX_NAMES = ("l1", "l1w", "enet", "group", "box", "nonneg", "l2ball", "l1ball", "simplex", "mcp", "scad")
ROW_PROXES = ("group", "l2ball", "l1ball", "simplex")


def _prox_params():
    return [
        pytest.param(name, p, n, dtype, id=f"{name}-p{_fmt_p(p)}{_layout(p, n)}-{_tag(dtype)}")
        for dtype in (F64, F32)
        for p in SIZES
        for n in ROWS
        for name in PROX_NAMES
    ]


@pytest.mark.parametrize(("name", "p", "n", "dtype"), _prox_params())
def test_prox(kbench, name, p, n, dtype):
    kbench.benchmark.group = f"prox p={_fmt_p(p)}{_layout(p, n)} {_tag(dtype)}"
    q = p // n
    case = make_case(name, q, dtype)
    z = np.random.default_rng(p).standard_normal((n, q)).astype(dtype)
    out = np.empty_like(z)
    reg = case.reg

    kbench.run(lambda: reg.prox(z, STEP, out=out), p)

    expected = np.empty_like(z)
    for row, row_out in zip(z, expected, strict=True):
        case.numpy(row, row_out)
    np.testing.assert_allclose(out, expected, **_tol(dtype),
                               err_msg=f"the NumPy expression of {name} disagrees with the kernel")
    numpy_s = kbench.numpy_time(lambda: [case.numpy(row, row_out) for row, row_out in zip(z, expected, strict=True)],
                                p)
    plain_out = np.empty_like(z)
    plain_s = kbench.plain_time(plain_prox(reg, z, STEP, plain_out), p,
                                check=lambda: np.testing.assert_allclose(plain_out, out, rtol=1e-4, atol=1e-5))
    kbench.record(p, dtype, case.nbytes(n, q, z.itemsize), numpy_s, plain_s=plain_s,
                  kernel_s=_kernel_time(kbench, lambda: reg.prox(z, STEP, out=out), p),
                  plain_target=TARGET_X_PLAIN_ROWS if name in ROW_PROXES else TARGET_X_PLAIN)


# ---- nuclear norm: SVT against the bare SVD ----------------------------------------------------
NUCLEAR_SHAPE = (300, 300)


def test_nuclear_svt(kbench):
    kbench.benchmark.group = "nuclear 300x300"
    kbench.name = "nuclear-300x300-f64"
    m, k = NUCLEAR_SHAPE
    z = np.random.default_rng(3).standard_normal(m * k)
    out = np.empty_like(z)
    reg = R.Nuclear(lam=20.0, shape=NUCLEAR_SHAPE)  # tau = 10: about 64 % of the singular values survive
    rounds = 30  # about 15 ms a call

    kbench.run(lambda: reg.prox(z, STEP, out=out), m * k, rounds=rounds)

    matrix = z.reshape(m, k)
    svd_s = kbench.numpy_time(lambda: np.linalg.svd(matrix, full_matrices=False), m * k)
    if kbench.min_s is not None:
        ratio = kbench.min_s / svd_s
        note = f"SVT/SVD {ratio:.2f} (svd {svd_s * 1e3:.2f} ms)"
        kbench.record(m * k, z.dtype, None, note=note, extra={"svd_s": svd_s, "svt_over_svd": round(ratio, 3)})


# ---- the fused normal-map step -----------------------------------------------------------------
LR, GAMMA = 0.1, 0.5


def _nmap_numpy(reg, n, q, dtype):
    """The unfused NumPy step: direction, step, then the NumPy prox of ``reg`` row by row."""
    inv_gamma = 1.0 / GAMMA
    if isinstance(reg, R.MCP):
        prox = _mcp_numpy(GAMMA * reg.lam, reg.gamma * reg.lam, 1.0 / (1.0 - GAMMA / reg.gamma), dtype, n * q)
    else:
        prox = _soft_numpy(GAMMA * reg.lam)
    shift = np.empty(q, dtype)

    def fn(z, g, c, z_ref, x_ref, z_out, x_out):
        np.subtract(z_ref, x_ref, out=shift)
        np.multiply(shift, inv_gamma, out=shift)
        np.add(g, shift, out=z_out)
        np.add(z_out, c, out=z_out)
        np.multiply(z_out, LR, out=z_out)
        np.subtract(z, z_out, out=z_out)
        prox(z_out, x_out)
        return z_out, x_out

    return fn


def _nmap_params():
    return [
        pytest.param(name, p, n, dtype, id=f"nmap-{name}-p{_fmt_p(p)}{_layout(p, n)}-{_tag(dtype)}")
        for dtype in (F64, F32)
        for p in SIZES
        for n in ROWS
        for name in ("l1", "mcp")
    ]


@pytest.mark.parametrize(("name", "p", "n", "dtype"), _nmap_params())
def test_normal_map(kbench, name, p, n, dtype):
    q = p // n
    kbench.benchmark.group = f"normal map p={_fmt_p(p)}{_layout(p, n)} {_tag(dtype)}"
    reg = R.L1(1.0) if name == "l1" else R.MCP(1.0, 3.0)
    rng = np.random.default_rng(p + n)
    z, g, c = (rng.standard_normal((n, q)).astype(dtype) for _ in range(3))
    z_ref = rng.standard_normal(q).astype(dtype)
    x_ref = reg.prox(z_ref, GAMMA)
    z_out, x_out = np.empty_like(z), np.empty_like(z)

    def step():
        return reg.normal_map_step(z, g, z_ref, x_ref, LR, GAMMA, correction=c, z_out=z_out, x_out=x_out)

    kbench.run(step, p)

    numpy_fn = _nmap_numpy(reg, n, q, dtype)
    z_np, x_np = np.empty_like(z), np.empty_like(z)
    numpy_fn(z, g, c, z_ref, x_ref, z_np, x_np)
    np.testing.assert_allclose(z_out, z_np, **_tol(dtype))
    np.testing.assert_allclose(x_out, x_np, **_tol(dtype))
    numpy_s = kbench.numpy_time(lambda: numpy_fn(z, g, c, z_ref, x_ref, z_np, x_np), p)
    plain_s = None
    if name == "l1":
        x_plain = np.empty_like(z)
        plain_s = kbench.plain_time(
            plain_normal_map_soft(z, g, c, z_ref, x_ref, LR, GAMMA, GAMMA * reg.lam, np.empty_like(z), x_plain), p,
            check=lambda: np.testing.assert_allclose(x_plain, x_out, rtol=1e-4, atol=1e-5))
    itemsize = np.dtype(dtype).itemsize
    nbytes = (5 * n * q + 2 * q) * itemsize  # read z, g, c (n x q) and z_ref, x_ref (q); write z_out, x_out
    kbench.record(p, dtype, nbytes, numpy_s, plain_s=plain_s, kernel_s=_kernel_time(kbench, step, p))
