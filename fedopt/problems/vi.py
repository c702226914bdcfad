"""Monotone variational inequalities and games: find ``z*`` with ``0 in V(z*) + dphi(z*)``.

These problems have no data set: each one is a synthetic monotone operator ``V : R^p -> R^p``
built from a seed, shared by ``n_clients`` clients that query a stochastic oracle

    ``Vt_m(z; xi) = V(z) + e_m + xi``,  ``xi ~ N(0, (sigma^2 / p) I_p)``  (total variance sigma^2),

where the shifts ``e_m`` (heterogeneity) have norm exactly ``zeta = heterogeneity`` and sum to 0,
so that ``V = avg_m V_m`` and its solution stay the same and ``zeta`` is the bound of the
paper's Assumption 2 (specs/lippax.md, P7). The Gaussian noise is drawn on the host from the
run's generator (:meth:`VIProblem.sample_noise`) so that every backend walks the same trajectory.

For a saddle problem ``min_x max_y f(x, y)`` the point is ``z = (x, y)`` and
``V(z) = (grad_x f, -grad_y f)``. The games (specs/lippax.md, Sec. 4.3):

* :class:`BilinearGame` (P1): ``f = x^T A y + b^T x - c^T y``; skew, monotone, not co-coercive.
* :class:`QuadraticGame` (P2): adds ``(1/2) x^T P x - (1/2) y^T Q y``, with ``P, Q`` PSD of rank
  ``dim / 2`` plus ``mu I``: strongly monotone for ``mu > 0``, merely monotone for ``mu = 0``.
* :class:`SmoothGame` (P3): softplus terms on top of the bilinear game; smooth, not affine.
* :class:`RobustLeastSquares`: ``min_w max_y (1/2N) ||A w - y||^2 - (lam/2N) ||y - y0||^2``
  (``lam > 1``): the targets are perturbed adversarially at a price; convex-concave, affine.
* :class:`L1BilinearGame` (P6): ``<A x - b, y>`` with ``phi = lam ||x||_1 + lam ||y||_1``.

Adversarial logistic regression is left out on purpose: its inner problem is convex in the
perturbation, so it is not a monotone VI (the spec's P5 caution).

Each problem knows its solution: a linear solve for affine operators, Newton's method for the
smooth game, and a long deterministic forward-backward-forward run for a composite ``phi``
(:meth:`VIProblem.solution`).
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from fedopt._backend import Backend, get_backend
from fedopt._checks import count, float_dtype, real
from fedopt.problems._arguments import PointArguments


def _unit_shifts(n_clients: int, p: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` unit vectors that sum to 0: pairs ``+-u``, and three at 120 degrees for an odd ``n`` (zeros for n = 1)."""
    shifts = np.zeros((n_clients, p))
    if n_clients == 1:
        return shifts
    start = 0
    if n_clients % 2:
        if p < 2:
            raise ValueError("heterogeneity with an odd number of clients needs p >= 2")
        basis, _ = np.linalg.qr(rng.standard_normal((p, 2)))
        for i, angle in enumerate((0.0, 2 * math.pi / 3, 4 * math.pi / 3)):
            shifts[i] = math.cos(angle) * basis[:, 0] + math.sin(angle) * basis[:, 1]
        start = 3
    for i in range(start, n_clients, 2):
        u = rng.standard_normal(p)
        shifts[i], shifts[i + 1] = u / np.linalg.norm(u), -u / np.linalg.norm(u)
    return shifts


def _min_singular(value) -> float:
    """``min_singular`` checked: the smallest singular value of the coupling, a fraction of the largest."""
    number = real("min_singular", value, strict=True)
    if number > 1:
        raise ValueError(f"min_singular must be in (0, 1] (a fraction of the largest singular value), got {value!r}")
    return number


def _coupling(dim_x, dim_y, rng, min_singular):
    """``A`` with ``N(0, 1/dim_x)`` entries, singular values clipped to ``[min_singular, 1] * s_max``; ``||A|| = 1``."""
    A = rng.standard_normal((dim_x, dim_y)) / math.sqrt(dim_x)
    U, s, Vt = np.linalg.svd(A, full_matrices=False)
    s = np.clip(s / s[0], min_singular, 1.0)
    return (U * s) @ Vt


