"""FedAvg (McMahan et al., AISTATS 2017) with a proximal server step for the regularizer."""

from __future__ import annotations

from dataclasses import dataclass, replace

from fedopt.algorithms.base import Env, LocalStepsMethod, State


@dataclass(frozen=True)
class FedAvg(LocalStepsMethod):
    """FedAvg with a server prox: local SGD on ``f_i`` only, then one prox of the averaged model.

    ``local_steps`` = Q (K), ``lr_local`` = eta_a (eta_l), ``lr_server`` = eta_s (eta_g),
    ``batch_size`` as in FedNMap. Round t, client i, from ``x_i^0 = x_t``:
    ``x_i^{l+1} = x_i^l - eta_a g_i(x_i^l)``; server
    ``x_{t+1} = prox_{eta_hat phi}(x_t + eta_s sum_i w_i (x_i^Q - x_t))`` with
    ``eta_hat = eta_a eta_s Q``. One vector up, one down.

    Biased fixed point: without a correction, heterogeneous clients drift towards their own
    minimisers during the Q local steps, so even with full gradients the fixed point is not a
    stationary point of ``psi`` unless ``Q = 1`` or the clients agree (the client-drift bias
    that SCAFFOLD, FedCanon and FedNMap remove).
    """

    name = "fedavg"
    fixed_point_bias = ("it has no correction, so with local_steps > 1 its fixed point misses the solution when "
                        "phi != 0 or the clients differ")

    def check(self, problem, regularizer):
        regularizer.check_step(self.effective_step, "lr_local * lr_server * local_steps (the server prox step)")

    def init(self, problem, regularizer, rng, x0=None):
        return State(Env(problem, regularizer, rng), self.start(problem, x0))

    def round(self, state: State) -> State:
        env, x_t = state.env, state.x
        problem = env.problem
        X = problem.per_client(x_t)
        self.local_loop(env, X, X, None, self.lr_local)
        averaged = x_t + self.lr_server * (problem.average(X) - x_t)
        costs = self.round_costs(problem, 0, 1, up=1, down=1)
        return replace(state, x=env.regularizer.prox(averaged, self.effective_step), round=state.round + 1,
                       costs=state.costs + costs)
