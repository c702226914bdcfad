"""FedADMM (Wang, Marella, Anderson, IEEE CDC 2022; arXiv:2203.15104), with full participation."""

from __future__ import annotations

from dataclasses import dataclass, replace

from fedopt.algorithms.base import Algorithm, CohortRounds, Env, State


@dataclass(frozen=True)
class FedADMM(CohortRounds, Algorithm):
    """FedADMM of Wang, Marella and Anderson ("FedADMM: A federated primal-dual algorithm allowing
    partial participation", 2022): ADMM on ``sum_i w_i f_i(x_i) + phi(z)`` s.t. ``x_i = z``, with
    inexact client solves. Other papers use the name (e.g. Zhou and Li 2023); this is the one the
    FedCanon paper cites and compares with (its Table VI; FedCanon spec Sec. 3.8).

    Hyperparameters and the paper's symbols: ``gamma`` = eta = 1 / rho_ADMM (the inverse penalty,
    also the server's prox parameter; needs ``eta * rho < 1`` for a weakly convex ``phi``),
    ``local_steps`` = K and ``lr_local`` = beta of the local solver (K stochastic gradient steps,
    the FedCanon spec's [CHOICE]), ``batch_size`` as in FedNMap. By default all clients take part
    in every round, and the paper's incremental server update is the plain weighted average
    below; with ``clients_per_round`` (:class:`~fedopt.algorithms.base.CohortRounds`) only the
    sampled clients ``S_k`` update ``lam_i`` and send ``xhat_i^{k+1} - xhat_i^k``, and
    ``xtilde^{k+1} = xtilde^k + sum_{i in S_k} w_i (xhat_i^{k+1} - xhat_i^k)`` (the paper's partial
    participation; each client keeps its last ``xhat_i``).

    State: the server model ``z`` (post-prox; the state's ``x``), its pre-prox point ``xtilde``
    (the state's ``z``), the duals ``lam_i`` (0 at the start; ``z^0 = prox_{eta phi}(x^0)`` with
    ``x^0`` the start's pre-prox point for eta, so that ``z^0`` is the model every method reports
    at round 0) and the clients' last messages ``xhat_i`` (``x^0`` at the start).
    Round k, client i, receiving ``z^k``:

    * ``x_i^{k+1} ~ argmin_x f_i(x) + <lam_i^k, x - z^k> + ||x - z^k||^2 / (2 eta)`` by K
      gradient steps ``x <- x - beta (g_i(x) + lam_i^k + (x - z^k) / eta)`` from ``x = z^k``
      (the received model; the paper leaves the local solver's start open);
    * ``lam_i^{k+1} = lam_i^k + (x_i^{k+1} - z^k) / eta``;
    * ``xhat_i^{k+1} = x_i^{k+1} + eta lam_i^{k+1}``, one vector up;
    * server: ``xtilde^{k+1} = sum_i w_i xhat_i^{k+1}``, ``z^{k+1} = prox_{eta phi}(xtilde^{k+1})``
      (the exact minimisation of the augmented Lagrangian in z), one vector down.

    Fixed points: ``x_i = z = x*``, ``lam_i = -grad f_i(x*)`` and
    ``x* = prox_{eta phi}(x* - eta grad f(x*))``, a stationary point of ``psi``; the local
    gradient steps started at ``x*`` stay there, so with full gradients the inexact solves keep
    the fixed point exact. With exact local solves this is FedDR with ``relax = 1`` and the same
    eta (``y_i = z - eta lam_i``); the two differ only in where the inexact solver starts (FedDR
    warm-starts at the previous local solution). One prox of ``phi`` per round, none on the clients.
    """

    name = "fedadmm"
    positive = ("lr_local", "gamma")

    local_steps: int = 10
    lr_local: float = 0.1
    gamma: float = 1.0
    batch_size: int | None = 32
    clients_per_round: int | float | None = None
    sampling: str = "uniform"

    def check(self, problem, regularizer):
        regularizer.check_step(self.gamma, "gamma")

    def init(self, problem, regularizer, rng, x0=None):
        x = self.start_pre_prox(problem, x0, self.gamma)
        lam = problem.client_zeros()
        return State(Env(problem, regularizer, rng), regularizer.prox(x, self.gamma), x,
                     vars={"lam": lam, "xhat": problem.per_client(x)})

    def round(self, state: State) -> State:
        env, z, lam = state.env, state.x, state.vars["lam"]
        problem = env.problem
        xp = problem.backend.xp
        center = z - self.gamma * lam  # the local objective is f_i(x) + ||x - center_i||^2 / (2 eta) + const
        X = problem.per_client(z)
        G = xp.empty_like(X)
        for _ in range(self.local_steps):
            self.gradients(env, X, out=G)
            G += (X - center) / self.gamma
            X -= self.lr_local * G
        lam_next = lam + (X - z) / self.gamma
        x_hat = X + self.gamma * lam_next
        x_tilde = problem.updated_sum(state.z, x_hat, lambda: state.vars["xhat"])
        costs = self.round_costs(problem, 0, 1, up=1, down=1)
        return replace(state, x=env.regularizer.prox(x_tilde, self.gamma), z=x_tilde, round=state.round + 1,
                       costs=state.costs + costs, vars={"lam": lam_next, "xhat": x_hat})