class VIProblem(PointArguments):
    """Base class: a monotone operator over ``n_clients`` clients with batched stochastic oracles.

    Parameters shared by every problem
    ----------------------------------
    n_clients : int
        M, the number of clients (all have the same weight 1/M).
    sigma : float
        Standard deviation of the oracle noise, total over the p coordinates.
    heterogeneity : float
        zeta: every client's operator is ``V + e_m`` with ``||e_m|| = zeta`` and ``sum_m e_m = 0``.
    radius : float or None
        D, the radius of the ball of the restricted gap, centred at the run's start point;
        default ``max(1, ||z*||)`` (the distance from the default start 0 to the solution).
    seed : int
        Seeds the problem's data (matrices, vectors, shifts); the oracle noise comes from the run.
    dtype : "float64" or "float32"
    backend : str or Backend

    Oracles take ``W`` of shape ``(n_clients, p)`` (one point per client) or ``(p,)`` (one point
    for all) and return ``(n_clients, p)`` arrays on the problem's backend.
    """

    name: ClassVar[str] = ""
    is_classifier: ClassVar[bool] = False
    #: ``V(z) = M z + h`` (the restricted gap is then exact).
    is_affine: ClassVar[bool] = True

    def __init__(self, n_clients=8, sigma=0.0, heterogeneity=0.0, radius: float | None = None, seed=0, dtype="float64",
                 backend="auto"):
        self.n_clients = count("n_clients", n_clients)
        self.sigma = real("sigma", sigma)
        self.heterogeneity = real("heterogeneity", heterogeneity)
        self.seed = count("seed", seed, minimum=0)
        self.dtype = float_dtype(dtype)
        self.backend = get_backend(backend)
        self.weights = np.full(self.n_clients, 1.0 / self.n_clients)
        rng = np.random.default_rng(self.seed)
        self.host = self._build(rng)  # float64 NumPy arrays of the operator
        p = self.n_params
        shifts = self.heterogeneity * _unit_shifts(self.n_clients, p, rng) if self.heterogeneity else None
        self._options = {"n_clients": n_clients, "sigma": sigma, "heterogeneity": heterogeneity, "radius": radius,
                         "seed": seed, "dtype": str(self.dtype)}
        self._device = {k: self.backend.asarray(v, dtype=self.dtype) for k, v in self.host.items()}
        self.shifts = shifts
        self._device_shifts = None if shifts is None else self.backend.asarray(shifts, dtype=self.dtype)
        self._solutions: dict = {}
        self._radius = None if radius is None else real("radius", radius, strict=True)

    # ------------------------------------------------------------------ what subclasses define
    @property
    def n_params(self) -> int:
        """p, the dimension of z."""
        raise NotImplementedError

    #: For a saddle problem ``z = (x, y)``: the length of x (None when the VI is not a saddle problem).
    n_x: int | None = None

    def _build(self, rng: np.random.Generator) -> dict:
        """The operator's arrays (float64, host) from the problem's generator."""
        raise NotImplementedError

    def _apply(self, xp, arrays: dict, W):
        """``V`` at every row of ``W`` (no shifts, no noise), with the arrays of one backend. ``W`` may
        have leading axes (``(R, n, p)`` in a batch of runs): its matrix products then stack, one per run."""
        raise NotImplementedError

    def _lipschitz(self) -> float:
        raise NotImplementedError

    @property
    def block_curvature(self) -> float:
        """A Lipschitz constant of ``grad_x f(., y)`` and ``grad_y f(x, .)`` (saddle problems; L by default)."""
        return self.lipschitz

    def saddle_value(self, x, y) -> float:
        """``f(x, y)`` of a saddle problem (host float64 vectors)."""
        raise NotImplementedError(f"{type(self).__name__} is not a saddle problem")

    # ------------------------------------------------------------------ oracles
    def client_operator(self, W, noise=None):
        """``Vt_m(w_m) = V(w_m) + e_m + noise_m`` for every client m; ``noise`` from :meth:`sample_noise` or None."""
        V = self._apply(self.backend.xp, self._device, self._points(W))
        if self._device_shifts is not None:
            V = V + self._device_shifts
        elif V.shape[0] != self.n_clients:
            V = self.backend.xp.broadcast_to(V, (self.n_clients, self.n_params))
        return V + noise if noise is not None else V

    def operator(self, x):
        """The exact averaged operator ``V(x) = avg_m V_m(x)`` at one point, shape ``(p,)``."""
        return self._apply(self.backend.xp, self._device, self._vector(x).reshape(1, -1))[0]

    #: ``grad`` lets the residual of :func:`fedopt.metrics.natural_map` read the operator.
    grad = operator

    def host_operator(self, z) -> np.ndarray:
        """``V(z)`` in float64 on the host (for metrics and solutions); ``z`` is ``(p,)`` or ``(k, p)``."""
        z = np.asarray(z, dtype=np.float64)
        return self._apply(np, self.host, z.reshape(-1, self.n_params)).reshape(z.shape)

    def sample_noise(self, rng: np.random.Generator, calls: int, batch: int = 1):
        """Oracle noise of ``calls`` calls of every client: ``(calls, n_clients, p)`` on the backend; None if sigma = 0.

        Each entry is ``N(0, sigma^2 / (p * batch))``: the mean of ``batch`` independent samples.
        """
        if self.sigma == 0:
            return None
        scale = self.sigma / math.sqrt(self.n_params * batch)
        return self.backend.asarray(scale * rng.standard_normal((calls, self.n_clients, self.n_params)),
                                    dtype=self.dtype)

    def standard_normal(self, rng: np.random.Generator, shape):
        """``N(0, 1)`` draws of the given shape from the run's generator, on the backend."""
        return self.backend.asarray(rng.standard_normal(shape), dtype=self.dtype)

    def average(self, per_client):
        """``avg_m v_m`` over the client axis (uniform weights); a server vector ``(p,)`` is its own average."""
        return per_client if per_client.ndim == 1 else per_client.mean(axis=0)

    def drift(self, per_client, mean) -> float:
        """``avg_m ||v_m - mean||^2``: how far the clients' rows are from their average ``mean``."""
        return float(((per_client - mean) ** 2).sum(axis=1).mean())

    def server_zeros(self, dtype=None):
        """A server vector of zeros, ``(p,)``, in ``dtype`` (default the problem's)."""
        return self.backend.xp.zeros(self.n_params, dtype=self.dtype if dtype is None else dtype)

    def per_run(self, fn, value):
        """``fn(value)``: a function of a hyperparameter, evaluated for each run of a batch
        (:class:`fedopt.batch.BatchVIProblem`), here for the one run."""
        return fn(value)

    # ------------------------------------------------------------------ facts about the problem
    @property
    def lipschitz(self) -> float:
        """L, a Lipschitz constant of V (exact for affine V: ``||M||_2``)."""
        if "_L" not in self.__dict__:
            self._L = float(self._lipschitz())
        return self._L

    @property
    def radius(self) -> float:
        """D of the restricted gap: the ``radius`` option, else ``max(1, ||z*||)``."""
        if self._radius is None:
            self._radius = max(1.0, float(np.linalg.norm(self.solution())))
        return self._radius

    #: phi of the problem as posed: its solution is :meth:`solution` without an argument, and
    #: :func:`fedopt.run` uses it when no regularizer is given.
    regularizer = None

    @classmethod
    def regularizer_table(cls, options: dict) -> dict:
        """The ``[run.regularizer]`` table of :attr:`regularizer` for a problem built from ``options``
        (its sweep table, every option filled in): a sweep's default."""
        return {"name": "zero"}

    def solution(self, regularizer=None) -> np.ndarray:
        """``z*`` with ``0 in V(z*) + dphi(z*)`` for ``phi = regularizer`` (default the problem's own), float64.

        ``phi = 0``: :meth:`_solve` (a linear solve or Newton's method). Otherwise a
        forward-backward-forward run (Tseng) from the ``phi = 0`` solution until the natural
        residual is below ``1e-10 * max(1, ||V(0)||)``. Cached per regularizer.
        """
        from fedopt.regularizers import Zero, as_regularizer

        regularizer = as_regularizer(regularizer, self)
        key = regularizer if not isinstance(regularizer, Zero) else "zero"
        if key not in self._solutions:
            smooth = self._solutions.get("zero")
            if smooth is None:
                smooth = self._solutions["zero"] = self._solve()
            self._solutions[key] = smooth if key == "zero" else self._solve_composite(regularizer, smooth)
        return self._solutions[key]

    def _solve(self) -> np.ndarray:
        M, h = self.affine_parts()
        return np.linalg.solve(M, -h)

    def _solve_composite(self, regularizer, start, max_steps=200_000):
        step = 0.5 / self.lipschitz
        tol = 1e-10 * max(1.0, float(np.linalg.norm(self.host_operator(np.zeros(self.n_params)))))
        prox = lambda w: regularizer.prox(w, step, backend="numpy")  # noqa: E731

        def residual(z):
            return z - prox(z - step * self.host_operator(z))

        z = prox(start)
        for steps in range(max_steps):
            if steps % 1000 == 0:  # the iterates have found the active pieces of phi by now, mostly
                z = self._newton_polish(z, residual, prox, step)
            v = self.host_operator(z)
            p = prox(z - step * v)
            if np.linalg.norm(z - p) / step <= tol:
                return p
            z = p - step * (self.host_operator(p) - v)
        raise RuntimeError(f"{type(self).__name__}: the composite solution did not converge in {max_steps} steps "
                           f"for {regularizer!r}")

    def _newton_polish(self, z, residual, prox, step, tries=20):
        """Semismooth Newton steps on the residual ``z - prox(z - step V(z))`` of an affine V.

        The prox's Jacobian is taken as the diagonal of central differences, exact for the
        piecewise-linear proxes of separable regularizers away from their kinks. A step is kept
        only when it lowers the residual, so for anything else this returns ``z`` unchanged.
        """
        if not self.is_affine:
            return z
        M = self.affine_parts()[0]
        r = residual(z)
        for _ in range(tries):
            w = z - step * self.host_operator(z)
            eps = 1e-7 * (1 + np.abs(w))
            d = (prox(w + eps) - prox(w - eps)) / (2 * eps)
            J = np.eye(self.n_params) - d[:, None] * (np.eye(self.n_params) - step * M)
            try:
                candidate = z - np.linalg.solve(J, r)
            except np.linalg.LinAlgError:
                return z
            r_new = residual(candidate)
            if np.linalg.norm(r_new) >= np.linalg.norm(r):
                return z
            z, r = candidate, r_new
            if np.linalg.norm(r) == 0:
                break
        return z

    def affine_parts(self) -> tuple[np.ndarray, np.ndarray]:
        """``(M, h)`` with ``V(z) = M z + h`` (host float64); only for affine operators."""
        raise NotImplementedError(f"{type(self).__name__} is not affine")

    def init(self, seed=None):
        """The start point ``z_0 = 0`` (the paper's initialisation)."""
        return self.backend.xp.zeros(self.n_params, dtype=self.dtype)

    def on(self, backend: str | Backend):
        """This problem on another backend (itself when it is already there)."""
        backend = get_backend(backend)
        if backend.name == self.backend.name:
            return self
        return type(self)(backend=backend, **self._options)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(p={self.n_params}, n_clients={self.n_clients}, sigma={self.sigma:g}, "
                f"heterogeneity={self.heterogeneity:g}, dtype={self.dtype}, backend={self.backend.name!r})")


