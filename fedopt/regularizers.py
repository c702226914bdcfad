"""Regularizers ``phi`` of the composite problem ``min_x sum_i w_i f_i(x) + phi(x)``.

Each regularizer is a frozen dataclass with

* ``value(x)``: ``phi(x)`` of a vector, or of every row of an ``(n_clients, p)`` batch;
* ``prox(z, step, out=None)``: ``prox_{step * phi}(z) = argmin_x phi(x) + ||x - z||^2 / (2 step)``,
  of a vector or row by row of a batch;
* ``normal_map_step(...)``: the fused FedNMap local step (see :meth:`Regularizer.normal_map_step`);
* ``weak_convexity``: ``rho >= 0`` such that ``phi + (rho / 2) ||x||^2`` is convex (0 when convex).
  The prox of a weakly convex ``phi`` is single-valued only for ``step * rho < 1``, that is for
  ``step < step_limit = 1 / rho``, and :meth:`Regularizer.check_step` refuses larger steps.

``prox`` runs on the backend that holds the array (NumPy arrays on ``"numba"``, CuPy arrays on
``"gpu"``) unless ``backend=`` names another (``"numpy"`` runs the reference). Inputs are
converted once to C-contiguous float32 or float64 (other dtypes become float64).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar

import numpy as np

from fedopt import kernels as K
from fedopt._backend import Backend, backend_for
from fedopt._checks import count, real
from fedopt.kernels.reference import row_norms, row_scales

_NO_ROWS = {}  # (backend name, dtype) -> an empty (0, 0) array, the "absent" marker of the kernels


def _empty(backend: Backend, dtype) -> Any:
    key = (backend.name, np.dtype(dtype))
    if key not in _NO_ROWS:
        _NO_ROWS[key] = backend.xp.empty((0, 0), dtype=dtype)
    return _NO_ROWS[key]


def _group_labels(groups) -> np.ndarray:
    """Each coordinate's group label, from labels or from a list of index lists (see :class:`GroupLasso`)."""
    index_lists = not isinstance(groups, np.ndarray) and len(groups) > 0 and all(np.ndim(g) == 1 for g in groups)
    members = [np.asarray(g) for g in groups] if index_lists else [np.asarray(groups)]
    if any(m.ndim != 1 or m.size == 0 or not np.issubdtype(m.dtype, np.integer) for m in members):
        raise ValueError("groups must be an int block size, a non-empty 1-D array of integer group labels, or a "
                         "list of non-empty index lists")
    if not index_lists:
        return members[0].astype(np.int64)
    coordinates = np.concatenate(members)
    if coordinates.min() < 0:
        raise ValueError(f"groups lists the coordinate {int(coordinates.min())}; coordinates are 0 .. p-1")
    counts = np.bincount(coordinates)
    for stray, problem in ((counts == 0, "in no group"), (counts > 1, "in more than one group")):
        if stray.any():
            raise ValueError(f"coordinate {int(np.argmax(stray))} is {problem}: the index lists of groups must cover "
                             f"0 .. {len(counts) - 1} once each (the group lasso's groups are disjoint)")
    labels = np.empty(len(counts), np.int64)
    labels[coordinates] = np.repeat(np.arange(len(members)), [len(m) for m in members])
    return labels


def _vector_or_scalar(name: str, value) -> float | np.ndarray:
    """A float, or a read-only 1-D float64 array; NaN is refused."""
    array = np.array(value, dtype=np.float64)
    if array.ndim > 1:
        raise ValueError(f"{name} must be a scalar or a 1-D array, got shape {array.shape}")
    if np.isnan(array).any():
        raise ValueError(f"{name} contains NaN")
    if array.ndim == 0:
        return float(array)
    array.setflags(write=False)
    return array


def _rows(x) -> tuple[Any, bool]:
    """``x`` as a 2-D ``(n, p)`` array and whether it was a single vector."""
    if x.ndim == 1:
        return x.reshape(1, -1), True
    if x.ndim == 2:
        return x, False
    raise ValueError(f"expected a vector (p,) or a batch (n_clients, p), got an array of shape {x.shape}")


