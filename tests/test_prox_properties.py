"""Mathematical properties of every prox, checked with Hypothesis on the default (Numba) backend.

The checks do not compare with the NumPy reference (that is ``test_kernel_parity.py``); they test
what a prox must satisfy whatever the code: the optimality condition ``(z - x) / step in
d phi(x)``, the variational inequality of projections, Moreau's identity, firm
nonexpansiveness, the Lipschitz bound of weakly convex proxes, brute-force 1-D minimisation,
membership and idempotence, limits, and the fused normal-map step. Everything is float64, on
vectors ``(p,)`` and batches ``(n, p)``.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fedopt import regularizers as R
from fedopt._backend import backend_for
from fedopt.kernels.cpu.rows import ROW_CHUNK

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

ATOL = 1e-9  # absolute slack of the float64 identities, multiplied by the scale of the data

# ---- strategies --------------------------------------------------------------------------------


def _no_underflow(v):
    """Magnitudes below 1e-150 become 0: their squares underflow, so the identities' absolute
    slack would not hold (the extreme magnitudes have their own tests at the end)."""
    return 0.0 if abs(v) < 1e-150 else v


coords = st.floats(-4.0, 4.0, allow_nan=False, allow_subnormal=False).map(_no_underflow)
wide = st.floats(-100.0, 100.0, allow_nan=False, allow_subnormal=False).map(_no_underflow)
steps = st.floats(1e-3, 10.0)
strengths = st.floats(0.0, 3.0, allow_subnormal=False)
seeds = st.integers(0, 2**32 - 1)  # for the NumPy generator of auxiliary data (weights, centers, ...)


@st.composite
def arrays(draw, p, elements=coords):
    """A vector ``(p,)`` or a batch ``(n, p)`` of float64."""
    shape = draw(st.sampled_from([(p,), (1, p), (draw(st.integers(2, 4)), p)]))
    return draw(hnp.arrays(np.float64, shape, elements=elements))


@st.composite
def vectors_and_p(draw, max_p=10, elements=coords):
    """``(z, p)``: a vector or batch of ``p <= max_p`` coordinates, and ``p``."""
    p = draw(st.integers(1, max_p))
    return draw(arrays(p, elements)), p


def rows(x):
    """``x`` as a 2-D batch (a vector becomes one row)."""
    return np.atleast_2d(x)


def scale(*arrays_or_numbers):
    """``1 + max |.|`` over the arguments: the size that float64 rounding is relative to."""
    return 1.0 + max(float(np.max(np.abs(a), initial=0.0)) for a in arrays_or_numbers)


def test_default_backend_is_numba():
    """The property tests run on the compiled kernels: a host array dispatches to ``numba``."""
    assert backend_for(np.zeros(3)).name == "numba"


# ---- optimality conditions: (z - x) / step in the subdifferential of phi at x --------------------


def assert_l1_optimality(z, x, thresholds, atol):
    """``z - x in thresholds * d|.|(x)`` coordinatewise (``thresholds = step * lam * w``)."""
    d = z - x
    thresholds = np.broadcast_to(thresholds, z.shape)
    nonzero = x != 0
    np.testing.assert_allclose(d[nonzero], (thresholds * np.sign(x))[nonzero], rtol=0, atol=atol)
    assert np.all(np.abs(d[~nonzero]) <= thresholds[~nonzero] + atol), "|z - x| > step * lam * w where x = 0"


@SETTINGS
@given(data=vectors_and_p(), lam=strengths, step=steps, use_weights=st.booleans(), seed=seeds)
def test_l1_optimality(data, lam, step, use_weights, seed):
    """Soft-thresholding solves ``z - x in step * lam * w * sign(x)``; zero weights leave coordinates free."""
    z, p = data
    weights = None
    if use_weights:
        rng = np.random.default_rng(seed)
        weights = rng.uniform(0, 2, p) * (rng.random(p) < 0.7)  # some weights exactly 0
    reg = R.L1(lam, weights=weights)
    x = reg.prox(z, step)
    assert x.shape == z.shape and x.dtype == np.float64
    w = 1.0 if weights is None else weights
    assert_l1_optimality(z, x, step * lam * w, ATOL * scale(z, step * lam))
    if weights is not None:
        np.testing.assert_array_equal(rows(x)[:, weights == 0], rows(z)[:, weights == 0])


@SETTINGS
@given(data=vectors_and_p(), l1=strengths, l2=strengths, step=steps)
def test_elasticnet_optimality(data, l1, l2, step):
    """``z - x - step * l2 * x in step * l1 * sign(x)`` (the ridge part is differentiable)."""
    z, _ = data
    x = R.ElasticNet(l1, l2).prox(z, step)
    assert_l1_optimality(z - step * l2 * x, x, step * l1, ATOL * scale(z, step * l1, step * l2 * z))


def group_lists(labels):
    """The index arrays of the groups, in sorted label order."""
    return [np.flatnonzero(labels == g) for g in np.unique(labels)]


def assert_group_optimality(z, x, groups, thresholds, atol):
    """``z_g - x_g = t_g x_g / ||x_g||`` if ``x_g != 0``, else ``||z_g|| <= t_g`` (block soft-threshold)."""
    for zr, xr in zip(rows(z), rows(x), strict=True):
        for idx, t in zip(groups, thresholds, strict=True):
            xg, dg = xr[idx], zr[idx] - xr[idx]
            norm = np.linalg.norm(xg)
            if norm > 0:
                np.testing.assert_allclose(dg, t * xg / norm, rtol=0, atol=atol)
            else:
                assert np.linalg.norm(dg) <= t + atol, f"||z_g|| = {np.linalg.norm(dg)} > {t} but x_g = 0"


@SETTINGS
@given(size=st.integers(1, 4), n_groups=st.integers(1, 4), lam=strengths, step=steps, data=st.data())
def test_group_lasso_contiguous_optimality(size, n_groups, lam, step, data):
    """Block soft-thresholding with an int block size satisfies the group optimality condition."""
    p = size * n_groups
    z = data.draw(arrays(p))
    x = R.GroupLasso(lam, groups=size).prox(z, step)
    groups = [np.arange(g * size, (g + 1) * size) for g in range(n_groups)]
    assert_group_optimality(z, x, groups, [step * lam * np.sqrt(size)] * n_groups, ATOL * scale(z, step * lam))


@SETTINGS
@given(data=st.data(), lam=strengths, step=steps, explicit_weights=st.booleans())
def test_group_lasso_label_optimality(data, lam, step, explicit_weights):
    """Arbitrary (negative, unsorted, interleaved) labels; default ``sqrt(|g|)`` or given weights (some 0)."""
    p = data.draw(st.integers(1, 10))
    labels = np.array(data.draw(st.lists(st.integers(-3, 4), min_size=p, max_size=p)))
    groups = group_lists(labels)
    if explicit_weights:
        choices = st.sampled_from([0.0, 0.5, 1.0, 2.5])
        weights = np.array(data.draw(st.lists(choices, min_size=len(groups), max_size=len(groups))))
    else:
        weights = None
    z = data.draw(arrays(p))
    x = R.GroupLasso(lam, groups=labels, weights=weights).prox(z, step)
    w = np.array([np.sqrt(len(idx)) for idx in groups]) if weights is None else weights
    assert_group_optimality(z, x, groups, step * lam * w, ATOL * scale(z, step * lam * w))


def mcp_derivative(t, lam, gamma):
    """``P'(t)`` of MCP for ``t != 0``."""
    a = np.abs(t)
    return np.where(a <= gamma * lam, np.sign(t) * (lam - a / gamma), 0.0)


