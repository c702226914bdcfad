"""LIPPAX and SLIPPAX (Wang and Kale, "Faster Rates for Federated Variational Inequalities", Algorithms 1 and 2)."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from fedopt.algorithms.vi.base import LocalVIMethod


@dataclass(frozen=True)
class LIPPAX(LocalVIMethod):
    """LIPPAX, Local Inexact Proximal Point Algorithm with Extra step (Algorithm 1).

    Hyperparameters and the paper's symbols: ``local_steps`` = K, ``lr_local`` = eta (the step of
    the proximal point and of the extra step), ``inner_steps`` = H (SGD steps on each proximal
    subproblem), ``lr_inner`` = gamma (default ``eta / (1 + eta L)^2 = 1/(eta (L + 1/eta)^2)``,
    the theorems' choice, with L the problem's Lipschitz constant). Local step t of client m:

    * from ``x_{t,0} = z_{t-1}^m``, H steps ``x_{t,l} = x_{t,l-1} - gamma (Vt_m(x_{t,l-1}) +
      (x_{t,l-1} - z_{t-1}^m) / eta)``: SGD on the ``(1/eta)``-strongly monotone operator whose
      zero is the proximal point ``(I + eta V)^{-1} z_{t-1}^m``; ``x_t^m = x_{t,H}``;
    * ``zhat = z_{t-1}^m - eta Vt_m(x_t^m)``; ``z_t^m = zhat``, or ``avg_m' zhat`` at ``t = K, 2K, ...``.

    Output: the average of ``x_t^m`` over all steps and clients. Costs per round and client:
    ``K (H + 1)`` oracle calls, one vector up and one down (the inner iterates never travel).

    H: the inner SGD contracts by ``rho = 1 - 1/(1 + eta L)^2 <= 3/4`` per step (the paper's
    ``1/4`` is an erratum, specs/lippax.md Sec. 2.2), so H of order ``2 ln(K R) / ln(1/rho)``
    suffices. Any ``H >= 1`` runs as the paper states it, but a small H can make the step
    ``z_{t-1} -> z_t`` expansive (with H = 1 it is extragradient with extrapolation step
    ``eta / (1 + eta L)^2`` and update step eta): :meth:`check` warns with the largest stable
    ``lr_local`` when :meth:`growth` exceeds 1 (on a bilinear game with L = 1: H = 1 is stable up
    to about eta = 0.4, H = 2 up to 0.8, H = 3 up to 1.1).
    """

    name = "lippax"

    inner_steps: int = 8
    lr_inner: float | None = None

    def __post_init__(self):
        super().__post_init__()
        H = self.inner_steps
        if isinstance(H, bool) or int(H) != H or H < 1:
            raise ValueError(f"inner_steps (H) must be an integer >= 1, got {H!r}")
        object.__setattr__(self, "inner_steps", int(H))
        if self.lr_inner is not None:
            value = float(self.lr_inner)
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"lr_inner must be a finite number > 0 or None (eta / (1 + eta L)^2), got {value!r}")
            object.__setattr__(self, "lr_inner", value)

    def inner_step(self, problem, eta=None) -> float:
        """gamma: ``lr_inner``, or ``eta / (1 + eta L)^2`` (eta: ``lr_local`` unless given; each run's in a batch)."""
        if self.lr_inner is not None:
            return self.lr_inner
        L = problem.lipschitz
        return problem.per_run(lambda e: e / (1 + e * L) ** 2, self.lr_local if eta is None else eta)

    def check(self, problem, regularizer):
        super().check(problem, regularizer)
        growth = self.growth(problem, self.lr_local)
        if growth > 1 + 1e-9:
            warnings.warn(f"{self.name} with inner_steps={self.inner_steps}, lr_local={self.lr_local:g}: the step "
                          f"z_(t-1) -> z_t expands (spectral radius {growth:.6g} > 1) and the iterates may diverge; "
                          f"the largest stable lr_local is {self.stable_step(problem):.6g}", stacklevel=3)

    def growth(self, problem, eta) -> float:
        """The spectral radius of the noise-free local step ``z_{t-1} -> z_t`` (linearised) with ``lr_local = eta``.

        For ``V(z) = M z + h`` the H inner steps (a geometric series in ``b = 1 - gamma (lam + 1/eta)``)
        and the extra step give ``z_t = p(M) z_{t-1} + const`` with ``p(lam) = (1 - (eta lam)^2 b^H) /
        (1 + eta lam)``; ``H -> inf`` leaves the proximal point's ``1 / (1 + eta lam)``. The radius is
        ``max |p|`` over the eigenvalues of M, or for a non-affine V over the boundary of the half disc
        ``Re lam >= 0, |lam| <= L`` that holds every Jacobian's eigenvalues (maximum modulus principle).
        """
        L, gamma = problem.lipschitz, self.inner_step(problem, eta)
        if problem.is_affine:
            cache = problem.__dict__.setdefault("_spectra", {})
            if "operator" not in cache:
                cache["operator"] = np.linalg.eigvals(problem.affine_parts()[0])
            lam = cache["operator"]
        else:
            lam = np.concatenate([1j * np.linspace(0, L, 2001), L * np.exp(1j * np.linspace(0, np.pi / 2, 1001))])
        b = 1 - gamma * (lam + 1 / eta)
        return float(np.abs((1 - (eta * lam) ** 2 * b ** self.inner_steps) / (1 + eta * lam)).max())

    def stable_step(self, problem) -> float:
        """The largest ``lr_local`` below the current one whose :meth:`growth` is at most 1 (0 if none is)."""
        stable = lambda eta: self.growth(problem, eta) <= 1 + 1e-9  # noqa: E731
        high = self.lr_local
        low = next((high * 0.9 ** k for k in range(1, 200) if stable(high * 0.9 ** k)), 0.0)
        high = low / 0.9
        for _ in range(60 if low else 0):
            low, high = ((low + high) / 2, high) if stable((low + high) / 2) else (low, (low + high) / 2)
        return low

    def smoothing(self, problem) -> float | None:
        """delta of the Gaussian smoothing (None: plain LIPPAX)."""
        return None

    def round_draws(self, problem):
        """The noise of ``K (H + 1)`` oracle calls, and SLIPPAX's ``K H`` perturbations."""
        K, H = self.local_steps, self.inner_steps
        return (K * (H + 1) if problem.sigma else 0) + (0 if self.smoothing(problem) is None else K * H)

    def round(self, state):
        env = state.env
        problem, eta, steps, H = env.problem, self.lr_local, self.local_steps, self.inner_steps
        gamma, delta = self.inner_step(problem), self.smoothing(problem)
        noise = problem.sample_noise(env.rng, steps * (H + 1))
        shape = (steps * H, problem.n_clients, problem.n_params)
        shifts = None if delta is None else problem.standard_normal(env.rng, shape)
        Z = problem.per_client(state.vars["z"])
        points = problem.server_zeros("float64")
        for k in range(steps):
            X = Z.copy()
            for inner in range(H):
                at = X if shifts is None else X + delta * shifts[k * H + inner]
                X = X - gamma * (self.oracle(problem, at, noise, k * (H + 1) + inner) + (X - Z) / eta)
            Z = Z - eta * self.oracle(problem, X, noise, k * (H + 1) + H)
            points += problem.average(X)
        z, drift = self.synchronize(problem, Z)
        costs = self.vi_costs(problem, steps * (H + 1), up=1, down=1)
        return self.advance(state, z, points, steps, drift, costs, 1)


@dataclass(frozen=True)
class SLIPPAX(LIPPAX):
    """SLIPPAX (Algorithm 2, Theorem 5): LIPPAX whose inner steps query the oracle at Gaussian-perturbed points.

    Inner step: ``x_{t,l} = x_{t,l-1} - gamma (Vt_m(x_{t,l-1} + delta s) + (x_{t,l-1} - z_{t-1}^m) / eta)``
    with a fresh ``s ~ N(0, I_p)`` (drawn on the host from the run's generator); the extra step
    is not perturbed. This solves the proximal subproblem of the smoothed operator
    ``E_s V(x + delta s)``, whose Jacobian is Lipschitz whatever V (Lemma 20).

    ``smoothing_radius`` = delta; default ``eta * sigma / p^(1/4)``, the radius of the proof of
    Theorem 5 (before eq. (59)): the statement's ``eta sigma / sqrt(p)`` does not balance the
    two delta terms of (58) (specs/lippax.md Sec. 2.3). With sigma = 0 that is 0 and SLIPPAX is
    LIPPAX. Other hyperparameters and costs as in :class:`LIPPAX` (plus p normal draws per inner
    step and client). The runs of a batch share ``smoothing_radius``.
    """

    name = "slippax"
    shared: ClassVar[tuple[str, ...]] = ("smoothing_radius",)  # whether a run draws the perturbations

    smoothing_radius: float | None = None

    def __post_init__(self):
        super().__post_init__()
        if self.smoothing_radius is not None:
            value = float(self.smoothing_radius)
            if not (value >= 0 and math.isfinite(value)):
                raise ValueError(f"smoothing_radius must be a finite number >= 0 or None (eta sigma / p^(1/4)), "
                                 f"got {value!r}")
            object.__setattr__(self, "smoothing_radius", value)

    def smoothing(self, problem):
        """delta, or None when it is 0 (then SLIPPAX is LIPPAX and draws no perturbations)."""
        if self.smoothing_radius is not None:
            return self.smoothing_radius or None
        return self.lr_local * problem.sigma / problem.n_params ** 0.25 if problem.sigma else None