@dataclass(frozen=True, eq=False)
class Regularizer:
    """Base class: validation, backend dispatch and the row-wise plumbing shared by every ``phi``."""

    name: ClassVar[str] = ""
    #: Whether it reads the vector as a matrix of its field ``shape`` (:class:`Nuclear`; :func:`on_block` sets it).
    on_matrix: ClassVar[bool] = False

    # ---- what subclasses provide -------------------------------------------------------------
    @property
    def weak_convexity(self) -> float:
        """``rho``: ``phi + (rho / 2) ||x||^2`` is convex. 0 for convex regularizers."""
        return 0.0

    @property
    def step_limit(self) -> float:
        """``1 / rho``: the prox needs ``step < step_limit`` (inf for convex regularizers). MCP and SCAD give
        it from their parameters: ``gamma * (1 / gamma)`` rounds below 1 for some ``gamma`` (49), so a test
        of ``step * rho < 1`` would let ``step = gamma`` through to a division by zero."""
        rho = self.weak_convexity
        return 1.0 / rho if rho > 0 else math.inf

    def _values(self, x: np.ndarray, tol: float) -> np.ndarray:
        """``phi`` of each row of the float64 host array ``x`` of shape ``(n, p)``.

        ``tol`` is the slack an indicator grants to points that a projection put on its border
        (they are feasible only up to rounding in the input's precision): ``sqrt(eps)`` of that
        precision, relative to a radius; ``tol ** 2 = eps`` is the rounding of one operation, which
        the bounds and centers far from 0 add in proportion to their size.
        """
        raise NotImplementedError

    def _elementwise(self, step: float, backend: Backend, dtype) -> tuple[int, np.ndarray, Any] | None:
        """``(kind, theta, w)`` for a separable prox, or None for a row-wise one (see :mod:`fedopt.kernels`)."""
        return None

    def _prox_rows(self, backend: Backend, z, step: float, out) -> None:
        """Row-wise prox of the 2-D array ``z`` into ``out`` (non-separable regularizers)."""
        raise NotImplementedError

    def _check_dimension(self, p: int) -> None:
        """Raise when the regularizer's own arrays do not fit vectors of length ``p``."""

    # ---- public API --------------------------------------------------------------------------
    def value(self, x) -> float | np.ndarray:
        """``phi(x)`` for a vector, or the array of ``phi(x_i)`` for the rows of a batch."""
        host = np.asarray(x.get() if hasattr(x, "get") and not isinstance(x, np.ndarray) else x)
        tol = float(np.sqrt(np.finfo(np.float32 if host.dtype == np.float32 else np.float64).eps))
        rows, single = _rows(host.astype(np.float64, copy=False))
        self._check_dimension(rows.shape[1])
        values = self._values(rows, tol)
        return float(values[0]) if single else values

    def check_problem(self, problem) -> None:
        """Refuse a problem whose parameter vectors (``problem.n_params``) this regularizer's own
        arrays do not fit (weights, group labels, a mask, a matrix shape); for a matrix regularizer
        the error names the problem's matrix blocks, which :func:`on_block` puts it on."""
        try:
            self._check_dimension(problem.n_params)
        except ValueError as err:
            blocks = problem.blocks() if hasattr(problem, "blocks") else {}
            matrices = [f"{name} {shape}" for name, (_, shape) in blocks.items() if len(shape) == 2]
            if not self.on_matrix or not matrices:
                raise
            raise ValueError(f"{err}; put it on a matrix block of {type(problem).__name__} ({', '.join(matrices)}) "
                             f"with fedopt.regularizers.on_block(regularizer, problem, name), or block = name in "
                             "an experiment file") from None

    def check_step(self, step, name: str = "step") -> float:
        """``step`` as a float after checking ``0 < step < step_limit`` (``step * rho < 1``); ``name`` is used in
        errors."""
        step = real(name, step, strict=True, hint=" (one step for every row)" if np.ndim(step) else "")
        limit = self.step_limit
        if step >= limit:
            raise ValueError(
                f"{name}={step:g} is too large for {self!r}: the prox of a {self.weak_convexity:g}-weakly convex "
                f"regularizer needs {name} * rho < 1, so use {name} < {limit:g}"
            )
        return step

    def prox(self, z, step, out=None, backend: str | Backend | None = None):
        """``prox_{step * phi}(z)`` of a vector ``(p,)`` or of every row of a batch ``(n_clients, p)``.

        ``out``, when given, must be a C-contiguous array of the result's shape and dtype (it may
        be ``z`` itself); the result is written there and returned.
        """
        step = self.check_step(step)
        bk = backend_for(z, backend)
        z = bk.asarray(z)
        out = self._output(bk, z, out, "out")
        z2, _ = _rows(z)
        out2 = out.reshape(z2.shape)
        self._check_dimension(z2.shape[1])
        separable = self._elementwise(step, bk, z.dtype)
        if separable is None:
            self._prox_rows(bk, z2, step, out2)
        else:
            kind, theta, w = separable
            bk.kernels.prox_elementwise(z2, kind, theta, w, out2)
        return out

    def separable(self, steps, backend: Backend, dtype) -> tuple[int, np.ndarray, Any] | None:
        """``(kind, thetas, w)``: ``prox_{steps[l] phi}`` for every local step ``l`` in the element-wise
        form of :mod:`fedopt.kernels` (``thetas[l]`` the parameters of step ``l``), or None for a
        row-wise prox (group lasso, simplex, ...). What the fused local loops take."""
        forms = {step: self._elementwise(float(step), backend, dtype) for step in set(steps)}
        if any(form is None for form in forms.values()):
            return None
        kind, theta, w = next(iter(forms.values()))
        thetas = np.empty((len(steps), len(theta)))
        if len(forms) == 1:  # one step size for all local steps, the usual case
            thetas[...] = theta
        else:
            for row, step in zip(thetas, steps, strict=True):
                row[...] = forms[step][1]
        return kind, thetas, w

    def normal_map_step(self, z, grad, z_ref, x_ref, lr, gamma, correction=None, z_out=None, x_out=None, backend=None):
        """One normal-map step for every row, fused into one pass for separable regularizers.

        ``z_new = z - lr * (grad + (z_ref - x_ref) / gamma + correction)`` and
        ``x_new = prox_{gamma * phi}(z_new)``: the local step (5a)-(5b) of FedNMap, with ``z`` the
        clients' pre-prox iterates ``z_i^l`` (rows), ``grad`` their stochastic gradients ``g_i^l``,
        ``(z_ref, x_ref)`` the round-start pair ``(z_t, x_t = prox(z_t))`` shared by all clients,
        ``correction`` the rows ``c_i`` (or None), ``lr = eta_a`` and ``gamma`` the prox
        parameter. Returns ``(z_new, x_new)``.
        """
        gamma = self.check_step(gamma, "gamma")
        lr = real("lr", lr, strict=True)
        bk = backend_for(z, backend)
        z = bk.asarray(z)
        dtype = z.dtype
        z2, _ = _rows(z)
        n, p = z2.shape
        self._check_dimension(p)
        grad2 = self._operand(bk, grad, dtype, z2.shape, "grad")
        c2 = _empty(bk, dtype) if correction is None else self._operand(bk, correction, dtype, z2.shape, "correction")
        z_ref = self._operand(bk, z_ref, dtype, (p,), "z_ref")
        x_ref = self._operand(bk, x_ref, dtype, (p,), "x_ref")
        z_out = self._output(bk, z, z_out, "z_out")
        x_out = self._output(bk, z, x_out, "x_out")
        z_out2, x_out2 = z_out.reshape(n, p), x_out.reshape(n, p)
        separable = self._elementwise(gamma, bk, dtype)
        kind, theta, w = separable if separable is not None else (K.IDENTITY, np.zeros(0), _empty(bk, dtype))
        bk.kernels.normal_map_step(z2, grad2, c2, z_ref, x_ref, lr, 1.0 / gamma, kind, theta, w, z_out2, x_out2)
        if separable is None:
            self._prox_rows(bk, z_out2, gamma, x_out2)
        return z_out, x_out

    # ---- helpers -----------------------------------------------------------------------------
    @staticmethod
    def _output(bk: Backend, z, out, name: str):
        if out is None:
            return bk.xp.empty_like(z)
        if type(out) is not type(z) or out.shape != z.shape or out.dtype != z.dtype:
            raise ValueError(
                f"{name} must be a {type(z).__name__} of shape {z.shape} and dtype {z.dtype} like the input, "
                f"got {type(out).__name__} of shape {getattr(out, 'shape', None)} "
                f"and dtype {getattr(out, 'dtype', None)}"
            )
        if not out.flags.c_contiguous:
            raise ValueError(f"{name} must be C-contiguous; pass a fresh array or None")
        return out

    @staticmethod
    def _operand(bk: Backend, a, dtype, shape, name: str):
        a = bk.asarray(a, dtype=dtype)
        if a.shape != shape and not (len(shape) == 2 and shape[0] == 1 and a.shape == shape[1:]):
            raise ValueError(f"{name} must have shape {shape}, got {a.shape}")
        return a.reshape(shape)

    def _on_backend(self, backend: Backend, dtype, key: str, make) -> Any:
        """``make()`` converted to ``backend`` and ``dtype``, computed once per regularizer and key.

        Always a writeable copy, like every other array the kernels get: Numba compiles a kernel
        once per read-only flag of its arguments, and the regularizer's own arrays are read-only
        (a weighted l1 prox in float64 compiled a second 11 s variant of the prox kernel)."""
        cache = self.__dict__.setdefault("_device_cache", {})
        full_key = (key, backend.name, np.dtype(dtype))
        if full_key not in cache:
            cache[full_key] = backend.xp.array(make(), dtype=dtype)
        return cache[full_key]

    def _params(self) -> tuple:
        return tuple(getattr(self, f.name) for f in fields(self))

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return all(np.array_equal(a, b) for a, b in zip(self._params(), other._params(), strict=True))

    def __hash__(self):
        return hash((type(self), *tuple(p for p in self._params() if not isinstance(p, np.ndarray))))

    def __getstate__(self):
        # Caches (device copies, group layouts) start with "_" and are rebuilt on demand.
        return {key: value for key, value in self.__dict__.items() if not key.startswith("_")}


