"""CuPy kernels: the separable prox, the fused normal-map step and the nuclear-norm prox.

The two element-wise kernels share one CUDA device function, ``fedopt_prox1``, which switches on
``kind`` exactly as :func:`fedopt.kernels.reference._elementwise` and propagates NaN the same way
(NumPy's ``sign``, ``maximum``, ``clip`` and ``where``). They compute in the dtype ``T`` of the
arrays: float32 arrays are processed in float32 with the float64 parameters rounded to float32,
where the reference promotes to float64 and rounds once at the end (a difference of float32
rounding). The kernel objects are built once, at import; CuPy compiles each dtype on first use.
"""

from __future__ import annotations

import cupy

from fedopt.kernels import KIND_NAMES

_PREAMBLE = r"""
/* i % p, in 32 bits while both fit: 64-bit division is emulated, and slow, on GPUs. */
__device__ __forceinline__ ptrdiff_t fedopt_col(ptrdiff_t i, ptrdiff_t p) {
    return i <= 0x7fffffff && p <= 0x7fffffff ? (ptrdiff_t)((unsigned int)i % (unsigned int)p) : i % p;
}

template <typename T>
__device__ __forceinline__ T fedopt_sign(T v) {
    return v > T(0) ? T(1) : (v < T(0) ? T(-1) : v);  /* np.sign: 0 stays 0, NaN stays NaN */
}

template <typename T>
__device__ __forceinline__ T fedopt_soft(T v, T tau) {
    const T m = fabs(v) - tau;
    return fedopt_sign(v) * (m < T(0) ? T(0) : m);  /* np.maximum(m, 0) keeps a NaN m */
}

template <typename T>
__device__ __forceinline__ T fedopt_clip(T v, T lo, T hi) {
    const T x = v < lo ? lo : v;  /* np.clip = minimum(maximum(v, lo), hi), NaN kept */
    return x > hi ? hi : x;
}

/* The separable prox of code `kind` at v = z.flat[i] of a C-contiguous (n, p) array. t0..t4 is
   theta padded with zeros; w points to the C-contiguous rows of w, read (and the column i % p
   computed) only by the kinds that use them. */
template <typename T>
__device__ __forceinline__ T fedopt_prox1(int kind, T v, ptrdiff_t i, ptrdiff_t p,
                                          double t0, double t1, double t2, double t3, double t4,
                                          const T* w) {
    const T a = fabs(v);
    switch (kind) {
    case 1:  /* SOFT */
        return T(t1) * fedopt_soft(v, T(t0));
    case 2:  /* SOFT_WEIGHTED */
        return T(t1) * fedopt_soft(v, T(t0) * w[fedopt_col(i, p)]);
    case 3:  /* CLIP */
        return fedopt_clip(v, T(t0), T(t1));
    case 4: {  /* CLIP_VECTOR */
        const ptrdiff_t j = fedopt_col(i, p);
        return fedopt_clip(v, w[j], w[p + j]);
    }
    case 5:    /* MCP: theta = (tau, knee, inv) */
    case 8: {  /* MCP_WEIGHTED: lam, so every threshold, weighted by the first row of w */
        const T lam = kind == 8 ? w[fedopt_col(i, p)] : T(1);
        return a <= T(t0) * lam ? T(0) : (a <= T(t1) * lam ? fedopt_sign(v) * (a - T(t0) * lam) * T(t2) : v);
    }
    case 6:    /* SCAD: theta = (tau, knee1, knee2, shift, inv) */
    case 9: {  /* SCAD_WEIGHTED */
        const T lam = kind == 9 ? w[fedopt_col(i, p)] : T(1);
        return a <= T(t1) * lam ? fedopt_soft(v, T(t0) * lam)
                                : (a <= T(t2) * lam ? fedopt_sign(v) * (a - T(t3) * lam) * T(t4) : v);
    }
    case 7: {  /* SOFT_MASKED: the scale where the second row of w is not 0 */
        const ptrdiff_t j = fedopt_col(i, p);
        const T x = fedopt_soft(v, T(t0) * w[j]);
        return w[p + j] != T(0) ? T(t1) * x : x;
    }
    default:  /* IDENTITY; unknown codes are refused on the host */
        return v;
    }
}
"""

