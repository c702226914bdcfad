"""What the federated VI methods share: the ergodic output, synchronisation, drift and the history columns."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import ClassVar

from fedopt.algorithms.base import Algorithm, Costs, Env, State


@dataclass(frozen=True)
class VIMethod(Algorithm):
    """Base class of the methods for a monotone VI ``0 in V(z) + dphi(z)`` with ``V = avg_m V_m``.

    The state keeps the synchronised iterate ``z`` (every client holds the same vector after a
    round), the running sum of the points the theorems average and their count. The reported
    model ``state.x`` is that ergodic average, the paper's output ``x_o = (1/(M T)) sum_m sum_t
    x_t^m`` (an extra all-reduce per round, not counted in the costs: it is only monitoring).

    Extra history columns (:mod:`fedopt.algorithms.vi.metrics`): ``gap``, ``gap_bound``,
    ``duality_gap``, ``distance`` (all at ``x_o``), ``distance_last`` (at the last synchronised
    iterate), ``drift`` (``avg_m ||z^m - zbar||^2`` just before the round's synchronisation: the
    client drift of the paper's lemmas; 0 for minibatch-extragradient, whose clients take no
    step of their own, while one local step on heterogeneous clients already drifts) and
    ``round_trips`` (dependent server round trips so far). ``stationarity`` is the squared
    natural residual of the operator at ``x_o``, and ``objective`` the restricted gap (its upper
    bound where the exact value is not available), so that the run's divergence checks see
    finite merit values.
    """

    extra_columns: ClassVar[tuple[str, ...]] = ("gap", "gap_bound", "duality_gap", "distance", "distance_last",
                                                "drift", "round_trips")
    positive: ClassVar[tuple[str, ...]] = ("lr_local",)
    #: Whether the method takes a regularizer phi (the others solve ``V(z) = 0``).
    composite: ClassVar[bool] = False

    lr_local: float = 0.1

    def check_problem(self, problem):
        from fedopt.problems.vi import VIProblem

        if not isinstance(problem, VIProblem):
            raise TypeError(f"{self.name} solves variational inequalities: pass a problem of fedopt.problems.vi "
                            f"(BilinearGame, QuadraticGame, ...), got {type(problem).__name__}")

    def check(self, problem, regularizer):
        if not self.composite and regularizer.name != "zero":
            own = (f" ({type(problem).__name__}'s own, used when none is given: pass fedopt.regularizers.Zero(), "
                   "or name = \"zero\" in a sweep, for its smooth game)" if regularizer == problem.regularizer else "")
            raise ValueError(f"{self.name} solves V(z) = 0 without a regularizer, got {regularizer!r}{own}; use "
                             "local-dual-extrapolation for a composite VI")

    def init(self, problem, regularizer, rng, x0=None):
        z = self.start(problem, x0)
        total = problem.server_zeros("float64")
        return State(Env(problem, regularizer, rng), z.copy(),
                     vars={"z": z, "start": z.copy(), "sum": total, "count": 0, "drift": math.nan, "round_trips": 0})

    def evaluate(self, state, gamma):
        from fedopt.algorithms.vi import metrics

        env = state.env
        row = metrics.evaluate(env.problem, env.regularizer, state.x, self.last_iterate(state), state.vars["start"],
                               gamma)
        row.update(drift=state.vars["drift"], round_trips=state.vars["round_trips"])
        return row

    def last_iterate(self, state):
        """The last synchronised iterate (primal), where ``distance_last`` is measured."""
        return state.vars["z"]

    # ---- helpers for the methods
    @staticmethod
    def oracle(problem, W, noise, call):
        """``Vt_m`` at every client's row of ``W`` (or at the vector W) with the noise of call number ``call``."""
        return problem.client_operator(W, None if noise is None else noise[call])

    @staticmethod
    def synchronize(problem, Y):
        """``(avg_m y_m, avg_m ||y_m - avg||^2)``: the server average and the drift it removes (a float;
        one per run in a batch)."""
        mean = problem.average(Y)
        return mean, problem.drift(Y, mean)

    def advance(self, state, z, points_sum, points, drift, costs: Costs, round_trips: int, **more) -> State:
        """The next state: synchronised ``z``, ``points`` more averaged points summing to ``points_sum``."""
        v = state.vars
        total, count = v["sum"] + points_sum, v["count"] + points
        x = (total / count).astype(state.env.problem.dtype)
        return replace(state, x=x, round=state.round + 1, costs=state.costs + costs,
                       vars={**v, "z": z, "sum": total, "count": count, "drift": drift,
                             "round_trips": v["round_trips"] + round_trips, **more})

    @staticmethod
    def vi_costs(problem, oracle_calls: int, up: int, down: int, prox: int = 0) -> Costs:
        """Costs of a round: ``oracle_calls``, ``prox`` evaluations and ``up``/``down`` vectors per client."""
        n, p = problem.n_clients, problem.n_params
        return Costs(n * oracle_calls, n * prox, n * up * p, n * down * p)


@dataclass(frozen=True)
class LocalVIMethod(VIMethod):
    """A VI method whose clients take ``local_steps`` (K) steps between synchronisations."""

    local_steps: int = 10
