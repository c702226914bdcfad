"""What every federated method shares: hyperparameter checks, the round state, and its costs."""

from __future__ import annotations

import copy
import math
import numbers
import reprlib
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar

import numpy as np

from fedopt._checks import count, real


@dataclass(frozen=True)
class Costs:
    """Cumulative costs of a run: client gradient oracle calls (one per client per local step, each
    on a minibatch or the full local data), prox evaluations (client and server), and floats sent
    from clients to the server (``floats_up``) and from the server to clients (``floats_down``),
    summed over clients."""

    grad_evals: int = 0
    prox_evals: int = 0
    floats_up: int = 0
    floats_down: int = 0

    def __add__(self, other: Costs) -> Costs:
        return Costs(self.grad_evals + other.grad_evals, self.prox_evals + other.prox_evals,
                     self.floats_up + other.floats_up, self.floats_down + other.floats_down)


@dataclass(frozen=True)
class Env:
    """What a round reads but never changes: the problem, the regularizer and the run's generator."""

    problem: Any
    regularizer: Any
    rng: np.random.Generator


@dataclass(frozen=True)
class State:
    """The state between rounds. Arrays with a client axis have it first.

    ``x`` is the model the method reports (the server's post-prox model); ``z`` is the pre-prox
    server point of normal-map methods (None for the others), where ``||F_nor(z)||^2`` is
    measured. ``vars`` holds the method's own arrays (corrections, control variates, duals).
    ``method`` names the method whose rounds these are (set by :func:`fedopt.run`; None when
    unknown), so that a resumed run refuses another method's state. ``pre_prox_gamma`` is the prox
    parameter ``g`` that ``z`` belongs to (``x = prox_{g phi}(z)``; set by :func:`fedopt.run`, None
    when unknown or without ``z``), and ``seconds`` the training time of the rounds so far (the
    history's ``seconds``): a resumed run goes on from both, as from ``round`` and ``costs``.

    A round on a cohort writes its clients' rows into the per-client arrays of the state it
    started from (copying ``n x p`` arrays every round would cost more than the round), so a
    state shares those arrays with the rounds after it. ``undo`` is that round's record of the
    rows it overwrote (None for a round that wrote nothing in place): :func:`undo_round` puts
    them back, which :func:`fedopt.run` does when it rejects the round (NaN or inf), so that the
    state it reports is the last finite round as it was.
    """

    env: Env
    x: Any
    z: Any = None
    round: int = 0
    costs: Costs = Costs()
    vars: dict = field(default_factory=dict)
    method: str | None = None
    pre_prox_gamma: float | None = None
    seconds: float = 0.0
    undo: tuple | None = field(default=None, repr=False, compare=False)


def undo_round(state: State) -> None:
    """Restore the rows that ``state``'s round overwrote (its ``undo`` record) in the arrays it shares
    with the state before it: that state is again as it was, and ``state`` is no longer valid."""
    for values, rows, old in state.undo or ():
        values[rows] = old


@dataclass(frozen=True)
class Start:
    """Where a run starts: the model ``x`` that every method reports at round 0, and a subgradient
    ``s`` of phi at ``x`` (None: unknown). A normal-map method with prox parameter ``g`` starts from
    the pre-prox point ``z_0 = x + g s``, so that ``prox_{g phi}(z_0) = x`` for every ``g`` with
    ``g rho < 1``: methods with different prox parameters then start from the same evaluated point.
    """

    x: Any
    subgradient: Any = None

    @classmethod
    def prox_of(cls, regularizer, w, gamma: float) -> Start:
        """``x = prox_{gamma phi}(w)`` and ``s = (w - x) / gamma``, the subgradient of phi at ``x``
        that the prox's optimality condition gives (exact for weakly convex phi with ``gamma rho < 1``)."""
        x = regularizer.prox(w, gamma)
        return cls(x, (w - x) / gamma)


#: How a round's cohort is drawn: ``"uniform"`` without replacement, ``"weighted"`` by client weight.
SAMPLING = ("uniform", "weighted")


def clients_count(value, name: str):
    """``value`` checked as a number of clients: a count >= 1, a fraction in (0, 1], or None (all).

    Any integer (a NumPy one from a parameter grid, say) is returned as an int, any other real as a
    float, or as an int where it is a whole number above 1 (``100.0`` from an expression: a count)."""
    number = value
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        number = float(value)
        if isinstance(value, numbers.Integral) or (number > 1 and number.is_integer()):
            number = int(number)
    if number is not None and (isinstance(number, bool) or not isinstance(number, int | float) or not number > 0 or
                               (isinstance(number, float) and number > 1)):
        raise ValueError(f"{name} must be a count >= 1, a fraction in (0, 1] or None (every client), got {value!r}")
    return number


