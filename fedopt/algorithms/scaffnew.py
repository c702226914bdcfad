"""Scaffnew, federated ProxSkip (Mishchenko, Malinovsky, Stich, Richtarik, ICML 2022), for smooth problems."""

from __future__ import annotations

from dataclasses import dataclass, replace

from fedopt._checks import real
from fedopt.algorithms.base import Algorithm, Costs, Env, State, _list_hint


@dataclass(frozen=True)
class Scaffnew(Algorithm):
    """Scaffnew (ProxSkip's Algorithm 2; FedCanon paper, App. A-2, eqs. (15a)-(15c)), full participation.

    Hyperparameters and the papers' symbols: ``lr_local`` = gamma in ProxSkip (beta in FedCanon),
    ``comm_prob`` = p (the probability of communicating after a local step), ``batch_size`` as in
    FedNMap, and ``random_steps`` picks the variant:

    * ``random_steps=True`` (default, ProxSkip itself): after every local step one coin, shared by
      all clients, says communicate with probability p. A round (one communication) therefore has
      ``K_t ~ Geometric(p)`` local steps (support 1, 2, ..., mean 1/p), drawn once per round from
      the run's generator ``state.env.rng`` before the round's minibatches, so the same seed gives
      the same step counts and every backend walks the same trajectory.
    * ``random_steps=False``: exactly ``K = 1/p`` local steps per round (``1/p`` must be an
      integer). The FedCanon spec's equal-work variant; with control step p = 1/K it is FedCanon
      with ``h = 0`` and ``alpha = beta K`` (``lr_server = 1``), i.e. SCAFFOLD with eta_g = 1.

    Round t from the common model ``x_t``, client i, with control variate ``e_i`` (``e_i = -h_i``
    of ProxSkip, ``e_i = 0`` at the start): ``x_i^0 = x_t``;
    ``x_i^{k+1} = x_i^k - beta (g_i(x_i^k) + e_i)`` for ``k < K_t``; server
    ``x_{t+1} = sum_i w_i x_i^{K_t}`` (the prox of the consensus constraint, in the metric
    weighted by ``w_i``); client ``e_i = e_i - (p / beta) (x_{t+1} - x_i^{K_t})``. The weighted sum
    ``sum_i w_i e_i`` stays 0, which is why ProxSkip's ``- (gamma / p) h_j`` term drops out of the
    average. One vector up, one down; no prox.

    ``comm_prob = 1`` (one local step per round, ``e_i = avg g - g_i`` after the first round) is
    gradient descent with step beta.

    There is no prox of a composite ``phi`` in Scaffnew (the FedCanon paper, Sec. I: ProxSkip's
    prox slot is taken by the consensus constraint), so a nonzero regularizer is refused. There is
    no ``local_steps`` hyperparameter: the local step count is set by ``comm_prob``.
    """

    name = "scaffnew"
    smooth_only = True
    positive = ("lr_local",)

    comm_prob: float = 0.1
    lr_local: float = 0.1
    batch_size: int | None = 32
    random_steps: bool = True

    shared = ("comm_prob",)

    def __post_init__(self):
        super().__post_init__()
        p = real("comm_prob", self.comm_prob, hint=_list_hint(self.comm_prob))
        if not 0 < p <= 1:
            raise ValueError(f"comm_prob must be a probability in (0, 1], got {self.comm_prob!r}")
        object.__setattr__(self, "comm_prob", p)
        if not self.random_steps and abs(1 / p - round(1 / p)) > 1e-9 * (1 / p):
            raise ValueError(f"comm_prob={p:g} gives 1/comm_prob={1 / p:g} local steps; with random_steps=False "
                             "1/comm_prob must be an integer (e.g. comm_prob=0.1 for 10 local steps)")

    def batch_refusal(self):
        if self.random_steps:
            return "with random_steps=True each run draws its own number of local steps per round"
        return None

    @property
    def expected_local_steps(self) -> float:
        """``1 / p``: the mean number of local steps per round (the exact number when ``random_steps=False``)."""
        return 1 / self.comm_prob

    def check(self, problem, regularizer):
        if type(regularizer).__name__ != "Zero":
            raise ValueError(f"scaffnew is for smooth problems (regularizer Zero), got {type(regularizer).__name__}: "
                             "ProxSkip's prox is the averaging step, so it has no slot for a composite phi; "
                             "use fednmap, fedcanon or feddr for a composite objective")

    def init(self, problem, regularizer, rng, x0=None):
        x = self.start(problem, x0)
        e = problem.client_zeros()
        return State(Env(problem, regularizer, rng), x, vars={"e": e})

    def round(self, state: State) -> State:
        env, x_t, e = state.env, state.x, state.vars["e"]
        problem = env.problem
        xp = problem.backend.xp
        steps = int(env.rng.geometric(self.comm_prob)) if self.random_steps else round(self.expected_local_steps)
        X = problem.per_client(x_t)
        G = xp.empty_like(X)
        for _ in range(steps):
            self.gradients(env, X, out=G)
            G += e
            X -= self.lr_local * G
        x_next = problem.average(X)
        e_next = e - (self.comm_prob / self.lr_local) * (x_next - X)
        n, p = problem.n_clients, problem.n_params
        costs = Costs(grad_evals=n * steps, prox_evals=0, floats_up=n * p, floats_down=n * p)
        return replace(state, x=x_next, round=state.round + 1, costs=state.costs + costs, vars={"e": e_next})