def scad_derivative(t, lam, a):
    """``P'(t)`` of SCAD for ``t != 0``."""
    u = np.abs(t)
    return np.sign(t) * np.where(u <= lam, lam, np.where(u <= a * lam, (a * lam - u) / (a - 1), 0.0))


def mcp_penalty(t, lam, gamma):
    a = np.abs(t)
    return np.where(a <= gamma * lam, lam * a - a * a / (2 * gamma), 0.5 * gamma * lam**2)


def scad_penalty(t, lam, a):
    u = np.abs(t)
    middle = (2 * a * lam * u - u * u - lam * lam) / (2 * (a - 1))
    return np.where(u <= lam, lam * u, np.where(u <= a * lam, middle, 0.5 * (a + 1) * lam * lam))


@st.composite
def weakly_convex(draw):
    """``(reg, step, derivative, penalty)`` for MCP or SCAD with ``step * rho <= 0.95``."""
    lam = draw(strengths)
    fraction = draw(st.floats(0.01, 0.95))
    if draw(st.booleans()):
        gamma = draw(st.floats(0.2, 6.0))
        reg = R.MCP(lam, gamma=gamma)
        return reg, fraction * gamma, lambda t: mcp_derivative(t, lam, gamma), lambda t: mcp_penalty(t, lam, gamma)
    a = draw(st.floats(2.05, 8.0))
    reg = R.SCAD(lam, a=a)
    return reg, fraction * (a - 1), lambda t: scad_derivative(t, lam, a), lambda t: scad_penalty(t, lam, a)


@SETTINGS
@given(case=weakly_convex(), data=vectors_and_p(elements=st.floats(-12, 12)))
def test_weakly_convex_frechet_optimality(case, data):
    """MCP/SCAD: ``z - x = step * P'(x)`` where ``x != 0`` and ``|z| <= step * lam`` where ``x = 0``."""
    reg, step, derivative, _ = case
    z, _ = data
    x = reg.prox(z, step)
    atol = ATOL * scale(z) / (1 - step * reg.weak_convexity)
    nonzero = x != 0
    np.testing.assert_allclose((z - x)[nonzero], step * derivative(x[nonzero]), rtol=0, atol=atol)
    assert np.all(np.abs(z[~nonzero]) <= step * reg.lam + atol), "x = 0 although |z| > step * lam"
    # the prox shrinks towards 0 and keeps the sign
    assert np.all(np.abs(x) <= np.abs(z) + atol)
    assert np.all(np.sign(x[nonzero]) == np.sign(z[nonzero]))


# ---- projections: variational inequality <z - x, y - x> <= 0 for every feasible y ---------------


def assert_variational_inequality(z, x, ys, atol):
    """``<z - x, y - x> <= atol`` for each row and every feasible point ``y`` in ``ys`` (rows)."""
    for zr, xr in zip(rows(z), rows(x), strict=True):
        worst = np.max((ys - xr) @ (zr - xr))
        assert worst <= atol, f"<z - x, y - x> = {worst} > 0: x is not the projection of z"


@st.composite
def boxes(draw, p):
    """A Box with scalar or per-coordinate bounds, some of them infinite, or NonNegative."""
    kind = draw(st.sampled_from(["scalar", "vector", "nonnegative"]))
    if kind == "nonnegative":
        return R.NonNegative()
    if kind == "scalar":
        lo = draw(st.floats(-3, 3))
        return R.Box(lo, lo + draw(st.floats(0, 3)))
    lo = np.array(draw(st.lists(st.floats(-3, 3) | st.just(-np.inf), min_size=p, max_size=p)))
    width = np.array(draw(st.lists(st.floats(0, 3) | st.just(np.inf), min_size=p, max_size=p)))
    return R.Box(lo, np.where(np.isfinite(lo), lo, draw(st.floats(-3, 3))) + width)


def box_points(reg, p, d_rows, x_rows, rng):
    """Feasible points of the box: random ones, and for each row the corner maximising ``<d, y>``."""
    lo, hi = np.broadcast_to(reg.lower, p), np.broadcast_to(reg.upper, p)
    finite_lo = np.where(np.isfinite(lo), lo, np.minimum(hi, 0) - 5)
    finite_hi = np.where(np.isfinite(hi), hi, finite_lo + 10)
    points = [finite_lo + rng.random((20, p)) * (finite_hi - finite_lo), finite_lo[None], finite_hi[None]]
    for d, x in zip(d_rows, x_rows, strict=True):
        points.append(np.where(d > 0, hi, np.where(d < 0, lo, x))[None])  # inf here fails the check, as it must
    return np.concatenate(points)


@SETTINGS
@given(data=st.data(), seed=seeds)
def test_box_variational_inequality(data, seed):
    """``clip`` is the projection: ``<z - x, y - x> <= 0`` for the worst corner and random points of the box."""
    p = data.draw(st.integers(1, 8))
    reg = data.draw(boxes(p))
    z = data.draw(arrays(p, wide))
    x = reg.prox(z, data.draw(steps))
    ys = box_points(reg, p, rows(z - x), rows(x), np.random.default_rng(seed))
    assert_variational_inequality(z, x, ys, ATOL * scale(z) ** 2)


@SETTINGS
@given(data=vectors_and_p(elements=wide), radius=st.floats(0.1, 20), centered=st.booleans(), seed=seeds)
def test_l2_ball_variational_inequality(data, radius, centered, seed):
    """Radial projection: ``<z - x, y - x> <= 0`` on the boundary point along ``z - x`` and random ball points."""
    z, p = data
    rng = np.random.default_rng(seed)
    center = rng.uniform(-3, 3, p) if centered else None
    c = 0.0 if center is None else center
    x = R.L2Ball(radius, center=center).prox(z, 1.0)
    u = rng.standard_normal((30, p))
    ys = [c + radius * u / np.linalg.norm(u, axis=1, keepdims=True) * rng.random((30, 1)) ** (1 / p)]
    for d in rows(z - x):
        if np.linalg.norm(d) > 0:
            ys.append(c + radius * d[None] / np.linalg.norm(d))  # maximiser of <d, y> over the ball
    assert_variational_inequality(z, x, np.concatenate(ys), ATOL * scale(z, c, radius) ** 2)


