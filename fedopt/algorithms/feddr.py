"""FedDR, federated Douglas-Rachford splitting (Tran-Dinh, Pham, Phan, Nguyen, NeurIPS 2021)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from fedopt._checks import real
from fedopt.algorithms.base import Algorithm, CohortRounds, Env, State


@dataclass(frozen=True)
class FedDR(CohortRounds, Algorithm):
    """FedDR (Tran-Dinh et al. 2021, Algorithm 1), inexact local proxes of ``f_i``.

    Douglas-Rachford splitting of ``sum_i w_i f_i(x_i) + phi(x) + [x_1 = ... = x_n = x]``, in the
    metric weighted by ``w_i``: the clients evaluate (inexactly) ``prox_{eta f_i}`` and the server
    the prox of ``phi`` plus the consensus constraint, ``prox_{eta phi}`` of the weighted average.

    Hyperparameters and the paper's symbols: ``gamma`` = eta (the prox parameter of both sides;
    needs ``eta * rho < 1``), ``relax`` = alpha in (0, 2) (the relaxation), ``local_steps`` = K
    and ``lr_local`` = beta of the local solver (the FedCanon spec's [CHOICE] for "several local
    SGD updates"), ``batch_size`` as in FedNMap.

    State: the server model ``xbar`` and pre-prox point ``xtilde`` (``x`` and ``z`` of the
    state), and on each client ``y_i`` and its local solution ``x_i``. Start:
    ``y_i^0 = x_i^0 = xtilde^0 = x^0`` and ``xbar^0 = prox_{eta phi}(x^0)`` (the zero-step initial
    local solve, which the paper's accuracy ``eps_{i,0}`` allows; the first round makes it), with
    ``x^0`` the start's pre-prox point for eta, so that ``xbar^0`` is the model every method
    reports at round 0.
    Round k, client i, receiving ``xbar^k``:

    * ``y_i^{k+1} = y_i^k + alpha (xbar^k - x_i^k)``;
    * ``x_i^{k+1} ~ prox_{eta f_i}(y_i^{k+1}) = argmin_x f_i(x) + ||x - y_i^{k+1}||^2 / (2 eta)``
      by K (stochastic) gradient steps ``x <- x - beta (g_i(x) + (x - y_i^{k+1}) / eta)``,
      warm-started at ``x_i^k``;
    * ``xhat_i^{k+1} = 2 x_i^{k+1} - y_i^{k+1}``, one vector up (with full participation the
      paper's increment ``xhat_i^{k+1} - xhat_i^k`` carries the same information);
    * server: ``xtilde^{k+1} = sum_i w_i xhat_i^{k+1}``, ``xbar^{k+1} = prox_{eta phi}(xtilde^{k+1})``,
      one vector down. One prox of ``phi`` per round, none on the clients.

    Fixed points: ``x_i = xbar = x*``, ``y_i = x* + eta grad f_i(x*)``, and
    ``x* = prox_{eta phi}(x* - eta grad f(x*))``, a stationary point of ``psi``. The warm-started
    gradient steps do not move ``x*`` (it solves the local problem there), so with full gradients
    the inexact solves keep the fixed point exact: no client-drift bias. The local steps converge
    for ``beta < 2 / (L_i + 1 / eta)``. The paper's theory takes ``phi`` convex and, for nonconvex
    ``f_i``, a small enough ``eta``; ``xtilde`` is recorded as ``z`` (``F_nor(z) = 0`` at the
    fixed point, with ``xbar = prox_{eta phi}(xtilde)``).

    Partial participation (``clients_per_round``, :class:`~fedopt.algorithms.base.CohortRounds`)
    is the paper's own: only the sampled clients ``S_k`` update ``y_i, x_i`` and send the
    increment ``xhat_i^{k+1} - xhat_i^k``, and ``xtilde^{k+1} = xtilde^k + sum_{i in S_k} w_i
    (xhat_i^{k+1} - xhat_i^k)``, so ``xtilde`` stays ``sum_i w_i xhat_i`` over all clients.
    """

    name = "feddr"
    positive = ("lr_local", "gamma")

    local_steps: int = 10
    lr_local: float = 0.1
    gamma: float = 1.0
    relax: float = 1.0
    batch_size: int | None = 32
    clients_per_round: int | float | None = None
    sampling: str = "uniform"

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "relax", real("relax", self.relax, strict=True, below=2,
                                               hint=" (FedDR's alpha, the Douglas-Rachford relaxation)"))

    def check(self, problem, regularizer):
        regularizer.check_step(self.gamma, "gamma")

    def init(self, problem, regularizer, rng, x0=None):
        x = self.start_pre_prox(problem, x0, self.gamma)
        Y = problem.per_client(x)
        return State(Env(problem, regularizer, rng), regularizer.prox(x, self.gamma), x.copy(),
                     vars={"y": Y, "x_clients": Y.copy()})

    def round(self, state: State) -> State:
        env, x_bar = state.env, state.x
        problem = env.problem
        Y_old, X_old = state.vars["y"], state.vars["x_clients"]
        X = X_old.copy()
        xp = problem.backend.xp
        Y = Y_old + self.relax * (x_bar - X)
        G = xp.empty_like(X)
        for _ in range(self.local_steps):
            self.gradients(env, X, out=G)
            G += (X - Y) / self.gamma
            X -= self.lr_local * G
        x_tilde = problem.updated_sum(state.z, 2 * X - Y, lambda: 2 * X_old - Y_old)
        costs = self.round_costs(problem, 0, 1, up=1, down=1)
        return replace(state, x=env.regularizer.prox(x_tilde, self.gamma), z=x_tilde, round=state.round + 1,
                       costs=state.costs + costs, vars={"y": Y, "x_clients": X})
