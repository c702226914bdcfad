"""FedMiD, federated mirror descent in its Euclidean (proximal) form (Yuan, Zaheer, Reddi, ICML 2021)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from fedopt.algorithms.base import Env, LocalStepsMethod, State


@dataclass(frozen=True)
class FedMiD(LocalStepsMethod):
    """FedMiD with the Euclidean mirror map: proximal SGD on every client, a prox step at the server.

    Hyperparameters and the paper's symbols: ``local_steps`` = K, ``lr_local`` = eta_c (beta in
    the FedCanon paper), ``lr_server`` = eta_s, ``batch_size`` as in FedNMap. The server prox
    weight is ``alpha = eta_s * eta_c * K`` (the official code's "server lr times the sum of client
    lrs"; FedCanon spec Sec. 3.4 [CHOICE], which also fixes the FedCanon paper's eq. (3)). Needs
    ``eta_c * rho < 1`` and ``alpha * rho < 1``.

    Round t with the global model ``z^t``, client i: ``x_i^0 = z^t``,
    ``x_i^{k+1} = prox_{eta_c phi}(x_i^k - eta_c g_i(x_i^k))`` for k < K; uplink
    ``Delta_i = (z^t - x_i^K) / (eta_c K)``; server
    ``z^{t+1} = prox_{alpha phi}(z^t - alpha Dbar)``, ``Dbar = sum_i w_i Delta_i``, i.e.
    ``z^{t+1} = prox_{alpha phi}(z^t + eta_s (sum_i w_i x_i^K - z^t))``. One vector up, one down;
    ``n K + 1`` proxes per round.

    Biased fixed point (the local prox bias). FedMiD has no correction, and its clients prox
    ``phi`` themselves:

    * client drift: each client runs K proximal steps towards the minimiser of its own
      ``f_i + phi``, so with heterogeneous clients the average of the ``x_i^K`` is not a
      proximal gradient step of ``f + phi`` even with exact gradients; the fixed point moves by
      about ``eta_c K L max_i ||grad f_i(z*) - grad f(z*)||``;
    * the "curse of primal averaging" (Yuan et al., Sec. 3): averaging the clients' proxed models
      undoes the structure the prox gave them (the average of sparse models is dense), which is
      why the server proxes again; but that prox acts on a model that the clients have already
      proxed, so even one client with K = 1 and ``eta_s = 1`` iterates
      ``z <- prox_{eta_c phi}(prox_{eta_c phi}(z - eta_c grad f(z)))``; for ``phi = lam ||.||_1``
      that is proximal gradient descent on ``f + 2 lam ||.||_1``. The penalty is over-counted,
      and the bias shrinks with ``eta_c K`` and ``lam``, not with the rounds.

    So with ``phi != 0`` FedMiD's fixed point is not a stationary point of ``psi``: its
    stationarity stalls at a floor that FedCanon and FedNMap go below. With ``phi = 0`` it is
    FedAvg (server step ``eta_s``), and with ``phi = 0`` and K = 1 gradient descent.
    """

    name = "fedmid"
    fixed_point_bias = ("its clients apply the prox without a correction, so with phi != 0 its fixed point misses "
                        "the solution (the penalty is counted twice, and the clients drift)")

    def check(self, problem, regularizer):
        regularizer.check_step(self.lr_local, "lr_local (FedMiD's local prox step)")
        regularizer.check_step(self.effective_step, "lr_server * lr_local * local_steps (FedMiD's server prox step)")

    def init(self, problem, regularizer, rng, x0=None):
        return State(Env(problem, regularizer, rng), self.start(problem, x0))

    def round(self, state: State) -> State:
        env, z = state.env, state.x
        problem, reg = env.problem, env.regularizer
        X = problem.per_client(z)
        # x_i <- prox_{eta_c phi}(x_i - eta_c g_i(x_i)): the pre-prox and post-prox iterates share X
        self.local_loop(env, X, X, None, self.lr_local, [self.lr_local] * self.local_steps)
        delta_bar = problem.average((z - X) / (self.lr_local * self.local_steps))
        z_next = reg.prox(z - self.effective_step * delta_bar, self.effective_step)
        costs = self.round_costs(problem, self.local_steps, 1, up=1, down=1)
        return replace(state, x=z_next, round=state.round + 1, costs=state.costs + costs)