def cohort_size(value, n_clients: int, name: str) -> int:
    """The clients that ``value`` (see :func:`clients_count`) takes out of ``n_clients``: a fraction takes the
    nearest count, halves up whatever the parity (``round`` takes halves to even), and one at least."""
    value = clients_count(value, name)
    if value is None or isinstance(value, int):
        size = n_clients if value is None else value
    else:
        size = max(1, math.floor(value * n_clients + 0.5))
    if size > n_clients:
        raise ValueError(f"{name}={value} is more than the {n_clients} clients; use at most {n_clients}")
    return size


def _per_client(value, n_clients: int) -> bool:
    """Whether a state entry is per-client: an ``(n_clients, p)`` array (server entries are ``(p,)``)."""
    return getattr(value, "ndim", 0) == 2 and value.shape[0] == n_clients


def _same_value(a, b) -> bool:
    """Whether two runs' values of a hyperparameter are one: mixing matrices and topologies by their entries."""
    a, b = (getattr(value, "mixing", value) for value in (a, b))  # a Topology's matrix
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and np.array_equal(a, b)
    return a == b


def _list_hint(value) -> str:
    """What to say of a list where one run takes one value."""
    if isinstance(value, list | tuple | np.ndarray):
        return (" (one run takes one value: fedopt.run_batch takes a list, one value per run, and an "
                "experiment file a [[grid]] axis)")
    return ""