class QuadraticSaddle(VIProblem):
    """``f(x, y) = (1/2) x^T P x + x^T A y - (1/2) y^T Q y + b^T x - c^T y`` with ``P, Q`` PSD.

    ``V(x, y) = (P x + A y + b, -A^T x + Q y + c) = M z + h`` with ``M = [[P, A], [-A^T, Q]]``.
    Subclasses build the blocks ``P, A, Q, b, c`` (P or Q may be None for a zero block).
    """

    @property
    def n_params(self) -> int:
        A = self.host["A"]
        return A.shape[0] + A.shape[1]

    @property
    def n_x(self) -> int:
        return self.host["A"].shape[0]

    def _build(self, rng):
        blocks = self._blocks(rng)
        P, A, Q, b, c = (blocks.get(k) for k in ("P", "A", "Q", "b", "c"))
        nx, ny = A.shape
        P = np.zeros((nx, nx)) if P is None else P
        Q = np.zeros((ny, ny)) if Q is None else Q
        M = np.block([[P, A], [-A.T, Q]])
        return {"P": P, "A": A, "Q": Q, "b": b, "c": c, "MT": np.ascontiguousarray(M.T), "h": np.concatenate([b, c])}

    def _blocks(self, rng) -> dict:
        raise NotImplementedError

    def _apply(self, xp, arrays, W):
        return W @ arrays["MT"] + arrays["h"]

    def affine_parts(self):
        return self.host["MT"].T, self.host["h"]

    def _lipschitz(self):
        return np.linalg.norm(self.host["MT"], 2)

    def saddle_value(self, x, y) -> float:
        a = self.host
        return float(0.5 * x @ a["P"] @ x + x @ a["A"] @ y - 0.5 * y @ a["Q"] @ y + a["b"] @ x - a["c"] @ y)