@SETTINGS
@given(data=vectors_and_p(elements=wide), radius=st.floats(0.1, 20))
def test_l1_ball_variational_inequality(data, radius):
    """The l1 ball is the hull of ``+-radius * e_j``: the inequality on these vertices is exact."""
    z, p = data
    x = R.L1Ball(radius).prox(z, 1.0)
    vertices = np.concatenate([radius * np.eye(p), -radius * np.eye(p)])
    assert_variational_inequality(z, x, vertices, ATOL * scale(z, radius) ** 2)


@SETTINGS
@given(data=vectors_and_p(elements=wide), radius=st.floats(0.1, 20))
def test_simplex_variational_inequality(data, radius):
    """The simplex is the hull of ``radius * e_j``: the inequality on these vertices is exact."""
    z, p = data
    x = R.Simplex(radius).prox(z, 1.0)
    assert_variational_inequality(z, x, radius * np.eye(p), ATOL * scale(z, radius) ** 2)


# ---- Moreau's identity z = prox_{t phi}(z) + t prox_{phi* / t}(z / t) ------------------------------


@SETTINGS
@given(data=vectors_and_p(), lam=strengths, t=steps, use_weights=st.booleans(), seed=seeds)
def test_moreau_l1_and_linf_ball(data, lam, t, use_weights, seed):
    """``(lam ||w . x||_1)*`` is the indicator of ``|y_j| <= lam w_j``: L1 prox + t * Box projection = z."""
    z, p = data
    weights = np.random.default_rng(seed).uniform(0, 2, p) if use_weights else None
    bound = lam * (1.0 if weights is None else weights)
    conjugate = R.Box(-bound, bound)
    total = R.L1(lam, weights=weights).prox(z, t) + t * conjugate.prox(z / t, 1.0 / t)
    np.testing.assert_allclose(total, z, rtol=0, atol=ATOL * scale(z, t * lam))
    np.testing.assert_allclose(conjugate.prox(z / t, 1.0), np.clip(z / t, -bound, bound), rtol=1e-14, atol=0)


@SETTINGS
@given(data=vectors_and_p(), lam=strengths, t=steps, weight=st.floats(0.1, 3))
def test_moreau_group_lasso_and_l2_ball(data, lam, t, weight):
    """One group: ``(lam w ||x||)*`` is the indicator of the l2 ball of radius ``lam w``."""
    z, p = data
    total = R.GroupLasso(lam, groups=p, weights=[weight]).prox(z, t)
    if lam > 0:
        total = total + t * R.L2Ball(lam * weight).prox(z / t, 1.0 / t)
    np.testing.assert_allclose(total, z, rtol=0, atol=ATOL * scale(z, t * lam * weight))


@SETTINGS
@given(data=st.data(), lam=st.floats(0.1, 3), t=steps)
def test_moreau_group_lasso_many_groups(data, lam, t):
    """Several labelled groups: the conjugate prox is the projection on a product of l2 balls."""
    p = data.draw(st.integers(1, 10))
    labels = np.array(data.draw(st.lists(st.integers(0, 3), min_size=p, max_size=p)))
    z = data.draw(arrays(p))
    x = R.GroupLasso(lam, groups=labels).prox(z, t)
    dual = np.empty_like(rows(z))
    for idx in group_lists(labels):
        dual[:, idx] = R.L2Ball(lam * np.sqrt(len(idx))).prox(rows(z)[:, idx] / t, 1.0)
    np.testing.assert_allclose(rows(x) + t * dual, rows(z), rtol=0, atol=ATOL * scale(z, t * lam))


@SETTINGS
@given(data=vectors_and_p(elements=wide), radius=st.floats(0.1, 20), t=steps, centered=st.booleans(),
       seed=seeds)
def test_moreau_l2_ball_and_support_function(data, radius, t, centered, seed):
    """``sigma_C(y) = <c, y> + r ||y||``; its prox is a shift then one-group lasso, independent of L2Ball."""
    z, p = data
    center = np.random.default_rng(seed).uniform(-3, 3, p) if centered else None
    c = np.zeros(p) if center is None else center
    s = 1.0 / t  # prox_{sigma_C / t}(z / t) = prox_{s r ||.||}(z / t - s c)
    support_prox = R.GroupLasso(radius, groups=p, weights=[1.0]).prox(z / t - s * c, s)
    total = R.L2Ball(radius, center=center).prox(z, t) + t * support_prox
    np.testing.assert_allclose(total, z, rtol=0, atol=ATOL * scale(z, c, radius))


@SETTINGS
@given(data=st.data(), t=steps)
def test_moreau_box_and_support_function(data, t):
    """``sigma_box(y) = sum max(l_j y_j, u_j y_j)``, whose prox has the closed form below."""
    p = data.draw(st.integers(1, 8))
    lo = np.array(data.draw(st.lists(st.floats(-3, 3), min_size=p, max_size=p)))
    hi = lo + np.array(data.draw(st.lists(st.floats(0, 3), min_size=p, max_size=p)))
    z = data.draw(arrays(p, wide))
    w, s = z / t, 1.0 / t
    support_prox = np.where(w > s * hi, w - s * hi, np.where(w < s * lo, w - s * lo, 0.0))
    total = R.Box(lo, hi).prox(z, t) + t * support_prox
    np.testing.assert_allclose(total, z, rtol=0, atol=ATOL * scale(z))


# ---- firm nonexpansiveness of every convex prox --------------------------------------------------


def convex_regularizers(m, k, rng):
    """Every convex regularizer for vectors of length ``p = m * k`` (a few variants of each)."""
    p = m * k
    return {
        "zero": R.Zero(),
        "l1": R.L1(rng.uniform(0, 2)),
        "l1_weighted": R.L1(rng.uniform(0, 2), weights=rng.uniform(0, 2, p) * (rng.random(p) < 0.7)),
        "elasticnet": R.ElasticNet(rng.uniform(0, 2), rng.uniform(0, 2)),
        "group_blocks": R.GroupLasso(rng.uniform(0, 2), groups=k),
        "group_labels": R.GroupLasso(rng.uniform(0, 2), groups=rng.integers(-2, 3, p)),
        "box": R.Box(-rng.uniform(0, 2, p), rng.uniform(0, 2, p)),
        "nonnegative": R.NonNegative(),
        "l2_ball": R.L2Ball(rng.uniform(0.1, 3), center=rng.uniform(-1, 1, p)),
        "l1_ball": R.L1Ball(rng.uniform(0.1, 3)),
        "simplex": R.Simplex(rng.uniform(0.1, 3)),
        "nuclear": R.Nuclear(rng.uniform(0, 2), shape=(m, k)),
    }


CONVEX = list(convex_regularizers(1, 1, np.random.default_rng(0)))


@SETTINGS
@given(name=st.sampled_from(CONVEX), m=st.integers(1, 3), k=st.integers(1, 4), seed=seeds, step=steps,
       data=st.data())