@dataclass(frozen=True, eq=False)
class Zero(Regularizer):
    """``phi = 0``; the prox is the identity, and FedNMap reduces to SCAFFOLD."""

    name: ClassVar[str] = "zero"

    def _values(self, x, tol):
        return np.zeros(len(x))

    def _elementwise(self, step, backend, dtype):
        return K.IDENTITY, np.zeros(0), _empty(backend, dtype)


@dataclass(frozen=True, eq=False)
class L1(Regularizer):
    """``phi(x) = lam * sum_j w_j |x_j|`` (``w = 1`` unless ``weights`` is given).

    prox: soft-thresholding ``sign(z) * max(|z| - step * lam * w, 0)``. A zero weight leaves a
    coordinate unpenalized (an intercept, say); weights are finite numbers ``>= 0``.
    """

    lam: float = 1.0
    weights: Any = None
    name: ClassVar[str] = "l1"

    def __post_init__(self):
        object.__setattr__(self, "lam", real("lam", self.lam))
        if self.weights is not None:
            w = _vector_or_scalar("weights", self.weights)
            if np.any(np.asarray(w) < 0):
                raise ValueError("weights must be >= 0")
            if np.isinf(w).any():  # inf * 0 would make the prox and the value NaN
                where = f" (coordinate {int(np.argmax(np.isinf(w)))})" if np.ndim(w) else ""
                raise ValueError(f"weights must be finite, got inf{where}; to keep a coordinate at 0 give it a "
                                 "large finite weight (the prox zeroes it while |z_j| <= step * lam * w_j)")
            object.__setattr__(self, "weights", w)

    def _check_dimension(self, p):
        if isinstance(self.weights, np.ndarray) and len(self.weights) != p:
            raise ValueError(f"weights has length {len(self.weights)} but the vectors have p={p} coordinates")

    def _values(self, x, tol):
        w = 1.0 if self.weights is None else self.weights
        return self.lam * (np.abs(x) * w).sum(axis=1)

    def _elementwise(self, step, backend, dtype):
        if isinstance(self.weights, np.ndarray):
            w = self._on_backend(backend, dtype, "weights", lambda: self.weights[None, :])
            return K.SOFT_WEIGHTED, np.array([step * self.lam, 1.0]), w
        scalar_weight = 1.0 if self.weights is None else self.weights
        return K.SOFT, np.array([step * self.lam * scalar_weight, 1.0]), _empty(backend, dtype)


