"""FedCanon and FedCanon II (Zhou, Zhong, Shi, Wen, Yu, IEEE TSP 74, 2026; arXiv:2504.11903)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from fedopt.algorithms.base import Env, LocalStepsMethod, State


@dataclass(frozen=True)
class FedCanon(LocalStepsMethod):
    """FedCanon (Algorithm 1, eqs. (7a)-(7f)): plain local steps with a correction, one prox per round at the server.

    Hyperparameters and the paper's symbols: ``local_steps`` = K, ``lr_local`` = beta,
    ``lr_server`` = eta_s with the server step ``alpha = eta_s * beta * K`` (so the server
    moves by eta_s times the averaged model displacement, the mapping used in the FedNMap
    experiments), ``batch_size`` as in FedNMap. Needs ``alpha * rho < 1``.

    Round t with the global model ``z^t`` (post-prox), client i: ``xhat_i^0 = z^t``,
    ``xhat_i^{k+1} = xhat_i^k - beta (g_i(xhat_i^k) + c_i)``; uplink ``Delta_i = (z^t -
    xhat_i^K) / (beta K)``; server ``z^{t+1} = prox_{alpha h}(z^t - alpha Dbar)``,
    ``Dbar = sum_i w_i Delta_i``; client ``c_i = c_i + Dbar - Delta_i``.

    Biased fixed point (the paper's "structural drift"): local steps never see ``h``, so at a
    composite stationary point ``z*`` (where ``grad f(z*) = -h'(z*) != 0``) every local step
    still moves by about ``-beta grad f(z*)``. Even with exact gradients the round map's fixed
    point is then the stationary point of a perturbed problem, off by
    ``O(beta K L ||grad f(z*)||)``; it shrinks with ``beta * K``, not with ``alpha``. With
    ``h = 0`` there is no bias (this is SCAFFOLD), and ``K = 1`` is proximal gradient descent.
    """

    name = "fedcanon"
    zero_sum = ("c",)
    fixed_point_bias = ("its local steps never see phi, so with phi != 0 its fixed point misses the solution by "
                        "O(lr_local * local_steps * L) (the paper's structural drift)")
    #: FedCanon II applies the server prox on every client (the server only relays Dbar).
    prox_on_clients = False

    def check(self, problem, regularizer):
        regularizer.check_step(self.effective_step, "lr_server * lr_local * local_steps (FedCanon's alpha)")

    def init(self, problem, regularizer, rng, x0=None):
        z = self.start(problem, x0)
        correction = problem.client_zeros()
        return State(Env(problem, regularizer, rng), z, vars={"c": correction})

    def round(self, state: State) -> State:
        env, z = state.env, state.x
        problem, c = env.problem, state.vars["c"]
        X = problem.per_client(z)
        self.local_loop(env, X, X, c, self.lr_local)
        delta = (z - X) / (self.lr_local * self.local_steps)
        delta_bar = problem.average(delta)
        z_next = env.regularizer.prox(z - self.effective_step * delta_bar, self.effective_step)
        if self.prox_on_clients:  # FedCanon II: Dbar goes down, each client applies the prox itself
            costs = self.round_costs(problem, 1, 0, up=1, down=1)
        else:  # Dbar and z^{t+1} go down
            costs = self.round_costs(problem, 0, 1, up=1, down=2)
        return replace(state, x=z_next, round=state.round + 1, costs=state.costs + costs,
                       vars={"c": c + delta_bar - delta})


@dataclass(frozen=True)
class FedCanon2(FedCanon):
    """FedCanon II (Algorithm 2): as :class:`FedCanon`, but each client applies ``prox_{alpha h}`` to
    ``z^t - alpha Dbar`` itself and the server only broadcasts ``Dbar``. Same iterates; one
    vector down instead of two, and ``n`` proxes per round instead of one. With cohorts
    (``clients_per_round``) ``z^t`` goes down too, as a sampled client may not hold it."""

    name = "fedcanon2"
    prox_on_clients = True
    clients_hold_model = True
