"""The composite method of Zhang, Hu and Johansson (ICASSP 2024), as restated in the FedNMap paper, App. A.1."""

from __future__ import annotations

from dataclasses import dataclass, replace

from fedopt.algorithms.base import Env, LocalStepsMethod, State


@dataclass(frozen=True)
class Zhang(LocalStepsMethod):
    """Zhang et al. (2024a), eqs. (30)-(34) of the FedNMap paper (the baseline "Zhang" of its figures).

    ``local_steps`` = Q, ``lr_local`` = eta_a, ``lr_server`` = eta_s, ``batch_size`` as in
    FedNMap; the prox parameter is tied to the effective step ``eta_hat = eta_a * eta_s * Q``.

    Round t with ``x_t = prox_{eta_hat phi}(z_t)``, client i, from ``z_i^0 = x_i^0 = x_t``:
    ``z_i^{l+1} = z_i^l - eta_a (g_i(x_i^l) + c_i)``, ``x_i^{l+1} = prox_{(l+1) eta_a phi}(z_i^{l+1})``
    (the prox parameter grows with l); message ``y_i = (x_t - z_i^Q) / (eta_a Q)``, one vector
    up; server ``z_{t+1} = x_t - eta_hat ybar``, ``x_{t+1} = prox_{eta_hat phi}(z_{t+1})``;
    correction (33) ``c_i = c_i + ybar - y_i`` (``c_i = 0`` at the start). The correction
    tracks the stochastic gradient, not the normal map.

    Costs as in the original algorithm (FedCanon's Table III, row ZA1: ``N (K + 1) + 1`` proxes,
    2d floats per client): only the pre-prox ``z_{t+1}`` goes down; every client takes
    ``x_{t+1} = prox_{eta_hat phi}(z_{t+1})`` itself and ``ybar = (x_t - z_{t+1}) / eta_hat``
    (eq. (32)). So one vector up, one down, and ``n (Q + 1) + 1`` proxes a round: Q local, one
    per client for ``x_{t+1}`` (the same on every client, computed once here), one at the server.
    With cohorts (``clients_per_round``) the model goes down too, as a sampled client may not hold it.
    """

    name = "zhang"
    zero_sum = ("c",)
    clients_hold_model = True

    @property
    def pre_prox_gamma(self):
        return self.effective_step

    def check(self, problem, regularizer):
        regularizer.check_step(self.effective_step, "lr_local * lr_server * local_steps (Zhang's prox step)")
        regularizer.check_step(self.lr_local * self.local_steps, "lr_local * local_steps (the last local prox step)")

    def init(self, problem, regularizer, rng, x0=None):
        z = self.start_pre_prox(problem, x0, self.effective_step)
        correction = problem.client_zeros()
        x = regularizer.prox(z, self.effective_step)
        return State(Env(problem, regularizer, rng), x, z, vars={"c": correction})

    def round(self, state: State) -> State:
        env, x_t, c = state.env, state.x, state.vars["c"]
        problem, reg = env.problem, env.regularizer
        Z = problem.per_client(x_t)
        X = Z.copy()
        # x_i^{l+1} = prox_{(l+1) eta_a phi}(z_i^{l+1}); the last one is never used
        self.local_loop(env, Z, X, c, self.lr_local, [(ell + 1) * self.lr_local for ell in range(self.local_steps)])
        Y = (x_t - Z) / (self.lr_local * self.local_steps)
        y_bar = problem.average(Y)
        z_next = x_t - self.effective_step * y_bar
        costs = self.round_costs(problem, self.local_steps + 1, 1, up=1, down=1)
        return replace(state, x=reg.prox(z_next, self.effective_step), z=z_next, round=state.round + 1,
                       costs=state.costs + costs, vars={"c": c + y_bar - Y})