@dataclass(frozen=True)
class Algorithm:
    """Base class: a frozen dataclass of hyperparameters with ``init`` and ``round``.

    Shared hyperparameter names: ``local_steps`` (Q or K), ``lr_local`` (the client step),
    ``lr_server`` (the server step), ``gamma`` (a prox parameter), ``batch_size`` (samples per
    client gradient; None for the full local gradient). Each method's docstring maps them to
    its paper's symbols.
    """

    name: ClassVar[str] = ""
    #: History columns this method records beyond :data:`fedopt.run.COLUMNS` (see :meth:`evaluate`).
    extra_columns: ClassVar[tuple[str, ...]] = ()
    #: Positive real hyperparameters, checked in ``__post_init__``.
    positive: ClassVar[tuple[str, ...]] = ()

    #: Real hyperparameters that set a round's shape (a number of steps): the runs of a batch share them.
    shared: ClassVar[tuple[str, ...]] = ()
    #: Why the method's fixed point misses the minimiser of psi even with full gradients ("" where it
    #: does not): the estimators' ConvergenceWarning quotes it. The docstring has the analysis.
    fixed_point_bias: ClassVar[str] = ""
    #: What ``batch_size=None`` means for the method ("" where it has no meaning and is refused).
    full_batch: ClassVar[str] = "for full local gradients"
    #: Whether the method has no prox step and takes the regularizer Zero only (its ``check`` refuses others).
    smooth_only: ClassVar[bool] = False

    def __post_init__(self):
        for f in fields(self):  # a flag given as "False" or 0 would count by its truth value
            if f.type in ("bool", bool):
                value = getattr(self, f.name)
                if not isinstance(value, bool | np.bool_):
                    raise ValueError(f"{f.name} must be True or False, got {value!r}")
                object.__setattr__(self, f.name, bool(value))
        for name in self.positive:
            value = getattr(self, name)
            object.__setattr__(self, name, real(name, value, strict=True, hint=_list_hint(value)))
        if hasattr(self, "local_steps"):
            object.__setattr__(self, "local_steps",
                               count("local_steps", self.local_steps, hint=_list_hint(self.local_steps)))
        if hasattr(self, "batch_size"):
            object.__setattr__(self, "batch_size", count("batch_size", self.batch_size, none=self.full_batch,
                                                         hint=_list_hint(self.batch_size)))

    # ---- what a method defines
    def batch_refusal(self) -> str | None:
        """Why this method cannot run batched (:func:`fedopt.run_batch`), or None when it can."""
        return None

    def round_draws(self, problem) -> int:
        """How many ``(n, p)`` client arrays of random draws a round holds at once, beyond its minibatch
        rows (a VI round draws its oracle noise up front, one array per call); :func:`fedopt.run_batch`
        sizes its batches by it."""
        return 0

    def init(self, problem, regularizer, rng: np.random.Generator, x0=None) -> State:
        raise NotImplementedError

    def round(self, state: State) -> State:
        raise NotImplementedError

    def restart(self, problem, regularizer, rng: np.random.Generator, start: Start, round: int) -> State:
        """A fresh state (corrections and duals at their start) numbered as round ``round`` that reports
        ``start.x``: :meth:`init`, for the methods whose state does not depend on the round."""
        return replace(self.init(problem, regularizer, rng, start), round=round)

    def resume(self, state: State) -> State:
        """``state``, from a run of this method with these or other hyperparameters, ready for this
        instance's rounds (:func:`fedopt.run`'s ``resume``): as it is here. Methods whose state holds
        what a hyperparameter built (a pre-prox point of a prox parameter, a gossip graph) rebuild it.
        FedDR's and FedADMM's ``z`` is the weighted sum of their clients' messages, which a cohort round
        updates by the cohort's changes only: moved alone it would shift every later sum, so it stays."""
        return state

    def next_round(self, state: State) -> State:
        """One round as :func:`fedopt.run` takes it: :meth:`round` (methods with cohorts refine it)."""
        return self.round(state)

    def check_problem(self, problem) -> None:
        """Refuse what is not a problem of :mod:`fedopt.problems`: a game of :mod:`fedopt.problems.vi`
        (it needs a VI method), a data set (it needs a model and a loss), anything else."""
        from fedopt.problems import Problem
        from fedopt.problems.vi import VIProblem

        if isinstance(problem, Problem):
            return
        kind = "the game" if isinstance(problem, VIProblem) else "a"
        fix = ("games need a VI method (local-extra-sgd, lippax, slippax, local-dual-extrapolation, ...)"
               if isinstance(problem, VIProblem) else "build one on the data, e.g. fedopt.problems.Softmax(dataset)")
        raise TypeError(f"{self.name} minimizes sum_i w_i f_i(x) + phi(x): pass a problem of fedopt.problems "
                        f"(LeastSquares, Logistic, Softmax, MLP), got {kind} {type(problem).__name__}; {fix}")

    def check(self, problem, regularizer) -> None:
        """Refuse hyperparameters that the regularizer cannot take (``step * rho >= 1``)."""

    @property
    def pre_prox_gamma(self):
        """The prox parameter ``g`` of the pre-prox point of a normal-map method: its state has
        ``x = prox_{g phi}(z)``, and the history's ``normal_map`` is ``||F_nor^g(z)||^2``. The
        method's ``gamma`` (None without one); a method whose ``z`` takes another overrides it."""
        return getattr(self, "gamma", None)

    def evaluate(self, state: State, gamma: float) -> dict:
        """The history's model columns at ``state``: :func:`fedopt.metrics.evaluate` at the
        reported model, with ``gamma`` the prox parameter of ``stationarity`` and
        :attr:`pre_prox_gamma` that of ``normal_map``, plus one value per name in
        ``extra_columns`` where a method adds some."""
        from fedopt.metrics import evaluate

        env = state.env
        return evaluate(env.problem, env.regularizer, state.x, state.z, gamma, self.pre_prox_gamma)

    # ---- helpers for the methods
    def local_loop(self, env: Env, Z, P, D, lr: float, prox_steps=None):
        """The ``local_steps`` local steps of every client, in place.

        For ``l = 0..Q-1``: ``G = g_i(P_i)`` (a minibatch of ``batch_size`` rows per client, or
        the full local gradient), ``Z -= lr * (G + D)`` and ``P = prox_{s_l phi}(Z)`` with
        ``s_l = prox_steps[l]``; without ``prox_steps`` there is no prox and ``P`` must be ``Z``
        itself. ``D`` is an ``(n, p)`` shift (corrections, control variates) or None.

        All Q minibatches are drawn first, from the run's generator, so that every backend and
        both code paths below see the same samples. Linear problems with a separable (or no)
        prox run all steps of all clients in one fused kernel call where the backend has one;
        anything else takes one oracle call per step for all clients, followed by one fused
        pass for the update and a separable prox (or a few array operations for a row-wise one).
        """
        problem, reg = env.problem, env.regularizer
        batch = getattr(self, "batch_size", None)
        rows = None if batch is None else problem.sample_rows(env.rng, batch, steps=self.local_steps)
        xp = problem.backend.xp
        if prox_steps is None:
            from fedopt import kernels as K

            separable = K.IDENTITY, np.zeros((self.local_steps, 1)), xp.empty((0, 0), dtype=Z.dtype)
        else:
            separable = reg.separable(prox_steps, problem.backend, Z.dtype)
        shift = xp.empty((0, 0), dtype=Z.dtype) if D is None else D  # the kernels' "no shift"
        if separable is not None and problem.fused_local_steps(rows, shift, lr, *separable, Z, P):
            return Z, P
        G = xp.empty_like(Z)
        # one step size and prox for all rows: the update and a separable prox in one pass
        fused_update = separable is not None and separable[1].ndim == 2 and np.ndim(lr) == 0
        if fused_update:
            kind, thetas, w = separable
            no_reference = xp.zeros(problem.n_params, dtype=Z.dtype)
            if D is not None and shift.shape != Z.shape:  # a batch's per-run shift (R, 1, p): one row per row of Z
                shift = xp.ascontiguousarray(xp.broadcast_to(shift, Z.shape))
            p = Z.shape[-1]  # the kernel takes rows: a batch's (R, n, p) arrays as (R n, p) views
            Z_rows, G_rows, P_rows = Z.reshape(-1, p), G.reshape(-1, p), P.reshape(-1, p)
            shift_rows = shift if D is None else shift.reshape(-1, p)
        for step in range(self.local_steps):
            problem.client_grad(P, None if rows is None else rows[step], out=G)
            if fused_update:  # z -= lr * (g + D) and x = prox(z): the normal-map step without its reference term
                problem.backend.kernels.normal_map_step(Z_rows, G_rows, shift_rows, no_reference, no_reference, lr,
                                                        0.0, kind, thetas[step], w, Z_rows, P_rows)
                continue
            if D is not None:
                G += D
            G *= lr
            Z -= G
            if prox_steps is not None:
                reg.prox(Z, prox_steps[step], out=P)
        return Z, P

    def gradients(self, env: Env, X, out=None):
        """Every client's stochastic gradient at its row of ``X`` (for local loops that
        :meth:`local_loop` does not cover): one minibatch of ``batch_size`` rows per client from
        the run's generator, or the full local gradient."""
        batch = getattr(self, "batch_size", None)
        rows = None if batch is None else env.problem.sample_rows(env.rng, batch)
        return env.problem.client_grad(X, rows, out=out)

    @staticmethod
    def start(problem, x0):
        """The initial model (an array or a :class:`Start`) as an array of the problem's backend and dtype."""
        x = problem.init(0) if x0 is None else getattr(x0, "x", x0)
        return problem.backend.asarray(x, dtype=problem.dtype).copy()

    @classmethod
    def start_pre_prox(cls, problem, x0, gamma: float):
        """The pre-prox start ``z_0`` of a normal-map method with prox parameter ``gamma``: ``x + gamma s``
        for a :class:`Start` with a subgradient (so ``prox_{gamma phi}(z_0)`` is its ``x``), else ``x0``."""
        z = cls.start(problem, x0)
        subgradient = getattr(x0, "subgradient", None)
        if subgradient is not None:
            z += gamma * problem.backend.asarray(subgradient, dtype=problem.dtype)
        return z

    @classmethod
    def stack(cls, methods, xp, dtype) -> Algorithm:
        """One instance for a batch of runs of this method: each hyperparameter holds the runs' common
        value, or an ``(R, 1, 1)`` array of ``xp`` in ``dtype`` with their values, which broadcasts
        over the batch's server ``(R, 1, p)`` and client ``(R, n, p)`` arrays (:mod:`fedopt.batch`).
        Integers, flags and the ``shared`` hyperparameters must agree."""
        stacked = object.__new__(cls)  # no __post_init__: every method was checked on its own
        for f in fields(cls):
            values = [getattr(method, f.name) for method in methods]
            if all(_same_value(value, values[0]) for value in values):
                value = values[0]
            elif all(isinstance(value, float) for value in values) and f.name not in cls.shared:
                value = xp.asarray(values, dtype=dtype).reshape(-1, 1, 1)
            else:  # None among floats (lr_inner's default) is no step size to stack
                distinct = ", ".join(dict.fromkeys(map(reprlib.repr, values)))
                raise ValueError(f"{cls.name} runs form a batch only with one value of {f.name}, got "
                                 f"{distinct}; run them in separate batches")
            object.__setattr__(stacked, f.name, value)
        return stacked

    def take(self, keep) -> Algorithm:
        """This batch instance (:meth:`stack`) for the runs at the positions ``keep`` only."""
        taken = copy.copy(self)
        for f in fields(self):
            value = getattr(self, f.name)
            if getattr(value, "ndim", 0) == 3:
                object.__setattr__(taken, f.name, value[keep])
        return taken

    def round_costs(self, problem, prox_per_client: int, server_prox: int, up: int, down: int) -> Costs:
        """Costs of one round with ``local_steps`` gradients per client and the given vector counts."""
        n, p = problem.n_clients, problem.n_params
        return Costs(n * self.local_steps, n * prox_per_client + server_prox, n * up * p, n * down * p)

    def replace(self, **changes):
        return replace(self, **changes)


