"""DEPOSITUM: decentralized proximal stochastic gradient tracking with momentum (Zhou et al., arXiv:2504.12742)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from fedopt._checks import count, real
from fedopt.algorithms.base import Costs
from fedopt.algorithms.decentralized.base import DecentralizedMethod

MOMENTUM_TYPES = ("polyak", "nesterov")


@dataclass(frozen=True)
class Depositum(DecentralizedMethod):
    """DEPOSITUM (Algorithm 1, eqs. (10)-(12)): momentum on a gradient tracker, a local prox step,
    gossip every ``comm_period`` iterations.

    Hyperparameters and the paper's symbols: ``lr`` = alpha (the prox step; needs
    ``alpha * rho < 1``), ``tracking_rate`` = beta, ``momentum`` = gamma in [0, 1),
    ``momentum_type`` = ``"polyak"`` (OPTION I, SHB) or ``"nesterov"`` (OPTION II, SNAG),
    ``comm_period`` = T0, ``batch_size`` = B, ``topology``/``mixing`` = the graph and W_n (see
    :class:`~fedopt.algorithms.decentralized.base.DecentralizedMethod`).

    Iteration t, node i, ``comm = t in {T0, 2 T0, ...}`` (t = 0 never communicates):

    * momentum on the tracker y: Polyak ``nu_i = gamma nu_i + (1 - gamma) y_i``; Nesterov
      ``mu_i = gamma mu_i + (1 - gamma) y_i``, ``nu_i = gamma mu_i + (1 - gamma) y_i``;
    * adapt ``z_i = prox_{alpha h}(x_i - alpha nu_i)``; combine ``x_i = sum_j w_ij z_j`` if comm,
      else ``x_i = z_i``;
    * a fresh minibatch gradient ``g_i^new`` at the new ``x_i``;
    * tracking ``u_i = y_i + beta (g_i^new - g_i)``; ``y_i = sum_j w_ij u_j`` if comm, else
      ``u_i``; ``g_i = g_i^new``.

    Start: ``x_i = x_0``, ``mu = nu = y = g = 0`` (no gradient at ``x_0``). :meth:`init` runs
    iteration t = 0 (``x_i = prox_{alpha h}(x_0)``, ``y_i = beta g_i``, no gossip) and charges it
    to round 0's costs; from a :class:`~fedopt.algorithms.base.Start` it takes the pre-prox point
    ``x_0 + alpha s``, so that round 0 reports the run's ``x_0`` as every method does. **One round
    is one communication period**: the T0 iterations ``t = (r-1) T0 + 1, ..., r T0``, the last of
    which gossips x and then y. So a round has T0
    gradients and T0 proxes per node and two gossips, like a server method's round of T0 local
    steps and one exchange (``floats_up`` counts point-to-point messages: ``2 p sum_i d_i``).

    Tracking rate and the problem solved (spec I4). The tracker satisfies ``ybar = beta gbar``,
    and mu, nu, y are linear in ``beta g``, so DEPOSITUM(alpha, beta, h) walks exactly the
    x-trajectory of DEPOSITUM(alpha beta, 1, h / beta): the step on f is ``alpha beta``, and the
    fixed points are stationary points of ``f + h / beta``, not of ``f + h``, unless beta = 1 (the
    default; the paper's experiments use beta = 0.5, which doubles the regularization). With
    ``rescaled_prox=True`` (not in the paper) the prox is ``prox_{alpha beta h}``, i.e.
    DEPOSITUM(alpha beta, 1, h), which targets ``f + h`` for any beta.

    Special cases: ``momentum = 0`` gives ``nu = y`` (the no-momentum ablation); a complete graph
    (``W = 11^T/n``) with T0 = 1 keeps the nodes in consensus from t = 2 on, so with gamma = 0 it is
    centralized proximal gradient descent on ``beta f + h`` with step alpha, and with ``h = 0``
    centralized heavy-ball on ``beta f``; one node is centralized proximal SGD with momentum.
    """

    name = "depositum"
    positive = ("lr", "tracking_rate")
    #: Whether the momentum reads the gradient tracker y (False: the no-tracking ablation).
    tracking: ClassVar[bool] = True

    tracking_rate: float = 1.0
    momentum: float = 0.5
    momentum_type: str = "polyak"
    comm_period: int = 10
    rescaled_prox: bool = False

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "momentum", real("momentum (gamma)", self.momentum, below=1))
        if self.momentum_type not in MOMENTUM_TYPES:
            raise ValueError(f"momentum_type={self.momentum_type!r} is unknown; choose 'polyak' (OPTION I) "
                             "or 'nesterov' (OPTION II)")
        object.__setattr__(self, "comm_period", count("comm_period (T0)", self.comm_period))

    @property
    def prox_step(self) -> float:
        """The step of the local prox: alpha, or alpha * beta with ``rescaled_prox``."""
        return self.lr * self.tracking_rate if self.rescaled_prox else self.lr

    def check(self, problem, regularizer):
        regularizer.check_step(self.prox_step, "lr * tracking_rate (the prox step)" if self.rescaled_prox
                               else "lr (the prox step alpha)")

    def init(self, problem, regularizer, rng, x0=None):
        graph, mixer = self.network(problem)
        X = problem.per_client(self.start_pre_prox(problem, x0, self.prox_step))  # t = 0's prox gives x_0 back
        xp = problem.backend.xp
        arrays = {name: xp.zeros_like(X) for name in self._arrays()}
        state = self.new_state(problem, regularizer, rng, graph, mixer, X, Costs(), **arrays)
        work = self._workspace(state)
        self._iteration(state.env, mixer, work, False, self.draw_rows(state.env))  # t = 0
        n = problem.n_clients
        beta = self.tracking_rate  # kept for resume; a batch's (R, 1, 1) values as its per-run scalars, (R,)
        return replace(state, x=problem.node_mean(work["X"]), costs=Costs(grad_evals=n, prox_evals=n),
                       vars={**state.vars, **{k: work[k] for k in ("X", *arrays)},
                             "tracking_rate": beta.reshape(-1) if getattr(beta, "ndim", 0) else beta})

    def resume(self, state):
        """Also brings the momentum and the tracker to this instance's ``momentum_type`` and
        ``tracking_rate``. Polyak's nu (10) and Nesterov's mu (11a) are the same average of y, so a
        Nesterov run takes mu = nu from a Polyak state and a Polyak run nu = mu from a Nesterov one
        (Nesterov's nu is recomputed from mu every iteration). y, nu and mu are linear in ``beta g``
        (spec I4): they are rescaled by ``beta / beta_0``, so that ``ybar = beta gbar`` (spec I1)
        holds for the new beta as in a fresh run."""
        arrays = dict(state.vars)
        if self.momentum_type == "nesterov" and "MU" not in arrays:
            arrays["MU"] = arrays["NU"].copy()
        elif self.momentum_type == "polyak" and "MU" in arrays:
            arrays["NU"] = arrays.pop("MU")
        old, beta = arrays.get("tracking_rate", self.tracking_rate), self.tracking_rate
        if old != beta:
            for name in ("NU", "MU", "Y"):
                if name in arrays:
                    arrays[name] = arrays[name] * (beta / old)
        arrays["tracking_rate"] = beta
        return super().resume(replace(state, vars=arrays))

    def round(self, state):
        env, graph, mixer = state.env, state.vars["topology"], state.vars["mixer"]
        problem = env.problem
        work = self._workspace(state)
        local = self.comm_period - 1  # the iterations before the one that gossips
        rows = self.draw_rows(env, steps=local) if local else None
        # fused: the local iterations and the gossiping one's adapt, its combine, then its gradient
        if self._fused_iterations(env, work, rows, local, adapt_after=True):
            _gossip(mixer, work, "X")
            self._fused_iterations(env, work, self.draw_rows(env, steps=1), 1, adapt_first=False)
            if self.tracking:
                _gossip(mixer, work, "Y")
        else:
            for step in range(local):
                self._iteration(env, mixer, work, False, None if rows is None else rows[step])
            self._iteration(env, mixer, work, True, self.draw_rows(env))
        n, p, T0 = problem.n_clients, problem.n_params, self.comm_period
        costs = Costs(grad_evals=n * T0, prox_evals=n * T0) + self.gossip_costs(graph, p, 2 if self.tracking else 1)
        arrays = {k: work[k] for k in ("X", *self._arrays())}
        return replace(state, x=problem.node_mean(work["X"]), round=state.round + 1, costs=state.costs + costs,
                       vars={**state.vars, **arrays})

    # ---- one iteration, in place on the arrays of ``work``
    def _arrays(self) -> tuple[str, ...]:
        return ("NU", "MU", "Y", "G") if self.momentum_type == "nesterov" else ("NU", "Y", "G")

    def _workspace(self, state) -> dict:
        """Copies of the state's arrays (the input state stays valid) and two scratch arrays."""
        work = {k: state.vars[k].copy() for k in ("X", *self._arrays())}
        xp = state.env.problem.backend.xp
        work["G_new"], work["S"] = xp.empty_like(work["X"]), xp.empty_like(work["X"])
        return work

    def _fused_iterations(self, env, work, rows, steps: int, **phases) -> bool:
        """``steps`` iterations without gossip in one kernel call, where the problem has one (the CPU
        and NumPy backends) and the prox is separable; False, with nothing done, otherwise.
        ``phases``: ``adapt_first`` and ``adapt_after`` of ``tracking_steps`` (:mod:`fedopt.kernels`)."""
        problem = env.problem
        separable = env.regularizer.separable([self.prox_step], problem.backend, problem.dtype)
        if separable is None:
            return False
        kind, thetas, w = separable
        no_mu = problem.backend.xp.empty((0, 0), dtype=problem.dtype)
        return problem.fused_tracking_steps(
            problem._per_step_rows(rows, steps), problem.weights * problem.n_clients, self.momentum, self.lr,
            self.tracking_rate, self.momentum_type == "nesterov", self.tracking, kind, thetas[0], w,
            work["X"], work["NU"], work.get("MU", no_mu), work["Y"], work["G"], **phases)

    def _iteration(self, env, mixer, work, communicate: bool, rows):
        xp = env.problem.backend.xp
        X, NU, Y, S = work["X"], work["NU"], work["Y"], work["S"]
        gamma, alpha, beta = self.momentum, self.lr, self.tracking_rate
        if self.momentum_type == "nesterov":  # (11): mu = gamma mu + (1-gamma) y; nu = gamma mu + (1-gamma) y
            _average_into(work["MU"], Y, gamma)
            xp.multiply(work["MU"], gamma, out=NU)
            xp.multiply(Y, 1 - gamma, out=S)
            NU += S
        else:  # (10): nu = gamma nu + (1-gamma) y
            _average_into(NU, Y, gamma)
        xp.multiply(NU, alpha, out=S)  # (12a): x = W^t prox_{alpha h}(x - alpha nu)
        X -= S
        env.regularizer.prox(X, self.prox_step, out=X)
        if communicate:
            _gossip(mixer, work, "X")
        G, G_new = work["G"], work["G_new"]
        self.node_gradients(env, work["X"], rows, out=G_new)
        if self.tracking:  # (12b): y = W^t (y + beta (g_new - g))
            xp.subtract(G_new, G, out=G)
            G *= beta
            Y += G
            if communicate:
                _gossip(mixer, work, "Y")
        else:  # the ablation: the momentum reads g instead of y
            Y[...] = G_new
        work["G"], work["G_new"] = G_new, G


def _gossip(mixer, work, name: str):
    """``work[name] = W work[name]`` (the combine), through the scratch array ``work["S"]``."""
    mixer(work[name], out=work["S"])
    work[name], work["S"] = work["S"], work[name]


def _average_into(A, B, gamma: float):
    """``A = gamma A + (1 - gamma) B`` in place, without a temporary: ``A = gamma (A - B) + B``."""
    A -= B
    A *= gamma
    A += B


@dataclass(frozen=True)
class DepositumNoTracking(Depositum):
    """DEPOSITUM without gradient tracking, the ablation of the paper's Sec. IV.A: "the momentum
    updates (10) and (11) of DEPOSITUM directly utilizes g instead of y and removes (12b)".

    The momentum reads the node's own minibatch gradient ``g_i`` (kept in ``vars["Y"]``) where
    DEPOSITUM reads the tracker ``y_i``, and the tracker's gossip is gone: every communication
    period ends with one gossip of x only. Same hyperparameters as :class:`Depositum` except
    beta, which scales only the tracker (12b): ``tracking_rate`` must stay 1 (to compare with
    DEPOSITUM(alpha, beta, h), whose step on f is ``alpha beta`` by spec I4, run the ablation with
    ``lr = alpha beta`` and ``h / beta``). Without tracking the nodes' fixed points differ under
    heterogeneous data (client drift), which is what the ablation shows.
    """

    name = "depositum-no-tracking"
    tracking = False

    def __post_init__(self):
        super().__post_init__()
        if self.tracking_rate != 1:
            raise ValueError(f"tracking_rate (beta) scales only the tracker update (12b), which "
                             f"depositum-no-tracking removes; leave it at 1, got {self.tracking_rate!r}")
