"""Local SGDA (Deng and Mahdavi 2021), the LSGD of Wang and Kale's eq. (11) in VI form."""

from __future__ import annotations

from dataclasses import dataclass

from fedopt.algorithms.vi.base import LocalVIMethod


@dataclass(frozen=True)
class LocalSGDA(LocalVIMethod):
    """Local stochastic gradient descent-ascent: FedAvg on the operator (eq. (11), Theorem 6).

    Hyperparameters and the paper's symbols: ``local_steps`` = K, ``lr_local`` = eta (the same
    step for the descent and the ascent block). Local step t of client m:
    ``xhat = x_{t-1}^m - eta Vt_m(x_{t-1}^m)``; ``x_t^m = xhat``, or ``avg_m' xhat`` at a sync
    step ``t = K, 2K, ...``. Output: the average of ``x_t^m`` over all steps and clients. Costs
    per round and client: K oracle calls, one vector up and one down.

    Theorem 6 covers beta-co-coercive V with ``eta <= 1/beta``. On merely monotone problems
    (bilinear games) it diverges: the negative baseline of the spec.
    """

    name = "local-sgda"

    def round_draws(self, problem):
        return self.local_steps if problem.sigma else 0

    def round(self, state):
        env = state.env
        problem, eta, steps = env.problem, self.lr_local, self.local_steps
        noise = problem.sample_noise(env.rng, steps)
        X = problem.per_client(state.vars["z"])
        points = problem.server_zeros("float64")
        for k in range(steps):
            X = X - eta * self.oracle(problem, X, noise, k)
            points += problem.average(X)
        z, drift = self.synchronize(problem, X)
        return self.advance(state, z, points, steps, drift, self.vi_costs(problem, steps, up=1, down=1), 1)
