"""Prox-DSGT: proximal decentralized stochastic gradient tracking, one gossip per step (DEPOSITUM paper, (7), (8))."""

from __future__ import annotations

from dataclasses import dataclass, replace

from fedopt.algorithms.base import Costs
from fedopt.algorithms.decentralized.base import DecentralizedMethod


@dataclass(frozen=True)
class ProxDSGT(DecentralizedMethod):
    """Prox-DSGT with the adapt-then-combine tracker (eq. (7) with (8); DProxSGT of Yan et al. 2023).

    Hyperparameters and the symbols: ``lr`` = alpha (needs ``alpha * rho < 1``), ``batch_size`` =
    B, ``topology``/``mixing`` = the graph and W.

    Start: ``x_i = x_0``, ``g_i = y_i = grad F_i(x_0, xi_i)`` (one minibatch gradient per node).
    One round = one step, node i:

    * ``x_i = sum_j w_ij prox_{alpha h}(x_j - alpha y_j)``  (7)
    * ``g_i^new = grad F_i(x_i, xi_i)`` at the new point
    * ``y_i = sum_j w_ij (y_j + g_j^new - g_j)``, ``g_i = g_i^new``  (8)

    One gradient and one prox per node and two gossips (x, then y) per round. It is DEPOSITUM with
    ``momentum = 0``, ``tracking_rate = 1`` and ``comm_period = 1``, except for the start: from
    ``x_0 = prox_{alpha h}(x_0')`` it walks DEPOSITUM's trajectory from ``x_0'`` exactly, whose
    iteration t = 0 is that prox without a gossip.
    """

    name = "prox-dsgt"

    def init(self, problem, regularizer, rng, x0=None):
        graph, mixer = self.network(problem)
        X = problem.per_client(self.start(problem, x0))
        state = self.new_state(problem, regularizer, rng, graph, mixer, X, Costs(grad_evals=problem.n_clients))
        G = self.node_gradients(state.env, X, self.draw_rows(state.env), out=problem.backend.xp.empty_like(X))
        return replace(state, vars={**state.vars, "Y": G.copy(), "G": G})

    def round(self, state):
        env, graph, mixer = state.env, state.vars["topology"], state.vars["mixer"]
        xp = env.problem.backend.xp
        Y, G = state.vars["Y"], state.vars["G"]
        Z = state.vars["X"] - self.lr * Y
        env.regularizer.prox(Z, self.lr, out=Z)
        X = mixer(Z, out=xp.empty_like(Z))
        G_new = self.node_gradients(env, X, self.draw_rows(env), out=xp.empty_like(X))
        U = Y + G_new - G
        Y_new = mixer(U, out=xp.empty_like(U))
        n, p = env.problem.n_clients, env.problem.n_params
        costs = Costs(grad_evals=n, prox_evals=n) + self.gossip_costs(graph, p, 2)
        return replace(state, x=env.problem.node_mean(X), round=state.round + 1, costs=state.costs + costs,
                       vars={**state.vars, "X": X, "Y": Y_new, "G": G_new})
