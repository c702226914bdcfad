"""Local dual extrapolation for composite VIs (Wang and Kale, eq. (13); FeDualEx of Bai and Bullins 2024)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from fedopt.algorithms.vi.base import LocalVIMethod


@dataclass(frozen=True)
class LocalDualExtrapolation(LocalVIMethod):
    """LDE (eq. (13), Theorem 7): extragradient steps on dual variables, mapped to primal points by
    a prox whose weight grows with the global step counter (dual averaging).

    Hyperparameters and the paper's symbols: ``local_steps`` = K, ``lr_local`` = eta. With the
    Euclidean ``h(u) = (1/2) ||u - w0||^2`` centred at the start point w0, the mirror map of
    ``h_t = h + t eta phi`` is ``grad h_t^*(y) = prox_{t eta phi}(w0 + y)`` (specs/lippax.md
    Sec. 2.5). Duals start at 0; local step t (global, never reset) of client m:

    * ``u = prox_{(t-1) eta phi}(w0 + z_{t-1}^m)`` (the identity at t = 1);
    * ``xhat = z_{t-1}^m - eta Vt_m(u)``; ``x_t^m = xhat``, or ``avg_m' xhat`` at a sync step;
    * ``v_t^m = prox_{t eta phi}(w0 + x_t^m)``;
    * ``zhat = z_{t-1}^m - eta Vt_m(v_t^m)``; ``z_t^m = zhat``, or ``avg_m' zhat`` at a sync step.

    Averaging happens on the duals only, so averaged models stay sparse. Output: the average of
    the primal points ``v_t^m``. Costs per round and client: 2K oracle calls, 2K proxes (one
    fewer in the first round), 2 vectors up and 2 down (2 round trips). With ``phi = 0`` this is
    :class:`~fedopt.algorithms.vi.local_extra_sgd.LocalExtraSGD`. Theorem 7 needs
    ``eta <= 1/(sqrt(10) L)``. Any convex regularizer of :mod:`fedopt.regularizers` works; a
    weakly convex one is refused, because the prox weight ``t eta`` grows past ``1/rho``.
    """

    name = "local-dual-extrapolation"
    composite = True

    def check(self, problem, regularizer):
        super().check(problem, regularizer)
        rho = regularizer.weak_convexity
        if rho > 0:
            raise ValueError(f"{self.name} needs a convex regularizer, got {regularizer!r} (rho={rho:g}): its prox "
                             f"weight t * lr_local grows with the step t and passes 1/rho={1 / rho:g} after "
                             f"{1 / (rho * self.lr_local):.0f} steps")

    def init(self, problem, regularizer, rng, x0=None):
        state = super().init(problem, regularizer, rng, x0)
        return replace(state, vars={**state.vars, "dual": problem.backend.xp.zeros_like(state.vars["z"])})

    @staticmethod
    def mirror(regularizer, anchor, Y, t, eta):
        """``prox_{t eta phi}(w0 + Y)``: the primal points of the duals Y (rows or one vector) after t steps."""
        point = anchor + Y
        return regularizer.prox(point, t * eta) if t > 0 else point

    def round_draws(self, problem):
        return 2 * self.local_steps if problem.sigma else 0

    def round(self, state):
        env = state.env
        problem, reg, anchor = env.problem, env.regularizer, state.vars["start"]
        eta, steps = self.lr_local, self.local_steps
        done = state.vars["count"]  # local steps so far: t - 1 at the first step of this round
        noise = problem.sample_noise(env.rng, 2 * steps)
        Z = problem.per_client(state.vars["dual"])
        points = problem.server_zeros("float64")
        for k in range(steps):
            t = done + k + 1
            X = Z - eta * self.oracle(problem, self.mirror(reg, anchor, Z, t - 1, eta), noise, 2 * k)
            if k == steps - 1:
                X = problem.average(X)
            V = self.mirror(reg, anchor, X, t, eta)
            Z = Z - eta * self.oracle(problem, V, noise, 2 * k + 1)
            points += problem.average(V)
        dual, drift = self.synchronize(problem, Z)
        t = done + steps
        z = self.mirror(reg, anchor, dual, t, eta)
        costs = self.vi_costs(problem, 2 * steps, up=2, down=2, prox=2 * steps - (done == 0))
        return self.advance(state, z, points, steps, drift, costs, 2, dual=dual)
