"""FedDA, federated dual averaging in its Euclidean form (FedDualAvg; Yuan, Zaheer, Reddi, ICML 2021)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from fedopt.algorithms.base import Env, LocalStepsMethod, State


@dataclass(frozen=True)
class FedDA(LocalStepsMethod):
    """FedDualAvg with the Euclidean mirror map (FedCanon spec Sec. 3.5, as in the official code).

    Hyperparameters and the paper's symbols: ``local_steps`` = K, ``lr_local`` = eta_c (beta),
    ``lr_server`` = eta_s, ``batch_size`` as in FedNMap. The prox weight is the "elapsed learning
    rate": it grows by ``eta_c`` per local step and by ``eta_s eta_c K`` per round.

    The server keeps the dual (unprojected) model ``w^t`` (``w^0 = x^0``) and the round counter t;
    the reported model is the primal ``x^t = prox_{a_t phi}(w^t)`` with ``a_t = eta_s eta_c K t``.
    Round t, client i: ``y_i^0 = w^t``; for k < K, ``x_i^k = prox_{(a_t + eta_c k) phi}(y_i^k)``
    (the identity when the weight is 0, i.e. at t = k = 0) and ``y_i^{k+1} = y_i^k - eta_c
    g_i(x_i^k)``; uplink ``y_i^K - w^t``; server ``w^{t+1} = w^t + eta_s sum_i w_i (y_i^K - w^t)``
    and ``x^{t+1} = prox_{a_{t+1} phi}(w^{t+1})``. One vector up (the dual change), one down
    (``w^{t+1}``; t is known to everyone); ``n K + 1`` proxes per round (``n (K - 1) + 1`` in
    round 0, whose first prox has weight 0).

    Gradients are taken at the primal points but summed in the dual, so the prox weight keeps
    pace with the accumulated steps: with K = 1, ``eta_s = 1`` and full gradients this is
    centralised dual averaging, ``w^{t+1} = w^t - eta_c grad f(x^t)``,
    ``x^{t+1} = prox_{eta_c (t + 1) phi}(w^{t+1})``. With ``phi = 0`` it is FedAvg. There is no
    correction, so heterogeneous clients drift as in FedAvg and FedMiD.

    Weakly convex regularizers are refused. The prox weight ``a_t`` grows without bound with the
    round t (``eta_c = 0.01, K = 40, t = 200`` gives 80), so it passes ``1/rho`` after a fixed
    number of rounds whatever the step sizes, and beyond it the prox is a nonconvex problem that
    ``prox`` does not solve. FedDA needs a convex ``phi`` (rho = 0); use FedNMap or FedCanon for
    MCP or SCAD.
    """

    name = "fedda"
    fixed_point_bias = "it has no correction, so with clients that differ its fixed point misses the solution"

    def prox_weight(self, t: int, k: int = 0) -> float:
        """``a_t + eta_c k = eta_s eta_c K t + eta_c k``: the elapsed learning rate at local step k of round t."""
        return self.effective_step * t + self.lr_local * k

    def check(self, problem, regularizer):
        rho = regularizer.weak_convexity
        if rho > 0:
            rounds = 1 / (rho * self.lr_server * self.lr_local * self.local_steps)
            raise ValueError(f"fedda needs a convex regularizer, got {regularizer!r} (rho={rho:g}): its prox weight "
                             f"lr_server * lr_local * local_steps * t grows with the round t and passes 1/rho="
                             f"{1 / rho:g} after about {rounds:.0f} rounds; use fednmap or fedcanon instead")

    def init(self, problem, regularizer, rng, x0=None):
        return self.restart(problem, regularizer, rng, x0, 0)

    def restart(self, problem, regularizer, rng, start, round):
        """The dual whose prox with round ``round``'s weight ``a_t`` is the start's model (itself at t = 0)."""
        dual = self.start_pre_prox(problem, start, self.prox_weight(round))
        return State(Env(problem, regularizer, rng), self.start(problem, start), round=round, vars={"dual": dual})

    def round(self, state: State) -> State:
        env, w, t = state.env, state.vars["dual"], state.round
        problem, reg = env.problem, env.regularizer
        Y = problem.per_client(w)
        first = self.prox_weight(t, 0)  # 0 in the very first round: the prox is the identity there
        X = reg.prox(Y, first) if t > 0 else Y.copy()
        # y <- y - eta_c g(x), then x <- prox_{a_{t,k+1} phi}(y); the last x is not used
        weights = [self.prox_weight(t, k) for k in range(1, self.local_steps + 1)]
        self.local_loop(env, Y, X, None, self.lr_local, weights)
        proxes = self.local_steps - (t == 0)
        w_next = w + self.lr_server * (problem.average(Y) - w)
        x_next = reg.prox(w_next, self.prox_weight(t + 1))
        costs = self.round_costs(problem, proxes, 1, up=1, down=1)
        return replace(state, x=x_next, round=t + 1, costs=state.costs + costs, vars={"dual": w_next})
