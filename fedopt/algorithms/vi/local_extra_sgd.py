"""Local Extra SGD (Wang and Kale, "Faster Rates for Federated Variational Inequalities", eq. (4))."""

from __future__ import annotations

from dataclasses import dataclass

from fedopt.algorithms.vi.base import LocalVIMethod


@dataclass(frozen=True)
class LocalExtraSGD(LocalVIMethod):
    """Local Extra SGD, LESGD (eq. (4); Beznosikov et al. 2022): stochastic extragradient on every client.

    Hyperparameters and the paper's symbols: ``local_steps`` = K, ``lr_local`` = eta (both half
    steps), ``average_extrapolation`` (default True, the paper's version: at a synchronisation
    step the extrapolated points are averaged too; False averages only z, as many "Local EG"
    codes do). Local step t of client m, with fresh samples in both calls:

    * ``xhat = z_{t-1}^m - eta Vt_m(z_{t-1}^m)``; ``x_t^m = xhat``, or ``avg_m' xhat`` at a sync step;
    * ``zhat = z_{t-1}^m - eta Vt_m(x_t^m)``; ``z_t^m = zhat``, or ``avg_m' zhat`` at a sync step;

    where the sync steps are ``t = K, 2K, ...`` (the last local step of a round). Output: the
    average of ``x_t^m`` over all steps and clients. Costs per round and client: 2K oracle calls;
    two dependent averages (2 vectors up, 2 down, 2 round trips), or one without
    ``average_extrapolation``.

    Step sizes: Theorem 1 needs ``eta <= 1/(sqrt(14 K) L)`` (the printed ``1/sqrt(14 K L)`` is an
    erratum, specs/lippax.md Sec. 2.1), Theorem 2 (affine V) ``eta <= 1/L``. With K = 1 this is
    minibatch stochastic extragradient with batch M (``minibatch-extragradient`` with
    ``batch_size = 1``); with one client it is serial stochastic extragradient.
    """

    name = "local-extra-sgd"

    average_extrapolation: bool = True

    def round_draws(self, problem):
        return 2 * self.local_steps if problem.sigma else 0

    def round(self, state):
        env = state.env
        problem, eta, steps = env.problem, self.lr_local, self.local_steps
        noise = problem.sample_noise(env.rng, 2 * steps)
        Z = problem.per_client(state.vars["z"])
        points = problem.server_zeros("float64")
        for k in range(steps):
            X = Z - eta * self.oracle(problem, Z, noise, 2 * k)
            if k == steps - 1 and self.average_extrapolation:
                X = problem.average(X)  # the server's average goes back to every client
            Z = Z - eta * self.oracle(problem, X, noise, 2 * k + 1)
            points += problem.average(X)
        z, drift = self.synchronize(problem, Z)
        trips = 2 if self.average_extrapolation else 1
        costs = self.vi_costs(problem, 2 * steps, up=trips, down=trips)
        return self.advance(state, z, points, steps, drift, costs, trips)