def test_convex_prox_is_firmly_nonexpansive(name, m, k, seed, step, data):
    """``||P(a) - P(b)||^2 <= <P(a) - P(b), a - b>`` row by row, for every convex regularizer."""
    reg = convex_regularizers(m, k, np.random.default_rng(seed))[name]
    a = data.draw(arrays(m * k, wide))
    b = a + data.draw(hnp.arrays(np.float64, a.shape, elements=st.floats(-2, 2)))  # close and far pairs
    diff = rows(reg.prox(a, step) - reg.prox(b, step))
    lhs = np.sum(diff * diff, axis=1)
    rhs = np.sum(diff * rows(a - b), axis=1)
    assert np.all(lhs <= rhs + ATOL * scale(a, b) ** 2), f"{name}: ||P(a) - P(b)||^2 = {lhs} > {rhs}"


# ---- MCP and SCAD: Lipschitz bound and brute-force minimisation -----------------------------------


@SETTINGS
@given(case=weakly_convex(), data=vectors_and_p(elements=st.floats(-12, 12)), shift=st.floats(-3, 3))
def test_weakly_convex_prox_lipschitz(case, data, shift):
    """``|P(a_j) - P(b_j)| <= |a_j - b_j| / (1 - step * rho)`` (Lemma 5), coordinatewise."""
    reg, step, _, _ = case
    lipschitz = 1 / (1 - step * reg.weak_convexity)
    a, _ = data
    b = a + shift * np.linspace(-1, 1, a.shape[-1])
    gap = np.abs(reg.prox(a, step) - reg.prox(b, step))
    assert np.all(gap <= lipschitz * np.abs(a - b) * (1 + 1e-9) + ATOL * scale(a, b)), "Lipschitz bound violated"
    # neighbours on a fine sorted grid through every branch (0, firm / middle, identity)
    knee = getattr(reg, "gamma", getattr(reg, "a", 0)) * reg.lam
    v = np.linspace(-1.5 * knee - 1, 1.5 * knee + 1, 4001)
    x = reg.prox(v, step)
    assert np.all(np.diff(x) >= -ATOL), "the prox of a symmetric penalty nondecreasing in |t| is monotone"
    assert np.all(np.diff(x) <= lipschitz * np.diff(v) * (1 + 1e-9) + ATOL * scale(v)), "Lipschitz bound violated"


GRID_H = 2e-4  # grid spacing of the brute-force minimisation


@FEW
@given(case=weakly_convex(), v=hnp.arrays(np.float64, 16, elements=st.floats(-8, 8)))
def test_weakly_convex_prox_matches_grid_minimisation(case, v):
    """The closed form minimises ``step * P(x) + (x - v)^2 / 2``: no grid point does better, and the grid
    minimiser is within ``h / sqrt(1 - step * rho)`` (the objective is ``(1 - step * rho)``-strongly convex,
    C^1 away from 0, and 0 lies on the grid)."""
    reg, step, _, penalty = case
    x = reg.prox(v, step)
    reach = np.max(np.abs(v)) + 1.0
    grid = GRID_H * np.arange(-np.ceil(reach / GRID_H), np.ceil(reach / GRID_H) + 1)
    objective = step * penalty(grid)[None, :] + 0.5 * (grid[None, :] - v[:, None]) ** 2
    best = objective.min(axis=1)
    at_formula = step * penalty(x) + 0.5 * (x - v) ** 2
    assert np.all(at_formula <= best + 1e-10 * scale(v) ** 2), f"objective {at_formula} > grid minimum {best}"
    strong = 1 - step * reg.weak_convexity
    np.testing.assert_allclose(x, grid[objective.argmin(axis=1)], rtol=0, atol=1.5 * GRID_H / np.sqrt(strong) + 1e-9)


# ---- membership, idempotence, batches -----------------------------------------------------------


def sets(p, rng):
    return {
        "box": R.Box(-rng.uniform(0, 2, p), rng.uniform(0, 2, p)),
        "box_scalar": R.Box(-0.5, 1.5),
        "nonnegative": R.NonNegative(),
        "l2_ball": R.L2Ball(rng.uniform(0.1, 3), center=rng.uniform(-1, 1, p)),
        "l1_ball": R.L1Ball(rng.uniform(0.1, 3)),
        "simplex": R.Simplex(rng.uniform(0.1, 3)),
    }


SETS = list(sets(1, np.random.default_rng(0)))


@SETTINGS
@given(name=st.sampled_from(SETS), data=vectors_and_p(elements=wide), seed=seeds, step=steps)
def test_projection_lands_in_set_and_is_idempotent(name, data, seed, step):
    """``value(P(z)) == 0`` and ``P(P(z)) == P(z)``, whatever the step."""
    z, p = data
    reg = sets(p, np.random.default_rng(seed))[name]
    x = reg.prox(z, step)
    assert np.all(np.asarray(reg.value(x)) == 0), f"{name}: the projection is not in the set"
    if name != "nonnegative":  # the indicator is not trivially 0: a far point is outside
        assert np.all(np.isinf(reg.value(x + 1e6)))
    np.testing.assert_allclose(reg.prox(x, 1.0), x, rtol=0, atol=1e-12 * scale(z))


@SETTINGS
@given(data=vectors_and_p(elements=wide), radius=st.floats(0.1, 20))
def test_simplex_sums_to_radius(data, radius):
    """Every row of a simplex projection is ``>= 0`` and sums to the radius."""
    z, _ = data
    x = rows(R.Simplex(radius).prox(z, 1.0))
    assert np.all(x >= 0)
    np.testing.assert_allclose(x.sum(axis=1), radius, rtol=1e-12, atol=1e-12 * scale(z))


@SETTINGS
@given(data=vectors_and_p(elements=wide), radius=st.floats(0.1, 20), fill=st.floats(0, 0.999))
def test_l1_ball_outside_on_sphere_inside_unchanged(data, radius, fill):
    """Outside points land on the l1 sphere with their signs kept; inside points are returned as they are."""
    z, _ = data
    x = rows(R.L1Ball(radius).prox(z, 1.0))
    norms = np.abs(rows(z)).sum(axis=1)
    outside = norms > radius
    np.testing.assert_allclose(np.abs(x[outside]).sum(axis=1), radius, rtol=1e-12)
    assert np.all(x * rows(z) >= 0), "the l1-ball projection flipped a sign"
    inside = rows(z) * (fill * radius / np.maximum(norms, radius))[:, None]
    assert np.all(np.abs(inside).sum(axis=1) <= radius)
    np.testing.assert_array_equal(R.L1Ball(radius).prox(inside, 1.0), inside)