class BilinearGame(QuadraticSaddle):
    """P1: ``f(x, y) = x^T A y + b^T x - c^T y`` with ``x, y in R^dim``.

    ``A`` has ``N(0, 1/dim)`` entries with its singular values clipped to ``[min_singular, 1]``
    times the largest (so ``L = ||A|| = 1`` and z* is well conditioned); ``b, c ~ N(0, I/dim)``.
    The solution solves ``A y = -b``, ``A^T x = c``.
    """

    name = "bilinear_game"

    def __init__(self, dim=50, min_singular=0.1, **options):
        self.dim = count("dim", dim)
        self.min_singular = _min_singular(min_singular)
        super().__init__(**options)
        self._options.update(dim=dim, min_singular=min_singular)

    def _blocks(self, rng):
        A = _coupling(self.dim, self.dim, rng, self.min_singular)
        return {"A": A, "b": rng.standard_normal(self.dim) / math.sqrt(self.dim),
                "c": rng.standard_normal(self.dim) / math.sqrt(self.dim)}


class QuadraticGame(QuadraticSaddle):
    """P2: the bilinear game plus ``(1/2) x^T P x - (1/2) y^T Q y`` (``x, y in R^dim``).

    ``P = U diag(u) U^T + mu I`` with U orthonormal of rank ``dim // 2`` and ``u ~ U[0, 1]``
    (Q likewise), the coupling ``A`` scaled by ``coupling``: ``mu``-strongly monotone for
    ``mu > 0``; merely monotone (singular symmetric part) for ``mu = 0``. With ``coupling = 0``
    the operator is the gradient of a convex function, hence co-coercive (Theorem 6's setting).
    """

    name = "quadratic_game"

    def __init__(self, dim=50, mu=0.1, coupling=1.0, min_singular=0.1, **options):
        self.dim = count("dim", dim)
        self.mu = real("mu", mu)
        self.coupling = real("coupling", coupling)
        self.min_singular = _min_singular(min_singular)
        if self.mu == 0 and self.coupling == 0:
            raise ValueError("mu = 0 with coupling = 0 has no unique solution; make one of them > 0")
        super().__init__(**options)
        self._options.update(dim=dim, mu=mu, coupling=coupling, min_singular=min_singular)

    def _psd(self, rng):
        basis, _ = np.linalg.qr(rng.standard_normal((self.dim, max(1, self.dim // 2))))
        return (basis * rng.uniform(0, 1, basis.shape[1])) @ basis.T + self.mu * np.eye(self.dim)

    def _blocks(self, rng):
        A = self.coupling * _coupling(self.dim, self.dim, rng, self.min_singular)
        return {"A": A, "P": self._psd(rng), "Q": self._psd(rng),
                "b": rng.standard_normal(self.dim) / math.sqrt(self.dim),
                "c": rng.standard_normal(self.dim) / math.sqrt(self.dim)}


class RobustLeastSquares(QuadraticSaddle):
    """Robust least squares: ``min_w max_y (1/2N) ||A w - y||^2 - (lam/2N) ||y - y0||^2``, ``lam > 1``.

    The adversary moves the N targets y away from the observed ``y0`` at the price
    ``lam ||y - y0||^2``; ``lam > 1`` makes f strongly concave in y, so the VI in
    ``z = (w, y)`` (p = n_features + n_samples) is monotone. The solution is the least-squares
    fit ``w*`` of ``A w = y0`` with ``y* = y0 + (y0 - A w*) / (lam - 1)`` (the residuals, amplified). Rows of A are
    ``N(0, I / n_features)``, ``y0 = A w_true + 0.5 N(0, 1)``.
    """

    name = "robust_least_squares"

    def __init__(self, n_samples=40, n_features=10, lam=3.0, **options):
        self.n_samples = count("n_samples", n_samples)
        self.n_features = count("n_features", n_features)
        if self.n_samples < self.n_features:
            raise ValueError(f"n_samples must be >= n_features (a unique fit), got {n_samples} < {n_features}")
        self.lam = real("lam", lam, low=1.0, strict=True)
        super().__init__(**options)
        self._options.update(n_samples=n_samples, n_features=n_features, lam=lam)

    def _blocks(self, rng):
        N, d = self.n_samples, self.n_features
        A = rng.standard_normal((N, d)) / math.sqrt(d)
        y0 = A @ rng.standard_normal(d) + 0.5 * rng.standard_normal(N)
        return {"P": A.T @ A / N, "A": -A.T / N, "Q": (self.lam - 1) / N * np.eye(N), "b": np.zeros(d),
                "c": -self.lam * y0 / N}


class L1BilinearGame(QuadraticSaddle):
    """P6 (Bai & Bullins' recipe, without the box): ``min_x max_y <A x - b, y> + lam ||x||_1 - lam ||y||_1``.

    ``A in R^{n_y x n_x}`` (``n_y <= n_x``) and b have ``U[-1, 1]`` entries scaled by ``1/sqrt(n_x)``; in VI form
    ``V(x, y) = (A^T y, b - A x)`` and ``phi(z) = lam ||z||_1``, which is the problem's own
    :attr:`regularizer` (``L1(lam)``): its :meth:`solution` is the composite one, and runs and
    sweeps that name no regularizer use it. Without phi the game has many solutions (A is wide);
    the composite one is unique in general.
    """

    name = "l1_bilinear_game"

    def __init__(self, n_x=40, n_y=20, lam=0.1, **options):
        from fedopt.regularizers import L1

        self._shape = (count("n_y", n_y), count("n_x", n_x))
        if self._shape[0] > self._shape[1]:
            raise ValueError(f"n_y must be <= n_x (A is n_y x n_x and wide, so that A x = c has solutions), got "
                             f"n_x={n_x}, n_y={n_y}; swap them or lower n_y")
        self.lam = real("lam", lam, strict=True)
        self.regularizer = L1(self.lam)
        super().__init__(**options)
        self._options.update(n_x=n_x, n_y=n_y, lam=lam)

    @classmethod
    def regularizer_table(cls, options):
        return {"name": "l1", "lam": options["lam"]}

    def _blocks(self, rng):
        n_y, n_x = self._shape
        A = rng.uniform(-1, 1, (n_y, n_x)) / math.sqrt(n_x)
        return {"A": A.T, "b": np.zeros(n_x), "c": rng.uniform(-1, 1, n_y) / math.sqrt(n_x)}

    def _solve(self):
        M, h = self.affine_parts()
        z = np.linalg.lstsq(M, -h, rcond=None)[0]  # the minimum-norm solution of the smooth game
        residual = np.linalg.norm(M @ z + h)
        if residual > 1e-8 * (np.linalg.norm(M) * np.linalg.norm(z) + np.linalg.norm(h)):
            raise ValueError(f"{type(self).__name__}: A x = c has no solution (||V(z)|| = {residual:.3g} at the "
                             "least-squares point), so the game has none: A needs independent rows; use another seed")
        return z


class SmoothGame(BilinearGame):
    """P3: the bilinear game plus ``(1/N) sum_i [softplus(a_i^T x) - softplus(e_i^T y)] + (mu/2)(||x||^2 - ||y||^2)``.

    Convex-concave and smooth but not affine: ``V`` has a bounded Hessian (the paper's
    Assumption 1) with ``Lambda <= max_i ||a_i||^3 / (6 sqrt(3))``, scaled by ``scale``
    (``a_i, e_i ~ N(0, scale^2 I / dim)``). The solution comes from Newton's method.
    """

    name = "smooth_game"
    is_affine = False

    def __init__(self, dim=20, n_samples=200, scale=1.0, mu=0.0, min_singular=0.1, **options):
        self.n_samples = count("n_samples", n_samples)
        self.scale = real("scale", scale)
        self.mu = real("mu", mu)
        super().__init__(dim=dim, min_singular=min_singular, **options)
        self._options.update(n_samples=n_samples, scale=scale, mu=mu)

    def _blocks(self, rng):
        blocks = super()._blocks(rng)
        blocks["P"] = blocks["Q"] = self.mu * np.eye(self.dim)
        return blocks

    def _build(self, rng):
        arrays = super()._build(rng)
        shape = (self.n_samples, self.dim)
        arrays["ax"] = self.scale * rng.standard_normal(shape) / math.sqrt(self.dim)
        arrays["ay"] = self.scale * rng.standard_normal(shape) / math.sqrt(self.dim)
        return arrays

    def _apply(self, xp, arrays, W):
        n, N = self.dim, self.n_samples
        V = W @ arrays["MT"] + arrays["h"]
        for block, data in ((slice(0, n), arrays["ax"]), (slice(n, 2 * n), arrays["ay"])):
            margins = W[..., block] @ data.T
            V[..., block] += (1 / (1 + xp.exp(-margins))) @ data / N
        return V

    def _jacobian(self, z):
        n, a = self.dim, self.host
        J = a["MT"].T.copy()
        for block, data in ((slice(0, n), a["ax"]), (slice(n, 2 * n), a["ay"])):
            s = 1 / (1 + np.exp(-(data @ z[block])))
            J[block, block] += (data * (s * (1 - s))[:, None]).T @ data / self.n_samples
        return J

    def _solve(self, steps=100):
        z = np.zeros(self.n_params)
        for _ in range(steps):
            v = self.host_operator(z)
            if np.linalg.norm(v) <= 1e-14 * max(1.0, np.linalg.norm(z)):
                return z
            direction = np.linalg.solve(self._jacobian(z), -v)
            t, norm = 1.0, np.linalg.norm(v)  # backtracking on ||V||
            while np.linalg.norm(self.host_operator(z + t * direction)) > (1 - 1e-4 * t) * norm and t > 1e-8:
                t /= 2
            z = z + t * direction
        if np.linalg.norm(self.host_operator(z)) > 1e-10:
            raise RuntimeError("SmoothGame: Newton's method did not find the solution")
        return z

    def _curvature(self):
        """A bound on the Hessians of the softplus terms: ``||a||^2 / (4 N)`` (``sigmoid' <= 1/4``)."""
        return max(np.linalg.norm(self.host[k], 2) ** 2 for k in ("ax", "ay")) / (4 * self.n_samples)

    def _lipschitz(self):
        return np.linalg.norm(self.host["MT"], 2) + self._curvature()

    @property
    def block_curvature(self) -> float:
        return self._curvature() + self.mu

    def affine_parts(self):
        raise NotImplementedError("SmoothGame is not affine")

    def saddle_value(self, x, y) -> float:
        a = self.host
        soft = np.logaddexp(0, a["ax"] @ x).mean() - np.logaddexp(0, a["ay"] @ y).mean()
        return float(soft + super().saddle_value(x, y))


VI_PROBLEMS = {cls.name: cls for cls in (BilinearGame, QuadraticGame, SmoothGame, RobustLeastSquares,
                                         L1BilinearGame)}

__all__ = ["VI_PROBLEMS", "BilinearGame", "L1BilinearGame", "QuadraticGame", "QuadraticSaddle", "RobustLeastSquares",
           "SmoothGame", "VIProblem"]
