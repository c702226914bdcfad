"""FedNMap: normal-map local steps with a local correction (Huang, Pu, Johansson, arXiv:2602.03357, Alg. 1)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from fedopt.algorithms.base import Env, LocalStepsMethod, State


@dataclass(frozen=True)
class FedNMap(LocalStepsMethod):
    """FedNMap (Algorithm 1, eqs. (4)-(7)).

    Hyperparameters and the paper's symbols: ``local_steps`` = Q, ``lr_local`` = eta_a,
    ``lr_server`` = eta_s (effective step ``eta_hat = eta_a * eta_s * Q``), ``gamma`` = gamma
    (the prox parameter, decoupled from the steps; needs ``gamma * rho < 1``), ``batch_size``
    (minibatch of each stochastic gradient; None for full local gradients).

    Round t, with ``x_t = prox_{gamma phi}(z_t)`` and client i:

    * correction (4): ``c_i = c_i - y_i + ybar`` from the last round (``c_i = 0`` at t = 0);
    * Q local steps (5): ``x_i^l = prox(z_i^l)``, ``z_i^{l+1} = z_i^l - eta_a (g_i(x_i^l) +
      (z_t - x_t) / gamma + c_i)``, from ``z_i^0 = z_t``; the normal-map term uses the
      round-start pair;
    * message (6): ``y_i = (z_t - z_i^Q) / (eta_a Q)``, one vector up;
    * server (7): ``z_{t+1} = z_t - eta_hat * ybar`` with ``ybar = sum_i w_i y_i``, then
      ``x_{t+1} = prox(z_{t+1})``; ``z_{t+1}`` and ``ybar`` go down.

    With ``phi = 0`` this is SCAFFOLD (option II, zero control variates); with one client, one
    local step, full gradients and ``gamma = eta_hat`` it is proximal gradient descent.
    """

    name = "fednmap"
    zero_sum = ("c",)
    positive = ("lr_local", "lr_server", "gamma")

    gamma: float = 4.0

    def check(self, problem, regularizer):
        regularizer.check_step(self.gamma, "gamma")

    def init(self, problem, regularizer, rng, x0=None):
        z = self.start_pre_prox(problem, x0, self.gamma)
        return State(Env(problem, regularizer, rng), regularizer.prox(z, self.gamma), z,
                     vars={"c": problem.client_zeros()})

    def round(self, state: State) -> State:
        env = state.env
        problem, reg = env.problem, env.regularizer
        z_t, x_t, c = state.z, state.x, state.vars["c"]
        Z = problem.per_client(z_t)
        X = problem.per_client(x_t)
        shift = c + (z_t - x_t) / self.gamma  # c_i plus the round-start normal-map term
        self.local_loop(env, Z, X, shift, self.lr_local, [self.gamma] * self.local_steps)
        Y = problem.backend.xp.subtract(z_t, Z, out=Z)  # the messages y_i, in place of the z_i^Q
        Y /= self.lr_local * self.local_steps
        y_bar = problem.average(Y)
        z_next = z_t - self.effective_step * y_bar
        c_next = c - Y
        c_next += y_bar
        costs = self.round_costs(problem, self.local_steps, 1, up=1, down=2)
        return replace(state, x=reg.prox(z_next, self.gamma), z=z_next, round=state.round + 1,
                       costs=state.costs + costs, vars={"c": c_next})