@SETTINGS
@given(data=vectors_and_p(elements=wide), seed=seeds)
def test_box_and_l2_ball_leave_inside_points_unchanged(data, seed):
    """Points inside the box / ball are fixed points of the projection, exactly."""
    z, p = data
    rng = np.random.default_rng(seed)
    box = R.Box(-rng.uniform(0, 2, p), rng.uniform(0, 2, p))
    inside_box = np.clip(z, box.lower, box.upper)
    np.testing.assert_array_equal(box.prox(inside_box, 1.0), inside_box)
    center = rng.uniform(-1, 1, p)
    ball = R.L2Ball(2.0, center=center)
    inside_ball = center + (z - center) * (1.9 / np.maximum(np.linalg.norm(z - center, axis=-1, keepdims=True), 2.0))
    np.testing.assert_allclose(ball.prox(inside_ball, 1.0), inside_ball, rtol=1e-15, atol=1e-15 * scale(inside_ball))


@FEW
@given(name=st.sampled_from([*CONVEX, "mcp", "scad"]), m=st.integers(1, 3), k=st.integers(1, 4), n=st.integers(2, 4),
       seed=seeds)
def test_batch_is_row_by_row(name, m, k, n, seed):
    """The prox of a batch equals the prox of each of its rows as a vector."""
    rng = np.random.default_rng(seed)
    regs = convex_regularizers(m, k, rng) | {"mcp": R.MCP(0.7, gamma=2.0), "scad": R.SCAD(0.7, a=3.7)}
    reg = regs[name]
    z = rng.standard_normal((n, m * k)) * 3
    batch = reg.prox(z, 0.8)
    for i in range(n):
        np.testing.assert_allclose(batch[i], reg.prox(z[i], 0.8), rtol=1e-13, atol=1e-14)


# ---- limits -------------------------------------------------------------------------------------


@SETTINGS
@given(data=vectors_and_p(elements=wide), step=steps, seed=seeds)
def test_zero_strength_is_identity(data, step, seed):
    """``lam = 0`` makes every penalty's prox the identity (exactly for the closed forms)."""
    z, p = data
    rng = np.random.default_rng(seed)
    exact = [
        R.Zero(),
        R.L1(0.0),
        R.L1(0.0, weights=rng.uniform(0, 2, p)),
        R.ElasticNet(0.0, 0.0),
        R.GroupLasso(0.0, groups=1),
        R.GroupLasso(0.0, groups=rng.integers(0, 3, p)),
        R.MCP(0.0, gamma=max(2 * step, 0.5)),
        R.SCAD(0.0, a=max(2 + step, 3.7)),
    ]
    for reg in exact:
        np.testing.assert_array_equal(reg.prox(z, step), z, err_msg=repr(reg))
    np.testing.assert_allclose(R.Nuclear(0.0, shape=(1, p)).prox(z, step), z, rtol=0, atol=1e-12 * scale(z))


@SETTINGS
@given(data=vectors_and_p(elements=wide), seed=seeds)
def test_tiny_step_is_nearly_identity(data, seed):
    """``step = 1e-12`` moves a point by at most ``step * lam * (weight)`` for every penalty."""
    z, p = data
    rng = np.random.default_rng(seed)
    lam = rng.uniform(0.1, 3)
    penalties = [
        R.L1(lam),
        R.L1(lam, weights=rng.uniform(0, 2, p)),
        R.ElasticNet(lam, lam),
        R.GroupLasso(lam, groups=rng.integers(0, 3, p)),
        R.MCP(lam, gamma=1.5),
        R.SCAD(lam, a=3.7),
        R.Nuclear(lam, shape=(1, p)),
    ]
    for reg in penalties:
        np.testing.assert_allclose(reg.prox(z, 1e-12), z, rtol=1e-11, atol=1e-11 * lam * np.sqrt(p), err_msg=repr(reg))


def svt(matrix, tau):
    """Singular-value thresholding by NumPy's SVD: L1's prox applied to the singular values."""
    u, s, vt = np.linalg.svd(matrix, full_matrices=False)
    return (u * np.maximum(s - tau, 0)) @ vt, np.maximum(s - tau, 0)


@SETTINGS
@given(m=st.integers(1, 4), k=st.integers(1, 4), n=st.integers(1, 3), lam=strengths, step=steps, seed=seeds)
def test_nuclear_is_l1_on_singular_values(m, k, n, lam, step, seed):
    """``prox(X) = U soft(s, step lam) V^T``; the singular values of the result are ``soft(s)``."""
    z = np.random.default_rng(seed).standard_normal((n, m * k)) * 2
    if n == 1 and seed % 2:
        z = z[0]  # a vector too
    x = rows(R.Nuclear(lam, shape=(m, k)).prox(z, step))
    for zr, xr in zip(rows(z), x, strict=True):
        expected, shrunk = svt(zr.reshape(m, k), step * lam)
        np.testing.assert_allclose(xr.reshape(m, k), expected, rtol=0, atol=1e-10 * scale(zr))
        singular = np.linalg.svd(xr.reshape(m, k), compute_uv=False)
        np.testing.assert_allclose(singular, shrunk, rtol=0, atol=1e-10 * scale(zr))


@SETTINGS
@given(m=st.integers(1, 5), k=st.integers(1, 5), lam=strengths, step=steps,
       diag=hnp.arrays(np.float64, 5, elements=coords))
def test_nuclear_on_diagonal_matrix_is_l1_on_diagonal(m, k, lam, step, diag):
    """A (rectangular) diagonal matrix stays diagonal, its diagonal soft-thresholded like L1."""
    r = min(m, k)
    matrix = np.zeros((m, k))
    matrix[np.arange(r), np.arange(r)] = diag[:r]
    x = R.Nuclear(lam, shape=(m, k)).prox(matrix.ravel(), step).reshape(m, k)
    expected = np.zeros((m, k))
    expected[np.arange(r), np.arange(r)] = R.L1(lam).prox(diag[:r], step)
    np.testing.assert_allclose(x, expected, rtol=0, atol=1e-12 * scale(diag))


# ---- the fused normal-map step ------------------------------------------------------------------


def normal_map_regularizers(p, rng):
    return {
        "l1_weighted": R.L1(0.4, weights=rng.uniform(0, 2, p)),  # separable
        "mcp": R.MCP(0.5, gamma=3.0),  # separable, weakly convex
        "group_labels": R.GroupLasso(0.6, groups=rng.integers(0, 3, p)),  # non-separable
        "l2_ball": R.L2Ball(1.2, center=rng.uniform(-1, 1, p)),  # non-separable
        "simplex": R.Simplex(2.0),  # non-separable
    }


@SETTINGS
@given(name=st.sampled_from(list(normal_map_regularizers(1, np.random.default_rng(0)))), data=st.data(),
       with_correction=st.booleans(), lr=st.floats(1e-3, 1.0), gamma=st.floats(0.05, 2.5), seed=seeds)
