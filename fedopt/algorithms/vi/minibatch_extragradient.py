"""Minibatch stochastic extragradient: the synchronous baseline without local steps."""

from __future__ import annotations

from dataclasses import dataclass

from fedopt.algorithms.vi.base import VIMethod


@dataclass(frozen=True)
class MinibatchExtragradient(VIMethod):
    """Minibatch Extra SGD (Juditsky, Nemirovski, Tauvel 2011; federated: Beznosikov et al.): every
    half step is one server round trip with ``batch_size`` samples per client.

    Hyperparameters and the symbols of specs/lippax.md Sec. 3.1: ``lr_local`` = eta,
    ``batch_size`` = K (the samples each client averages per half step, so that a round uses as
    many oracle calls as K local steps of the local methods). Round r:
    ``w = z - eta avg_{m,k} Vt_m(z; xi_{m,k})`` and ``z+ = z - eta avg_{m,k} Vt_m(w; xi'_{m,k})``;
    output the average of the w's. Costs per round and client: ``2 batch_size`` oracle calls,
    2 vectors up and 2 down (2 round trips). The mean of ``batch_size`` Gaussian samples is drawn
    as one sample of variance ``sigma^2 / batch_size``. Rate ``O(L/R + sigma/sqrt(M R K))``.
    """

    name = "minibatch-extragradient"
    full_batch = ""  # batch_size is K, the samples a half step averages: None has no meaning

    batch_size: int = 10

    def round_draws(self, problem):
        return 2 if problem.sigma else 0

    def round(self, state):
        env = state.env
        problem, eta = env.problem, self.lr_local
        noise = problem.sample_noise(env.rng, 2, batch=self.batch_size)
        z = state.vars["z"]
        w = z - eta * problem.average(self.oracle(problem, z, noise, 0))
        z = z - eta * problem.average(self.oracle(problem, w, noise, 1))
        costs = self.vi_costs(problem, 2 * self.batch_size, up=2, down=2)
        return self.advance(state, z, w.astype("float64"), 1, 0.0, costs, 2)