_THETA = "float64 t0, float64 t1, float64 t2, float64 t3, float64 t4"

_prox_kernel = cupy.ElementwiseKernel(
    f"T z, raw T w, int32 kind, int64 p, {_THETA}",
    "T out",
    "out = fedopt_prox1<T>(kind, z, i, p, t0, t1, t2, t3, t4, &w[0]);",
    "fedopt_prox_elementwise",
    preamble=_PREAMBLE,
)

_normal_map_kernel = cupy.ElementwiseKernel(
    f"T z, T g, raw T c, bool has_c, raw T z_ref, raw T x_ref, float64 eta, float64 inv_gamma, "
    f"raw T w, int32 kind, int64 p, {_THETA}",
    "T z_out, T x_out",
    """
    const ptrdiff_t j = fedopt_col(i, p);
    T direction = g + (z_ref[j] - x_ref[j]) * T(inv_gamma);
    if (has_c) direction += c[i];
    const T z_new = z - T(eta) * direction;
    z_out = z_new;
    x_out = fedopt_prox1<T>(kind, z_new, i, p, t0, t1, t2, t3, t4, &w[0]);
    """,
    "fedopt_normal_map_step",
    preamble=_PREAMBLE,
)


def _theta5(kind, theta):
    """``theta`` as the kernels' five float scalars (zero-padded), once ``kind`` is checked."""
    if kind not in KIND_NAMES:
        raise ValueError(f"unknown prox kind {kind}")
    return (*map(float, theta), *(0.0,) * (5 - len(theta)))


def prox_elementwise(z, kind, theta, w, out):
    """Separable prox in one pass, e.g. ``out[:] = theta[1] * sign(z) * maximum(abs(z) - theta[0], 0)`` for SOFT."""
    _prox_kernel(z, w, kind, z.shape[1], *_theta5(kind, theta), out)
    return out


def normal_map_step(z, g, c, z_ref, x_ref, eta, inv_gamma, kind, theta, w, z_out, x_out):
    """Fused ``z_out[:] = z - eta * (g + (z_ref - x_ref) * inv_gamma + c)``; ``x_out[:] = prox(z_out)``.

    One pass reading ``z``, ``g`` and ``c`` (not at all when ``c`` is empty) and writing both outputs.
    """
    theta5 = _theta5(kind, theta)
    step = (float(eta), float(inv_gamma))
    _normal_map_kernel(z, g, c, c.size > 0, z_ref, x_ref, *step, w, kind, z.shape[1], *theta5, z_out, x_out)
    return z_out, x_out


def prox_nuclear(z, n_rows, tau, out):
    """``U diag(maximum(s - tau, 0)) V^T`` of each row read as an ``(n_rows, p // n_rows)`` matrix, as
    :func:`fedopt.kernels.reference.prox_nuclear`: NaN for a row with NaN or inf, and each matrix
    divided by its largest magnitude ``c`` and thresholded at ``tau / c``, then scaled back.

    The SVDs of all rows are one batched cuSOLVER call (``cupy.linalg.svd`` on the stacked matrices).
    A non-finite matrix enters it as zeros and is masked after, so that no shape depends on the data
    and nothing waits for the host.
    """
    matrices = z.reshape(z.shape[0], n_rows, z.shape[1] // n_rows)
    finite = cupy.isfinite(matrices).all(axis=(1, 2), keepdims=True)
    largest = cupy.abs(matrices).max(axis=(1, 2), keepdims=True)
    c = cupy.where(finite & (largest > 0), largest, 1).astype(z.dtype)  # exact: an entry's magnitude (or 1)
    u, s, vt = cupy.linalg.svd(cupy.where(finite, matrices / c, 0), full_matrices=False)
    thresholds = (tau / c[:, :, 0].astype(cupy.float64)).astype(z.dtype)  # inf beyond the dtype: all shrunk
    shrunk = cupy.maximum(s - thresholds, 0)
    result = cupy.matmul(u * shrunk[:, None, :], vt) * c
    out[...] = cupy.where(finite, result, cupy.nan).reshape(z.shape)
    return out