def test_normal_map_step_is_gradient_step_then_prox(name, data, with_correction, lr, gamma, seed):
    """``z_new = z - lr (grad + (z_ref - x_ref) / gamma + c)`` and ``x_new = prox_{gamma phi}(z_new)``."""
    p = data.draw(st.integers(1, 10))
    rng = np.random.default_rng(seed)
    reg = normal_map_regularizers(p, rng)[name]
    z = data.draw(arrays(p))
    grad, correction = rng.standard_normal(z.shape), rng.standard_normal(z.shape) if with_correction else None
    z_ref = rng.standard_normal(p)
    x_ref = reg.prox(z_ref, gamma)
    z_new, x_new = reg.normal_map_step(z, grad, z_ref, x_ref, lr, gamma, correction)
    expected_z = z - lr * (grad + (z_ref - x_ref) / gamma + (0.0 if correction is None else correction))
    assert z_new.shape == z.shape and x_new.shape == z.shape
    np.testing.assert_allclose(z_new, expected_z, rtol=1e-12, atol=1e-12 * scale(z, expected_z))
    np.testing.assert_allclose(x_new, reg.prox(expected_z, gamma), rtol=1e-11, atol=1e-11 * scale(expected_z))


# ---- extreme magnitudes ------------------------------------------------------------------------


EXTREME_BACKENDS = pytest.mark.parametrize("backend", ["numpy", "numba"])


@EXTREME_BACKENDS
@pytest.mark.parallel
@pytest.mark.parametrize("long", [False, True], ids=["short-row", "long-row"])
@pytest.mark.parametrize(
    "reg, z, expected",
    [
        (R.Simplex(1.0), [1e16], [1.0]),
        (R.Simplex(1.0), [1e16, 1e16, 0.0], [0.5, 0.5, 0.0]),
        (R.Simplex(1e-6), [1e10, 1e10], [5e-7, 5e-7]),
        (R.Simplex(1.0), [-1e16, -1e16, -1e16 - 2], [0.5, 0.5, 0.0]),
        (R.Simplex(1.0), [1e308, -1e308, 0.0], [1.0, 0.0, 0.0]),
        (R.L1Ball(1.0), [1e20, 3.0, -2.0], [1.0, 0.0, 0.0]),
        (R.L1Ball(1.0), [1e16, -1e16, 0.0], [0.5, -0.5, 0.0]),
        (R.L1Ball(1.0), [1e308, 1e308, 0.0], [0.5, 0.5, 0.0]),  # a sum beyond float64's range
    ],
    ids=["simplex-one", "simplex-pair", "simplex-small-radius", "simplex-negative", "simplex-extremes", "l1-one",
         "l1-pair", "l1-overflow"],
)
def test_projection_of_huge_entries_is_exact(backend, long, reg, z, expected):
    """Entries that dwarf the radius still project to the exact point of the set: the threshold is
    found on the entries minus the largest (SHIFT_RATIO), where the radius keeps its digits
    (unshifted, [1e16, 1e16, 0] went to 0). A long row pads with entries that stay inactive."""
    z, expected = np.array(z), np.array(expected)
    if long:  # 1 000 radii below the smallest entry (0 for the l1 ball): never active
        pad = 0.0 if isinstance(reg, R.L1Ball) else z.min() - 1e3 * reg.radius
        z, expected = (np.concatenate([a, np.full(ROW_CHUNK, b)]) for a, b in ((z, pad), (expected, 0.0)))
    np.testing.assert_allclose(reg.prox(z, 1.0, backend=backend), expected, rtol=1e-12, atol=0)


@EXTREME_BACKENDS
@pytest.mark.parallel
@pytest.mark.parametrize("p", [2, ROW_CHUNK + 3], ids=["short-row", "long-row"])
def test_l2_ball_projection_of_huge_and_tiny_points(backend, p):
    """The projection of a huge point on the unit ball is its direction, not the center (its
    squared norm overflows); a tiny point inside the ball stays where it is, and so does a tiny
    point inside a tiny ball's boundary, scaled exactly (its squared norm underflows)."""
    z = np.zeros((3, p))
    z[0, :2] = [3e200, -4e200]
    z[1, :2] = [3e-170, -4e-170]
    z[2, :2] = [3e-170, 4e-170]
    np.testing.assert_allclose(R.L2Ball(1.0).prox(z[:2], 1.0, backend=backend)[:, :2],
                               [[0.6, -0.8], [3e-170, -4e-170]], rtol=1e-12, atol=0)
    np.testing.assert_allclose(R.L2Ball(1e-170).prox(z[2], 1.0, backend=backend)[:2], [0.6e-170, 0.8e-170],
                               rtol=1e-12, atol=0)
    center = np.zeros(p)
    center[0] = 1e200
    point = np.zeros(p)
    point[:2] = [-3e200, 4e200]  # 4e200 * (-1, 1) from the center: lands on its sphere, at (-1, 1) / sqrt(2)
    np.testing.assert_allclose(R.L2Ball(1.0, center=center).prox(point, 1.0, backend=backend)[:2],
                               [1e200, 2**-0.5], rtol=1e-12, atol=0)


@EXTREME_BACKENDS
def test_float32_norms_beyond_float32s_range(backend):
    """A float32 row whose norm exceeds float32's range (3e38 * sqrt(2)) is projected on its
    direction, and barely shrunk by a small group threshold: the norms are taken in float64. Its
    simplex projection is exact too (the entries dwarf the radius: SHIFT_RATIO)."""
    z = np.array([3e38, -3e38], dtype=np.float32)
    np.testing.assert_allclose(R.L2Ball(1.0).prox(z, 1.0, backend=backend), [2**-0.5, -(2**-0.5)], rtol=1e-6)
    np.testing.assert_allclose(R.GroupLasso(1e30, groups=2).prox(z, 1.0, backend=backend), z, rtol=1e-6)
    np.testing.assert_allclose(R.Simplex(1.0).prox(np.array([3e38, 3e38, 0.0], dtype=np.float32), 1.0,
                                                   backend=backend), [0.5, 0.5, 0.0], rtol=1e-6)