class CohortRounds:
    """Partial participation (an extension beyond the papers, which analyse full participation), for
    a method dataclass with the fields ``clients_per_round`` and ``sampling``: :meth:`next_round`
    runs the method's unchanged :meth:`~Algorithm.round` on a cohort of clients."""

    #: per-client corrections ``c_i`` whose weighted sum ``sum_i w_i c_i`` the method keeps at 0
    #: (FedNMap's, Zhang's and FedCanon's ``c_i = c_i + ybar - y_i``); see :meth:`next_round`.
    zero_sum: ClassVar[tuple[str, ...]] = ()
    #: Whether every client computes the next model from its own copy of the last one (FedCanon II, ZA1),
    #: so that the round's downlink omits the model: a cohort round also sends it to its clients, who
    #: may have sat out the rounds that changed it.
    clients_hold_model: ClassVar[bool] = False

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "clients_per_round", clients_count(self.clients_per_round, "clients_per_round"))
        if self.sampling not in SAMPLING:
            raise ValueError(f"sampling must be one of {', '.join(map(repr, SAMPLING))}, got {self.sampling!r}")

    def cohort_size(self, n_clients: int) -> int:
        """Clients per round out of a population of ``n_clients`` (all of them without ``clients_per_round``)."""
        return cohort_size(self.clients_per_round, n_clients, "clients_per_round")

    def batch_refusal(self) -> str | None:
        if self.clients_per_round is not None:
            return f"{self.name} with clients_per_round draws a cohort per run and round: its runs go one at a time"
        return None

    def check_problem(self, problem) -> None:
        """Also refuse cohorts larger than the population, uniform ones larger than the clients of
        positive weight (the others are never drawn), and cohorts of one client for the methods with
        :attr:`zero_sum` corrections: the cohort's mean ``ybar`` is then its client's own ``y_i``, so
        ``c_i + ybar - y_i`` never moves and the method runs uncorrected, off the solution."""
        super().check_problem(problem)
        if self.clients_per_round is not None:
            size = self.cohort_size(problem.n_clients)
            if size == 1 and self.zero_sum and problem.n_clients > 1:
                raise ValueError(f"clients_per_round={self.clients_per_round!r} gives cohorts of one client, where "
                                 f"{self.name}'s corrections c_i = c_i + ybar - y_i stay 0 (the cohort's mean is "
                                 "its client's own message) and the run settles off the solution; use "
                                 "clients_per_round >= 2, or scaffold, whose server keeps the mean control variate")
            if self.sampling == "uniform":
                problem.check_cohort(size, "clients_per_round", self.clients_per_round)

    def next_round(self, state: State) -> State:
        """One round with the clients sampled for it (partial participation), or with all of them.

        With ``clients_per_round = S`` a round draws a cohort from the run's generator on the host
        (before the minibatches, so every backend follows one trajectory), with
        :meth:`~fedopt.problems.Problem.draw_cohort`: ``"uniform"``, ``S`` distinct clients, or
        ``"weighted"``, ``S`` draws with replacement with probabilities ``w_i``. :meth:`round` then
        runs unchanged on the cohort's view of the problem (:meth:`~fedopt.problems.Problem.cohort`:
        only the cohort's rows are read, and its ``average`` is the aggregate below) and on the
        cohort's rows of the per-client state. The clients that were not sampled keep their state
        (corrections, control variates) as it is: the rule of SCAFFOLD's paper for its control
        variates, and our extension for FedNMap's and FedCanon's corrections. The cohort's new rows
        are written into the arrays of ``state`` (its clients' rows only); the rows they replace are
        kept in the new state's ``undo``, for :func:`undo_round`.

        Aggregate of the messages ``v_i``: ``"weighted"`` averages them, ``(1/S) sum_k v_{i_k}``, an
        unbiased estimate of ``sum_i w_i v_i``; ``"uniform"`` takes ``sum_{i in S} w_i v_i / sum_{i
        in S} w_i``, unbiased for equal client weights (the papers' ``w_i = 1/n``) and a ratio
        estimate (bias ``O(1/S)``) for unequal ones, where ``"weighted"`` is the unbiased choice.
        ``clients_per_round = n`` with ``"uniform"`` is full participation exactly (no draw).

        The corrections of :attr:`zero_sum` (``c_i = c_i + ybar - y_i``) keep ``sum_i w_i c_i = 0``
        when ``ybar`` is the cohort's own weighted mean, as in a ``"uniform"`` round. A
        ``"weighted"`` round's ``ybar`` is not (its ``1/S`` weights differ from the ``w_i``, and a
        client drawn twice keeps one update), so there the cohort's new corrections are shifted by
        one common vector that restores the sum; without it the sum drifts and the method's fixed
        point moves off the solution. The server still steps along the unbiased ``ybar``.
        """
        env = state.env
        population = env.problem
        n = population.n_clients
        size = self.cohort_size(n)
        if self.clients_per_round is None or (size == n and self.sampling == "uniform"):
            return replace(self.round(state), undo=None)  # nothing written in place (not an earlier round's record)
        clients, weights = population.draw_cohort(env.rng, size, self.sampling)
        view = population.cohort(clients, weights)
        owned = {k: v for k, v in state.vars.items() if _per_client(v, n)}
        after = self.round(replace(state, env=replace(env, problem=view),
                                   vars={**state.vars, **{k: v[clients] for k, v in owned.items()}}))
        if self.clients_hold_model:
            after = replace(after, costs=after.costs + Costs(floats_down=view.n_clients * view.n_params))
        last = view.last_occurrences  # a client drawn twice keeps its last update
        if self.sampling == "weighted":
            kept_weight = float(population.weights[clients[last]].sum())
            for name in self.zero_sum:
                new = after.vars[name]
                new -= view.population_sum(new - owned[name][clients]) / kept_weight
        rows, undo = clients[last], []
        for name, values in owned.items():  # in place: a round touches only its cohort's rows
            undo.append((values, rows, values[rows]))  # the rows overwritten (cohort x p): undo_round puts them back
            values[rows] = after.vars[name][last]
        return replace(after, env=env, vars={**after.vars, **owned}, undo=tuple(undo))