@dataclass(frozen=True, eq=False)
class ElasticNet(Regularizer):
    """``phi(x) = l1 * ||x||_1 + (l2 / 2) * ||x||_2^2``, scikit-learn's scaling of the ridge part.

    prox: ``soft(z, step * l1) / (1 + step * l2)``. The FedNMap paper writes
    ``nu1 ||x||_1 + nu2 ||x||^2``: that is ``ElasticNet(l1=nu1, l2=2 * nu2)``.
    """

    l1: float = 1.0
    l2: float = 1.0
    name: ClassVar[str] = "elasticnet"

    def __post_init__(self):
        object.__setattr__(self, "l1", real("l1", self.l1))
        object.__setattr__(self, "l2", real("l2", self.l2))

    def _values(self, x, tol):
        return self.l1 * np.abs(x).sum(axis=1) + 0.5 * self.l2 * (x * x).sum(axis=1)

    def _elementwise(self, step, backend, dtype):
        return K.SOFT, np.array([step * self.l1, 1.0 / (1.0 + step * self.l2)]), _empty(backend, dtype)


@dataclass(frozen=True, eq=False)
class GroupLasso(Regularizer):
    """``phi(x) = lam * sum_g w_g ||x_g||_2`` over disjoint groups of coordinates.

    ``groups`` is either a 1-D array giving each coordinate's group label (any integers), a list
    of index lists (group ``g`` holds the coordinates ``groups[g]``; together they must cover
    ``0 .. p-1`` once, and are stored as labels ``g``), or an int ``s``: consecutive blocks of
    ``s`` coordinates (p must be a multiple of ``s``).
    ``weights`` gives one ``w_g`` per group in sorted label order; the default
    ``w_g = sqrt(|g|)`` (Yuan and Lin, 2006). prox: block soft-thresholding
    ``x_g = max(0, 1 - step * lam * w_g / ||z_g||) * z_g``.
    """

    lam: float = 1.0
    groups: Any = 1
    weights: Any = None
    name: ClassVar[str] = "group_lasso"

    def __post_init__(self):
        object.__setattr__(self, "lam", real("lam", self.lam))
        if np.isscalar(self.groups) or getattr(self.groups, "ndim", None) == 0:
            object.__setattr__(self, "groups", count("groups as a block size", self.groups))
        else:
            labels = _group_labels(self.groups)
            labels.setflags(write=False)
            object.__setattr__(self, "groups", labels)
        if self.weights is not None:
            w = np.array(self.weights, dtype=np.float64, ndmin=1)
            if w.ndim != 1 or not np.all((w >= 0) & np.isfinite(w)):
                raise ValueError("weights must be a 1-D array of finite numbers >= 0, one per group")
            if isinstance(self.groups, np.ndarray) and len(w) != len(np.unique(self.groups)):
                raise ValueError(f"weights has {len(w)} entries but groups defines "
                                 f"{len(np.unique(self.groups))} groups")
            w.setflags(write=False)
            object.__setattr__(self, "weights", w)

    def _check_dimension(self, p):
        if isinstance(self.groups, np.ndarray):
            if len(self.groups) != p:
                raise ValueError(f"groups puts {len(self.groups)} coordinates in groups but the vectors have p={p}")
        elif p % self.groups:
            raise ValueError(f"groups={self.groups} (block size) does not divide p={p}")
        if self.weights is not None and len(self.weights) != len(self._layout(p)[0]) - 1:
            raise ValueError(f"weights has {len(self.weights)} entries, one per group is needed")

    def _layout(self, p):
        """``(starts, order, group_weights)``: group g is ``order[starts[g]:starts[g+1]]``; empty order = identity."""
        cache = self.__dict__.setdefault("_layouts", {})
        if p not in cache:
            if isinstance(self.groups, np.ndarray):
                order = np.argsort(self.groups, kind="stable")
                _, sizes = np.unique(self.groups, return_counts=True)
                if np.array_equal(order, np.arange(p)):
                    order = order[:0]
            else:
                sizes = np.full(p // self.groups, self.groups)
                order = np.zeros(0, dtype=np.int64)
            starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
            weights = np.sqrt(sizes) if self.weights is None else self.weights
            cache[p] = (starts, order.astype(np.int64), np.asarray(weights, dtype=np.float64))
        return cache[p]

    def _values(self, x, tol):
        starts, order, weights = self._layout(x.shape[1])
        xs = x[:, order] if len(order) else x
        scale = row_scales(xs)  # no overflow or underflow
        norms = scale * np.sqrt(np.add.reduceat((xs / scale) ** 2, starts[:-1], axis=1))
        return self.lam * norms @ weights

    def _prox_rows(self, backend, z, step, out):
        p = z.shape[1]
        starts, order, _weights = self._layout(p)
        starts_d = self._on_backend(backend, np.int64, f"starts{p}", lambda: starts)
        order_d = self._on_backend(backend, np.int64, f"order{p}", lambda: order)
        backend.kernels.prox_group(z, starts_d, order_d, self._thresholds(backend, z.dtype, p, step), 1.0, out)

    def _thresholds(self, backend, dtype, p, step):
        """``step * lam * w_g`` per group, kept for the last step (a step is usually reused for many calls)."""
        cache = self.__dict__.setdefault("_last_thresholds", {})
        key = (p, backend.name, np.dtype(dtype))
        if key not in cache or cache[key][0] != step:
            weights = self._on_backend(backend, dtype, f"weights{p}", lambda: self._layout(p)[2])
            cache[key] = (step, weights * (step * self.lam))
        return cache[key][1]


@dataclass(frozen=True, eq=False)
class Box(Regularizer):
    """Indicator of the box ``{lower <= x <= upper}``; bounds are scalars or per-coordinate arrays.

    prox (for any step): the projection ``clip(z, lower, upper)``. Infinite bounds are allowed.
    """

    lower: Any = -1.0
    upper: Any = 1.0
    name: ClassVar[str] = "box"

    def __post_init__(self):
        lower = _vector_or_scalar("lower", self.lower)
        upper = _vector_or_scalar("upper", self.upper)
        if np.shape(lower) and np.shape(upper) and np.shape(lower) != np.shape(upper):
            raise ValueError(f"lower and upper have different lengths ({len(lower)} and {len(upper)})")
        if np.any(np.asarray(lower) > np.asarray(upper)):
            raise ValueError("the box is empty: lower > upper for some coordinate; need lower <= upper everywhere")
        for name, bound, side in (("lower", lower, math.inf), ("upper", upper, -math.inf)):
            unreachable = np.asarray(bound) == side
            if unreachable.any():
                where = f" (coordinate {int(np.argmax(unreachable))})" if unreachable.ndim else ""
                raise ValueError(f"the box is empty: {name} = {side:+g}{where}, which no real x reaches; leave a side "
                                 "unbounded with lower = -inf or upper = +inf")
        object.__setattr__(self, "lower", lower)
        object.__setattr__(self, "upper", upper)

    def _check_dimension(self, p):
        for name in ("lower", "upper"):
            bound = getattr(self, name)
            if isinstance(bound, np.ndarray) and len(bound) != p:
                raise ValueError(f"{name} has length {len(bound)} but the vectors have p={p} coordinates")

    def _values(self, x, tol):
        # a clip in the input's precision rounds the bound, by half an ulp (eps/2 |bound|) at most
        lower, upper = np.asarray(self.lower), np.asarray(self.upper)
        inside = (x >= lower - tol - tol**2 * np.abs(lower)) & (x <= upper + tol + tol**2 * np.abs(upper))
        return np.where(inside.all(axis=1), 0.0, np.inf)

    def _elementwise(self, step, backend, dtype):
        if np.ndim(self.lower) == 0 and np.ndim(self.upper) == 0:
            return K.CLIP, np.array([self.lower, self.upper]), _empty(backend, dtype)
        return K.CLIP_VECTOR, np.zeros(0), self._on_backend(backend, dtype, "bounds", self._bounds)

    def _bounds(self) -> np.ndarray:
        """``[lower, upper]`` as a ``(2, p)`` array."""
        p = len(self.lower) if np.ndim(self.lower) else len(self.upper)
        return np.stack([np.broadcast_to(self.lower, p), np.broadcast_to(self.upper, p)])


@dataclass(frozen=True, eq=False)
class NonNegative(Box):
    """Indicator of the nonnegative orthant ``{x >= 0}``; prox: ``max(z, 0)``."""

    lower: Any = field(default=0.0, init=False)
    upper: Any = field(default=math.inf, init=False)
    name: ClassVar[str] = "nonnegative"


@dataclass(frozen=True, eq=False)
class L2Ball(Regularizer):
    """Indicator of the Euclidean ball ``{||x - center||_2 <= radius}`` (center 0 by default).

    prox: ``center + (z - center) * min(1, radius / ||z - center||)``.
    """

    radius: float = 1.0
    center: Any = None
    name: ClassVar[str] = "l2_ball"

    def __post_init__(self):
        object.__setattr__(self, "radius", real("radius", self.radius, strict=True))
        if self.center is not None:
            center = np.array(self.center, dtype=np.float64, ndmin=1)
            if center.ndim != 1 or not np.all(np.isfinite(center)):
                raise ValueError("center must be a 1-D array of finite numbers")
            center.setflags(write=False)
            object.__setattr__(self, "center", center)

    def _check_dimension(self, p):
        if self.center is not None and len(self.center) != p:
            raise ValueError(f"center has length {len(self.center)} but the vectors have p={p} coordinates")

    def _values(self, x, tol):
        c = np.zeros(1) if self.center is None else self.center
        norms = row_norms(x - c)[:, 0]  # no overflow or underflow
        # x - c carries the rounding of x and c in the input's precision: a few eps ||c||
        slack = 4 * tol**2 * row_norms(c[None, :])[0, 0]
        return np.where(norms <= self.radius * (1 + tol) + slack, 0.0, np.inf)

    def _prox_rows(self, backend, z, step, out):
        center = (_empty(backend, z.dtype).reshape(0) if self.center is None
                  else self._on_backend(backend, z.dtype, "center", lambda: self.center))
        backend.kernels.project_l2_ball(z, center, self.radius, out)


@dataclass(frozen=True, eq=False)
class L1Ball(Regularizer):
    """Indicator of ``{||x||_1 <= radius}``; prox: ``sign(z) * simplex_projection(|z|, radius)`` outside."""

    radius: float = 1.0
    name: ClassVar[str] = "l1_ball"

    def __post_init__(self):
        object.__setattr__(self, "radius", real("radius", self.radius, strict=True))

    def _values(self, x, tol):
        return np.where(np.abs(x).sum(axis=1) <= self.radius * (1 + tol), 0.0, np.inf)

    def _prox_rows(self, backend, z, step, out):
        backend.kernels.project_l1_ball(z, self.radius, out)


@dataclass(frozen=True, eq=False)
class Simplex(Regularizer):
    """Indicator of the simplex ``{x >= 0, sum(x) = radius}``; prox: ``max(z - tau, 0)`` with the right ``tau``."""

    radius: float = 1.0
    name: ClassVar[str] = "simplex"

    def __post_init__(self):
        object.__setattr__(self, "radius", real("radius", self.radius, strict=True))

    def _values(self, x, tol):
        tol = tol * self.radius
        feasible = (x >= -tol).all(axis=1) & (np.abs(x.sum(axis=1) - self.radius) <= tol * x.shape[1])
        return np.where(feasible, 0.0, np.inf)

    def _prox_rows(self, backend, z, step, out):
        backend.kernels.project_simplex(z, self.radius, out)


@dataclass(frozen=True, eq=False)
class MCP(Regularizer):
    """Minimax concave penalty (Zhang, 2010), ``rho = 1 / gamma``-weakly convex.

    ``phi(x) = sum_j P(x_j)`` with ``P(t) = lam |t| - t^2 / (2 gamma)`` for ``|t| <= gamma lam``
    and ``gamma lam^2 / 2`` beyond. prox (firm thresholding, needs ``step < gamma``):
    ``0`` for ``|z| <= step lam``, ``sign(z) (|z| - step lam) / (1 - step / gamma)`` up to
    ``|z| <= gamma lam``, and ``z`` beyond.
    """

    lam: float = 1.0
    gamma: float = 3.0
    name: ClassVar[str] = "mcp"

    def __post_init__(self):
        object.__setattr__(self, "lam", real("lam", self.lam))
        object.__setattr__(self, "gamma", real("gamma", self.gamma, strict=True))

    @property
    def weak_convexity(self):
        return 1.0 / self.gamma

    @property
    def step_limit(self):
        return self.gamma

    def _values(self, x, tol):
        a = np.abs(x)
        with np.errstate(invalid="ignore"):  # inf - inf where |x| = inf, which takes the plateau below
            inner = self.lam * a - a * a / (2 * self.gamma)
        # NaN fails every comparison, so it must fall through to inner (NaN)
        return np.where(a > self.gamma * self.lam, 0.5 * self.gamma * self.lam**2, inner).sum(axis=1)

    def _elementwise(self, step, backend, dtype):
        theta = np.array([step * self.lam, self.gamma * self.lam, 1.0 / (1.0 - step / self.gamma)])
        return K.MCP, theta, _empty(backend, dtype)


@dataclass(frozen=True, eq=False)
class SCAD(Regularizer):
    """Smoothly clipped absolute deviation (Fan and Li, 2001), ``rho = 1 / (a - 1)``-weakly convex.

    ``P(t) = lam |t|`` for ``|t| <= lam``, ``(2 a lam |t| - t^2 - lam^2) / (2 (a - 1))`` up to
    ``a lam``, and ``(a + 1) lam^2 / 2`` beyond; ``a > 2`` (3.7 by convention). prox (needs
    ``step < a - 1``): ``soft(z, step lam)`` for ``|z| <= (1 + step) lam``,
    ``sign(z) ((a - 1) |z| - a step lam) / (a - 1 - step)`` up to ``|z| <= a lam``, ``z`` beyond.
    """

    lam: float = 1.0
    a: float = 3.7
    name: ClassVar[str] = "scad"

    def __post_init__(self):
        object.__setattr__(self, "lam", real("lam", self.lam))
        object.__setattr__(self, "a", real("a", self.a, low=2, strict=True))

    @property
    def weak_convexity(self):
        return 1.0 / (self.a - 1.0)

    @property
    def step_limit(self):
        return self.a - 1.0

    def _values(self, x, tol):
        a, lam, t = self.a, self.lam, np.abs(x)
        with np.errstate(invalid="ignore"):  # inf - inf where |x| = inf, which takes the plateau below
            middle = (2 * a * lam * t - t * t - lam * lam) / (2 * (a - 1))
        # NaN fails every comparison, so it must fall through to lam * t (NaN)
        return np.where(t > a * lam, 0.5 * (a + 1) * lam * lam, np.where(t > lam, middle, lam * t)).sum(axis=1)

    def _elementwise(self, step, backend, dtype):
        a, lam = self.a, self.lam
        theta = np.array([step * lam, (1 + step) * lam, a * lam, a * step * lam / (a - 1),
                          1.0 / (1.0 - step / (a - 1))])
        return K.SCAD, theta, _empty(backend, dtype)


@dataclass(frozen=True, eq=False)
class Nuclear(Regularizer):
    """``phi(X) = lam * ||X||_*`` (sum of singular values) of the vector read as a matrix.

    ``shape = (m, k)``: a vector of length ``m * k`` is the C-order ``(m, k)`` matrix. prox:
    singular-value thresholding ``U diag(max(s - step lam, 0)) V^T`` by LAPACK (CPU) or
    cuSOLVER (GPU).
    """

    lam: float = 1.0
    shape: tuple = (1, 1)
    name: ClassVar[str] = "nuclear"
    on_matrix: ClassVar[bool] = True

    def __post_init__(self):
        object.__setattr__(self, "lam", real("lam", self.lam))
        shape = tuple(int(s) for s in np.atleast_1d(self.shape))
        if len(shape) != 2 or min(shape) < 1 or shape != tuple(np.atleast_1d(self.shape)):
            raise ValueError(f"shape must be a pair of positive integers (m, k), got {self.shape!r}")
        object.__setattr__(self, "shape", shape)

    def _check_dimension(self, p):
        if self.shape[0] * self.shape[1] != p:
            raise ValueError(f"shape={self.shape} holds {self.shape[0] * self.shape[1]} entries but the vectors "
                             f"have p={p}")

    def _values(self, x, tol):
        # LAPACK refuses a matrix with NaN or inf: such a row's norm is NaN, or inf (at least any |x_ij|)
        values = self.lam * np.abs(x).max(axis=1)
        finite = np.isfinite(x).all(axis=1)
        if finite.any():
            singular = np.linalg.svd(x[finite].reshape(-1, *self.shape), compute_uv=False)
            values[finite] = self.lam * singular.sum(axis=1)
        return values

    def _prox_rows(self, backend, z, step, out):
        backend.kernels.prox_nuclear(z, self.shape[0], step * self.lam, out)


REGULARIZERS: dict[str, type[Regularizer]] = {
    cls.name: cls
    for cls in (Zero, L1, ElasticNet, GroupLasso, Box, NonNegative, L2Ball, L1Ball, Simplex, MCP, SCAD, Nuclear)
}


def as_regularizer(value, problem=None) -> Regularizer:
    """``value`` when it is a regularizer; for None, ``problem``'s own regularizer when it has one
    (:class:`~fedopt.problems.vi.L1BilinearGame`'s l1), else :class:`Zero`; anything else (a name,
    a class) is refused with the call that builds one."""
    if value is None:
        return getattr(problem, "regularizer", None) or Zero()
    if isinstance(value, Regularizer):
        return value
    if isinstance(value, str):
        fix = f"fedopt.regularizers.make({value!r}, ...) builds one from its name"
    elif isinstance(value, type) and issubclass(value, Regularizer):
        fix = f"pass an instance, {value.__name__}(...)"
    else:
        fix = "e.g. fedopt.regularizers.L1(1e-3)"
    raise TypeError(f"regularizer must be a fedopt regularizer object, got {value!r}: {fix}")


def available() -> list[str]:
    """Names accepted by :func:`make`."""
    return sorted(REGULARIZERS)


def canonical(name: str) -> str:
    """The registered spelling of the regularizer ``name``: case, ``_`` and ``-`` do not matter
    (``"elastic_net"``, ``"L1Ball"`` and ``"group-lasso"`` are ``elasticnet``, ``l1_ball`` and ``group_lasso``)."""
    key = str(name).lower().replace("_", "").replace("-", "")
    for registered in REGULARIZERS:
        if registered.replace("_", "") == key:
            return registered
    raise ValueError(f"regularizer {name!r} is unknown; choose one of {', '.join(available())}")


def make(name: str, **params) -> Regularizer:
    """The regularizer called ``name`` (see :func:`available` and :func:`canonical`) built from ``params``."""
    cls = REGULARIZERS[canonical(name)]
    try:
        return cls(**params)
    except TypeError as exc:
        accepted = [f.name for f in fields(cls) if f.init]
        raise ValueError(f"{exc}; {cls.__name__} accepts {accepted or 'no parameters'}") from None


@dataclass(frozen=True, eq=False)
class Masked(Regularizer):
    """``phi(x) = base(x[mask])``: ``base`` on the coordinates where ``mask`` is True, nothing on the others.

    Leaves some coordinates unpenalized, e.g. the intercepts of a linear model
    (``mask = [True] * (n_out * d) + [False] * n_out``) whatever the base regularizer (elastic
    net, MCP, SCAD, ...). ``mask`` is a boolean vector of length ``p``. prox: ``x[mask] =
    prox_{step * base}(z[mask])`` and ``x[~mask] = z[~mask]`` (phi is separable across the two
    blocks). ``weak_convexity`` and ``step_limit``, and so :meth:`check_step`, are those of
    ``base``. A base whose prox is element-wise keeps the fused kernels: a soft-threshold (``L1``,
    weighted or not) with weight 0 off the mask, an ``ElasticNet``'s shrinking factor on the mask
    only (``SOFT_MASKED``), ``MCP`` and ``SCAD`` with ``lam`` weighted by the mask
    (``MCP_WEIGHTED``, ``SCAD_WEIGHTED``), the weights of a ``Masked`` l1, MCP or SCAD put on this
    mask; any other base (a box, a ball, the group lasso) runs its own prox on the masked columns.
    """

    base: Any = None
    mask: Any = None
    name: ClassVar[str] = "masked"

    def __post_init__(self):
        if not isinstance(self.base, Regularizer):
            raise TypeError(f"base must be a fedopt regularizer, got {type(self.base).__name__}: Masked takes a "
                            "regularizer object (Masked(L1(1e-3), mask) in Python), so no name builds it; in an "
                            "experiment file name the base regularizer instead and put it on a parameter block of "
                            "the problem with block = \"W1\" in [run.regularizer] (--set regularizer.block=W1 on "
                            "the command line; fedopt.regularizers.on_block)")
        mask = np.asarray(self.mask)
        if mask.ndim != 1 or mask.dtype != np.bool_:
            raise ValueError("mask must be a 1-D boolean array, True where the base regularizer applies")
        mask = mask.copy()
        mask.setflags(write=False)
        object.__setattr__(self, "mask", mask)

    @property
    def weak_convexity(self):
        return self.base.weak_convexity

    @property
    def step_limit(self):
        return self.base.step_limit

    def __repr__(self):
        return f"Masked({self.base!r}, {int(self.mask.sum())} of {len(self.mask)} coordinates)"

    def _check_dimension(self, p):
        if len(self.mask) != p:
            raise ValueError(f"mask has length {len(self.mask)} but the vectors have p={p} coordinates")
        n = int(self.mask.sum())
        try:
            self.base._check_dimension(n)
        except ValueError as err:
            raise ValueError(f"Masked applies {type(self.base).__name__} to the {n} masked coordinates of p={p} "
                             f"only, so its own arrays must fit those {n} (the block), not the whole vector: "
                             f"{err}") from None

    def _values(self, x, tol):
        return self.base._values(x[:, self.mask], tol)

    def _elementwise(self, step, backend, dtype):
        form = self.base._elementwise(step, backend, dtype)
        if form is None:
            return None
        kind, theta, w = form
        if kind == K.IDENTITY:
            return form
        weighted = kind in _UNWEIGHTED  # a weighted l1 or a Masked base: its weights w[0] go on the mask
        kind = _UNWEIGHTED.get(kind, kind)
        if kind not in (K.SOFT, K.MCP, K.SCAD):  # a clip, or a shrink on part of the base's coordinates:
            return None  # the base prox runs on the masked columns
        # weight 1 on the mask for an unweighted base (SOFT: theta[0] holds the whole threshold)
        rows = self._on_backend(backend, dtype, "weight_rows",
                                lambda: self._weight_rows(backend.to_numpy(w[0]) if weighted else 1.0))
        if kind in (K.MCP, K.SCAD):  # lam weighted by the mask: 0 is the identity
            return (K.MCP_WEIGHTED if kind == K.MCP else K.SCAD_WEIGHTED), theta, rows[:1]
        # whether the base shrinks, read at a unit step: an elastic net's factor is 1 at step 0 too, and the
        # form must not depend on the step (run_batch groups runs by their form at step 0)
        if self.base._elementwise(1.0, backend, dtype)[1][1] == 1.0:
            return K.SOFT_WEIGHTED, theta, rows[:1]  # no shrinking factor (l1, weighted or not)
        return K.SOFT_MASKED, theta, rows

    def _weight_rows(self, values):
        """``(2, p)``: ``values`` on the masked coordinates and 0 elsewhere, then the mask as 0/1."""
        rows = np.zeros((2, len(self.mask)))
        rows[0, self.mask] = values
        rows[1] = self.mask
        return rows

    def _prox_rows(self, backend, z, step, out):
        index = self._on_backend(backend, np.int64, "index", lambda: np.flatnonzero(self.mask))
        penalized = self.base.prox(z[:, index], step, backend=backend)
        out[...] = z
        out[:, index] = penalized


REGULARIZERS[Masked.name] = Masked
#: The weighted element-wise forms and the form each weights by ``w[0]`` (what :class:`Masked` composes).
_UNWEIGHTED = {K.SOFT_WEIGHTED: K.SOFT, K.MCP_WEIGHTED: K.MCP, K.SCAD_WEIGHTED: K.SCAD}


def on_block(regularizer: Regularizer, problem, block: str) -> Masked:
    """``regularizer`` on one named block of ``problem``'s parameters only (:meth:`Problem.blocks`,
    e.g. the MLP's ``"W1"``), as :class:`Masked`. A matrix regularizer (:class:`Nuclear`) reads the
    block as its matrix: a nuclear norm on ``W1`` asks for a low-rank first layer. The regularizer's own
    arrays (weights, group labels) must fit the block."""
    blocks = problem.blocks()
    if block not in blocks:
        names = f"choose one of {', '.join(blocks)}" if blocks else "it names none, so leave block out"
        raise ValueError(f"block={block!r} is not a parameter block of {type(problem).__name__}; {names}")
    start, shape = blocks[block]
    if regularizer.on_matrix:
        if len(shape) != 2:
            matrices = ", ".join(name for name, (_, s) in blocks.items() if len(s) == 2)
            raise ValueError(f"block={block!r} is a vector of shape {shape}, but {regularizer.name} acts on a "
                             f"matrix; choose a matrix block ({matrices})")
        regularizer = replace(regularizer, shape=shape)
    mask = np.zeros(problem.n_params, dtype=bool)
    mask[start : start + math.prod(shape)] = True
    masked = Masked(regularizer, mask)
    masked.check_problem(problem)
    return masked