@EXTREME_BACKENDS
@pytest.mark.parametrize("magnitude", [2e4, 1e6, 3e7], ids=["2e4", "1e6", "3e7"])
def test_float32_projection_on_large_bounds_and_centers_is_in_the_set(backend, magnitude):
    """A float32 projection on a box with large bounds, or on a ball with a large center, has a finite
    value: the clip rounds a bound by up to half a float32 ulp (7.8e-4 at 2e4), and ``x - center``
    carries the rounding of ``|center|``, both beyond an absolute slack of sqrt(eps32) = 3.45e-4, so
    the slack grows with them. A point 1% of the magnitude outside is still outside."""
    rng = np.random.default_rng(int(magnitude))
    p = 6
    lower = -magnitude * rng.uniform(0.5, 1, p) - 0.3  # bounds float32 cannot represent
    upper = magnitude * rng.uniform(0.5, 1, p) + 0.3
    for lo, hi in ((lower, upper), (-magnitude - 0.3, magnitude + 0.3)):
        box = R.Box(lo, hi)
        z = np.stack([np.broadcast_to(hi + 1.0, p), np.broadcast_to(lo - 1.0, p)]).astype(np.float32)
        x = box.prox(z, 1.0, backend=backend)  # on the bounds
        assert np.all(box.value(x) == 0), "a float32 point clipped to the box is outside it"
        assert np.all(np.isinf(box.value(x + np.sign(x) * np.float32(0.01 * magnitude))))
    center = (magnitude + 0.3) * rng.choice([-1.0, 1.0], p)
    ball = R.L2Ball(1.0, center=center)
    z = (center + 10 * rng.standard_normal((50, p))).astype(np.float32)
    x = ball.prox(z, 1.0, backend=backend)
    assert np.all(ball.value(x) == 0), "a float32 point projected on the ball is outside it"
    assert np.all(np.isinf(ball.value(x + np.float32(0.01 * magnitude))))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_box_and_l2_ball_slack_stays_tight_for_small_magnitudes(dtype):
    """Points just outside a box or ball of magnitude about 1 are outside by value() (the slack is
    relative to the bounds and the center, never less tight than an absolute one)."""
    beyond = 1e-3 if dtype == np.float32 else 1e-7
    box = R.Box(-1.0, np.array([0.5, 1.0]))
    assert box.value(np.array([0.5, 1.0], dtype=dtype)) == 0
    assert box.value(np.array([0.5 + beyond, 1.0], dtype=dtype)) == np.inf
    assert box.value(np.array([0.5, -1.0 - beyond], dtype=dtype)) == np.inf
    ball = R.L2Ball(1.0, center=[0.5, -0.5])
    assert ball.value(np.array([1.5, -0.5], dtype=dtype)) == 0
    assert ball.value(np.array([1.5 + beyond, -0.5], dtype=dtype)) == np.inf


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_the_slack_of_a_far_ball_or_bound_is_its_rounding_not_a_share_of_its_size(dtype):
    """A unit ball centered at 1e4 (or a bound at 1e4) grants a few eps * 1e4 (2e-3 in float32), so a point
    0.05 beyond it is outside: a slack of sqrt(eps) * 1e4 (7.7 in float32) would take it in."""
    center = np.full(5, 1e4)
    ball, box = R.L2Ball(1.0, center=center), R.Box(-1e4, 1e4)
    assert ball.value((center + np.array([1.05, 0, 0, 0, 0])).astype(dtype)) == np.inf
    assert box.value(np.array([1e4 + 0.05, 0], dtype=dtype)) == np.inf
    assert box.value(np.array([0, -1e4 - 0.05], dtype=dtype)) == np.inf


def test_float32_run_on_a_large_box_bound_does_not_diverge():
    """A float32 FedNMap run whose model sits on a box bound of 2e4 finishes like the float64 one: the
    clipped point, half a float32 ulp (7.8e-4) outside the bound, had phi = inf and stopped the
    run as diverged at round 3."""
    import fedopt

    rng = np.random.default_rng(0)
    X = rng.standard_normal((400, 3))
    y = X @ np.array([5e4, -5e4, 1.0])
    box = R.Box(-20000.3, 20000.3)
    results = {}
    for dtype in ("float64", "float32"):
        problem = fedopt.problems.LeastSquares(fedopt.datasets.partition(X, y, 4, "iid", seed=0, dtype=dtype))
        results[dtype] = fedopt.run("fednmap", problem, box, rounds=50, seed=0, local_steps=2, lr_local=0.1,
                                    gamma=1.0, batch_size=None, progress=False)
    x32, x64 = results["float32"].x, results["float64"].x
    assert np.isfinite(results["float32"].history["objective"]).all()
    np.testing.assert_allclose(x32, x64, rtol=1e-5)
    np.testing.assert_allclose(x32[:2], [20000.3, -20000.3], rtol=1e-6)


@EXTREME_BACKENDS
@pytest.mark.parametrize("groups", [4, np.array([1, 0, 1, 0])], ids=["one-group", "interleaved-groups"])
def test_group_lasso_of_tiny_and_huge_entries(backend, groups):
    """``lam = 0`` is the identity, and ``lam * w << ||z_g||`` barely moves a group, even for tiny
    entries (their squares underflow to 0) and huge ones (their squares overflow to inf)."""
    for z in (np.array([1e-170, -3e-170, 2e-170, 5e-171]), np.array([1e200, -3e200, 2e200, 5e199])):
        np.testing.assert_array_equal(R.GroupLasso(0.0, groups=groups).prox(z, 1.0, backend=backend), z)
        np.testing.assert_allclose(R.GroupLasso(1e-300, groups=groups).prox(z, 1.0, backend=backend), z, rtol=1e-12,
                                   atol=0)
    for z in (np.array([3e200, 4e200, 0.0, 0.0]), np.array([3e-170, 4e-170, 0.0, 0.0])):  # phi = 2 * 5 * scale
        np.testing.assert_allclose(R.GroupLasso(2.0, groups=4, weights=[1.0]).value(z), 10 * z[0] / 3, rtol=1e-12)
    tiny = np.array([3e-170, 4e-170, 0.0, 0.0])  # norm 5e-170: shrunk by 1 - 1e-170 / 5e-170
    np.testing.assert_allclose(R.GroupLasso(1e-170, groups=4, weights=[1.0]).prox(tiny, 1.0, backend=backend),
                               0.8 * tiny, rtol=1e-12, atol=0)


@pytest.mark.parametrize("extra", [3, 4], ids=["odd", "even"])
@pytest.mark.parametrize("use_abs", [False, True], ids=["simplex", "l1-ball"])
def test_long_row_thresholds_are_finite(use_abs, extra):
    """The chunked threshold of a finite long row is finite, also when the radius is below the rounding
    of its largest entries (1e16 - 1 is 1e16: no entry lies above the safe lower bound, which gave
    -radius / 0 = -inf), and its projection sums to the radius."""
    from fedopt.kernels.cpu.rows import _newton_thresholds

    z = np.random.default_rng(extra).standard_normal((3, ROW_CHUNK + extra))
    z[0, [5, 9]] = 1e16
    z[1, 7] = 1e16
    tau, _ = _newton_thresholds(z, 1.0, use_abs)
    assert np.isfinite(tau).all()
    reg = R.L1Ball(1.0) if use_abs else R.Simplex(1.0)
    np.testing.assert_allclose(np.abs(reg.prox(z, 1.0)).sum(axis=1), 1.0, rtol=1e-12)


@EXTREME_BACKENDS
@pytest.mark.parallel
@pytest.mark.parametrize("p", [6, 7, ROW_CHUNK + 3, ROW_CHUNK + 4], ids=["short-even", "short-odd", "long-odd",
                                                                        "long-even"])
