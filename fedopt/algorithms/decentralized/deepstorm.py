"""DEEPSTORM, single-gossip variant (Mancino-Ball, Miao, Xu, Chen, AAAI 2023; ``deepstormv2`` of its code)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from fedopt._checks import count, real
from fedopt.algorithms.base import Costs
from fedopt.algorithms.decentralized.base import DecentralizedMethod


@dataclass(frozen=True)
class DeepStorm(DecentralizedMethod):
    """DEEPSTORM with one gossip of x and one of y per step and constant steps (DEPOSITUM spec, Sec. 3.3).

    Hyperparameters and the paper's symbols: ``lr`` = alpha (needs ``alpha * rho < 1``),
    ``momentum`` = 1 - beta (the weight of the past in the STORM estimator; beta = 1, i.e.
    ``momentum = 0``, is plain gradient tracking), ``batch_size`` = the minibatch,
    ``init_batch_size`` = the initial batch (None: the full local gradient), ``topology`` and
    ``mixing`` as for every decentralized method. The diminishing-step schedule of the code
    (``alpha_t = alpha0 / (t + k0)^(1/3)``) is not offered.

    Start: ``d_i = grad F_i(x_0)`` on the initial batch, ``y = W d``, ``x_i^prev = x_0``. One round =
    one step, node i:

    * ``x_i = sum_j w_ij x_j``, then ``x_i = prox_{alpha h}(x_i - alpha y_i)``;
    * STORM, both gradients on one minibatch xi_i: ``d_i^new = grad F_i(x_i; xi_i) +
      (1 - beta) (d_i - grad F_i(x_i^prev; xi_i))``;
    * ``y = W (y + d^new - d)``; ``d = d^new``, ``x^prev = x``.

    Two minibatch gradients and one prox per node and two gossips per round.
    """

    name = "deepstorm"

    momentum: float = 0.9
    init_batch_size: int | None = None

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "momentum", real("momentum (1 - beta)", self.momentum, below=1))
        object.__setattr__(self, "init_batch_size", count("init_batch_size", self.init_batch_size,
                                                          none="for full local gradients"))

    def init(self, problem, regularizer, rng, x0=None):
        graph, mixer = self.network(problem)
        X = problem.per_client(self.start(problem, x0))
        xp = problem.backend.xp
        n, p = problem.n_clients, problem.n_params
        costs = Costs(grad_evals=n) + self.gossip_costs(graph, p, 1)
        state = self.new_state(problem, regularizer, rng, graph, mixer, X, costs)
        rows = None if self.init_batch_size is None else problem.sample_rows(rng, self.init_batch_size)
        D = self.node_gradients(state.env, X, rows, out=xp.empty_like(X))
        return replace(state, vars={**state.vars, "D": D, "Y": mixer(D, out=xp.empty_like(D))})

    def round(self, state):
        env, graph, mixer = state.env, state.vars["topology"], state.vars["mixer"]
        xp = env.problem.backend.xp
        X_prev, D, Y = state.vars["X"], state.vars["D"], state.vars["Y"]
        X = mixer(X_prev, out=xp.empty_like(X_prev))
        X -= self.lr * Y
        env.regularizer.prox(X, self.lr, out=X)
        rows = self.draw_rows(env)
        G_new = self.node_gradients(env, X, rows, out=xp.empty_like(X))
        G_old = self.node_gradients(env, X_prev, rows, out=xp.empty_like(X))
        D_new = G_new + self.momentum * (D - G_old)
        Y_new = mixer(Y + D_new - D, out=xp.empty_like(Y))
        n, p = env.problem.n_clients, env.problem.n_params
        costs = Costs(grad_evals=2 * n, prox_evals=n) + self.gossip_costs(graph, p, 2)
        return replace(state, x=env.problem.node_mean(X), round=state.round + 1, costs=state.costs + costs,
                       vars={**state.vars, "X": X, "D": D_new, "Y": Y_new})
