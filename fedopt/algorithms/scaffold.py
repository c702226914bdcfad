"""SCAFFOLD, option II (Karimireddy et al., ICML 2020), for smooth problems."""

from __future__ import annotations

from dataclasses import dataclass, replace

from fedopt.algorithms.base import Env, LocalStepsMethod, State


@dataclass(frozen=True)
class Scaffold(LocalStepsMethod):
    """SCAFFOLD with option-II control variates (FedNMap paper, App. A.2, eqs. (35)-(37)).

    ``local_steps`` = Q (K in the original), ``lr_local`` = eta_a (eta_l), ``lr_server`` = eta_s
    (eta_g), ``batch_size`` as in FedNMap. Round t, client i, from ``x_i^0 = x_t``:
    ``x_i^{l+1} = x_i^l - eta_a (g_i(x_i^l) - c_i + c)``; new ``c_i^+ = c_i - c + (x_t - x_i^Q) /
    (eta_a Q)``; server ``x_{t+1} = x_t + eta_s sum_i w_i (x_i^Q - x_t)`` and
    ``c = c + sum_i w_i (c_i^+ - c_i)``. Two vectors go up (model and control deltas) and two
    down. There is no prox: a nonzero regularizer is refused.

    Partial participation (``clients_per_round``) follows the SCAFFOLD paper: only the cohort
    ``S`` updates its ``c_i``, the others keep theirs, and ``c = c + sum_{i in S} w_i (c_i^+ -
    c_i)`` (its ``(1/N) sum_{i in S} Delta c_i`` with ``w_i = 1/N``), so ``c = sum_i w_i c_i`` stays
    exact; the model moves by the cohort's aggregate (see :class:`LocalStepsMethod`).
    """

    name = "scaffold"
    smooth_only = True

    def check(self, problem, regularizer):
        if type(regularizer).__name__ != "Zero":
            raise ValueError(f"scaffold is for smooth problems (regularizer Zero), got {type(regularizer).__name__}; "
                             "use fednmap or fedcanon for a composite objective")

    def init(self, problem, regularizer, rng, x0=None):
        x = self.start(problem, x0)
        c = problem.backend.xp.zeros_like(x)
        return State(Env(problem, regularizer, rng), x, vars={"c": c, "c_clients": problem.client_zeros()})

    def round(self, state: State) -> State:
        env, x_t = state.env, state.x
        problem = env.problem
        c, c_clients = state.vars["c"], state.vars["c_clients"]
        X = problem.per_client(x_t)
        self.local_loop(env, X, X, c - c_clients, self.lr_local)
        c_new = c_clients - c + (x_t - X) / (self.lr_local * self.local_steps)
        x_next = x_t + self.lr_server * (problem.average(X) - x_t)
        costs = self.round_costs(problem, 0, 0, up=2, down=2)
        return replace(state, x=x_next, round=state.round + 1, costs=state.costs + costs,
                       vars={"c": c + problem.population_sum(c_new - c_clients), "c_clients": c_new})