def test_l2_ball_projection_of_a_finite_point_whose_norm_overflows(backend, p):
    """Finite entries of 1e308 have a norm beyond float64's range: the point lands on the sphere, in
    its direction (``radius / inf`` sent it to the center), with a center too."""
    z = np.full(p, 1e308)
    np.testing.assert_allclose(R.L2Ball(1e308).prox(z, 1.0, backend=backend), z / np.sqrt(p), rtol=1e-12)
    center = np.full(p, -5e307)
    z = center + np.where(np.arange(p) % 2, 1e308, -1e308)  # +-1e308 from the center
    expected = center + (z - center) / np.sqrt(p) * 0.5
    np.testing.assert_allclose(R.L2Ball(5e307, center=center).prox(z, 1.0, backend=backend), expected, rtol=1e-12)


@EXTREME_BACKENDS
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("shape", [(2, 3), (3, 3)], ids=str)
def test_nuclear_of_non_finite_and_huge_entries(backend, dtype, shape):
    """A matrix with NaN or inf comes out all NaN (the SVD raised LinAlgError), the others as usual;
    finite entries near the dtype's largest value, whose singular values overflow, are thresholded
    on the matrix scaled down (they gave inf)."""
    m, k = shape
    rng = np.random.default_rng(m * k)
    big = 1e308 if dtype == np.float64 else 2e38
    signs = np.outer(rng.choice([-1.0, 1.0], m), rng.choice([-1.0, 1.0], k))  # rank one, s = sqrt(m k)
    unit = rng.uniform(-1, 1, (m, k))
    unit /= np.abs(unit).max()
    z = np.stack([signs.ravel() * big, unit.ravel() * big, unit.ravel(), unit.ravel()]).astype(dtype)
    z[2, 1], z[3, 0] = np.nan, -np.inf
    x = R.Nuclear(1.0, shape=shape).prox(z, 0.5 * big, backend=backend)
    assert x.dtype == dtype and np.isnan(x[2:]).all()
    expected = [signs * big * (1 - 0.5 / np.sqrt(m * k)), svt(unit, 0.5)[0] * big]
    assert np.isfinite(np.array(expected, dtype=dtype)).all()
    tol = 1e-10 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(x[:2].reshape(2, m, k), expected, rtol=tol, atol=tol * big)


def test_nuclear_value_of_non_finite_entries_is_nan_or_inf_like_the_other_norms():
    """A matrix with NaN has the value NaN and one with inf (and no NaN) inf, as l1 gives, and the
    other rows of the batch their norm; the SVD raised LinAlgError for the whole batch."""
    z = np.array([[1.0, np.nan, 0.0, 2.0], [1.0, 0.0, -np.inf, 2.0], [3.0, 0.0, 0.0, -4.0]])  # the last diagonal
    nuclear = R.Nuclear(0.5, shape=(2, 2))
    np.testing.assert_allclose(nuclear.value(z), R.L1(0.5).value(z), rtol=1e-14)  # [nan, inf, 3.5]
    assert np.isnan(nuclear.value(z[0])) and nuclear.value(z[1]) == np.inf and nuclear.value(z[2]) == pytest.approx(3.5)


def test_mcp_and_scad_values_of_nan_are_nan_like_the_other_penalties():
    """A NaN coordinate has the value NaN, as l1 gives, and the other rows of the batch their penalty;
    an infinite one sits on the plateau. NaN fails every comparison and fell onto the plateau."""
    z = np.array([[np.nan, 0.0, 0.0], [np.inf, 0.0, 0.0], [0.5, -0.5, 0.0]])
    for reg, plateau in ((R.MCP(1.0, 3.0), 1.5), (R.SCAD(1.0, 3.7), 2.35)):
        values = reg.value(z)
        assert np.isnan(values[0]) and np.isnan(reg.value(z[0]))
        assert values[1] == pytest.approx(plateau) and np.isfinite(values[2])


@EXTREME_BACKENDS
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
def test_nuclear_prox_of_an_empty_batch_is_empty(backend, dtype):
    """A batch of no rows comes back empty, as for every other regularizer (its matrices' column count
    could not be inferred from 0 entries)."""
    z = np.zeros((0, 6), dtype=dtype)
    x = R.Nuclear(0.3, shape=(2, 3)).prox(z, 0.5, backend=backend)
    assert x.shape == (0, 6) and x.dtype == dtype
    assert R.Nuclear(0.3, shape=(2, 3)).value(z).shape == (0,)


@EXTREME_BACKENDS
def test_l2_ball_value_of_huge_and_tiny_points(backend):
    """The value measures the distance to the center without overflow or underflow, like the prox: the
    projection on a ball of radius 1e200 is inside it (its squared norm overflowed: phi = inf), a
    point 1.4e-200 from the center is outside a ball of radius 1e-201 (its squared norm underflowed:
    phi = 0), and a ball centered at 1e200 grants a few eps * 1e200, not an overflowed inf."""
    ball = R.L2Ball(1e200)
    x = ball.prox(np.array([3e200, 4e200, 1e200]), 1.0, backend=backend)
    assert ball.value(x) == 0
    assert ball.value(1.01 * x) == np.inf
    assert R.L2Ball(1e-201).value(np.array([1e-200, 1e-200])) == np.inf
    assert R.L2Ball(1e-201).value(np.array([5e-202, 5e-202])) == 0
    center = np.full(3, 1e200)
    far = R.L2Ball(1.0, center=center)
    assert far.value(center + np.array([1e190, 0.0, 0.0])) == np.inf
    assert far.value(far.prox(center + np.array([1e190, 0.0, 0.0]), 1.0, backend=backend)) == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("radius", [1e-3, 1e-9])
def test_simplex_slack_is_relative_to_a_small_radius(dtype, radius):
    """Points off a small simplex by a share of its radius are outside: zero (sum 0), a sum of three
    radii, an entry of -0.3 radius. The slack of sqrt(eps) was absolute below a unit radius, so a
    float32 simplex of radius 1e-3 took all three in, like L1Ball's relative slack does not."""
    simplex = R.Simplex(radius)
    for point in (np.zeros(10), np.full(10, 0.3 * radius), np.array([-0.3 * radius, 1.3 * radius])):
        assert simplex.value(point.astype(dtype)) == np.inf
    assert simplex.value(np.array([0.3 * radius, 0.7 * radius], dtype=dtype)) == 0


@EXTREME_BACKENDS
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("radius", [1e-3, 1.0, 1e4])
def test_simplex_projection_is_in_the_simplex_for_any_radius(backend, dtype, radius):
    """The projection of random rows, also far from 0 (up to 1e6 radii, below and above SHIFT_RATIO),
    is inside the simplex by value() in both precisions, with the slack relative to the radius."""
    rng = np.random.default_rng(int(np.log10(radius)) + 3)
    simplex = R.Simplex(radius)
    for p in (1, 3, 10, ROW_CHUNK + 3):
        for shift in (0.0, 1e3, 6e4, 1e6, -1e6):
            for spread in (1e-3, 1.0, 100.0):
                z = (radius * (shift + spread * rng.standard_normal((3, p)))).astype(dtype)
                assert np.all(simplex.value(simplex.prox(z, 1.0, backend=backend)) == 0), (p, shift, spread)