@dataclass(frozen=True)
class LocalStepsMethod(CohortRounds, Algorithm):
    """A method whose clients take ``local_steps`` steps of size ``lr_local`` and whose server
    moves by ``lr_server`` times the averaged displacement: the shared hyperparameters, and the
    effective step ``eta_hat = lr_local * lr_server * local_steps``; rounds on cohorts of clients
    (:class:`CohortRounds`)."""

    positive: ClassVar[tuple[str, ...]] = ("lr_local", "lr_server")

    local_steps: int = 10
    lr_local: float = 0.1
    lr_server: float = 1.0
    batch_size: int | None = 32
    clients_per_round: int | float | None = None
    sampling: str = "uniform"

    @property
    def effective_step(self) -> float:
        """``eta_hat = eta_a * eta_s * Q``: how far the server moves per unit of averaged direction."""
        return self.lr_local * self.lr_server * self.local_steps

    def resume(self, state: State) -> State:
        """Also moves the pre-prox point (FedNMap's and Zhang's, the server's own iterate) to this
        instance's :attr:`~Algorithm.pre_prox_gamma` ``g``: ``z = x + g (z - x) / g_0``, with ``g_0``
        the parameter it belongs to (``state.pre_prox_gamma``), keeps the subgradient ``(z - x) / g_0``
        of phi at the model, so that ``x = prox_{g phi}(z)`` as at a :class:`Start`."""
        old, new = state.pre_prox_gamma, self.pre_prox_gamma
        if state.z is None or old is None or old == new:
            return state
        return replace(state, z=state.x + (new / old) * (state.z - state.x), pre_prox_gamma=new)
