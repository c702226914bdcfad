"""What the decentralized methods share: nodes on a graph, per-node iterates, gossip costs, network metrics."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from fedopt._checks import count
from fedopt.algorithms.base import Algorithm, Costs, Env, State
from fedopt.algorithms.decentralized import topology as T
from fedopt.algorithms.decentralized.mixing import Mixer


@dataclass(frozen=True)
class DecentralizedMethod(Algorithm):
    """Base class of the methods whose clients (the nodes) talk to graph neighbours instead of a server.

    Shared hyperparameters: ``lr`` (the step, alpha in the papers), ``batch_size`` (samples per
    stochastic gradient, B; None for full local gradients), ``topology`` (a name of
    :data:`~fedopt.algorithms.decentralized.topology.TOPOLOGIES`, a ``Topology``, an ``(n, n)``
    mixing matrix or a networkx graph), ``mixing`` (``"metropolis"`` or ``"lazy"``),
    ``edge_prob`` and ``topology_seed`` (for ``topology="erdos_renyi"``).

    The objective is the problem's ``sum_i w_i f_i + phi``. Gossip with a doubly stochastic
    ``W`` averages the nodes uniformly, so node ``i`` works with ``n w_i f_i``: its own ``f_i``
    under uniform weights (the papers' setting), and in general a rescaling that keeps
    ``(1/n) sum_i n w_i f_i = f``.

    State: ``vars["X"]`` holds the node models ``x_i`` as an ``(n, p)`` array, and ``state.x`` is
    their network average ``xbar`` (the model the papers evaluate), where ``stationarity`` and
    ``objective`` are measured. History columns added by :meth:`evaluate`:

    * ``consensus``: ``sum_i ||x_i - xbar||^2``;
    * ``objective_spread``: ``max_i psi(x_i) - min_i psi(x_i)``, the global objective ``psi =
      f + phi`` at each node's model (one full-data loss per node, so n times the cost of
      ``objective``: evaluate sparsely on large problems with ``eval_every``);
    * ``floats_per_node``: floats sent so far per node.

    Costs: ``grad_evals`` counts one stochastic gradient per node per call, ``prox_evals`` one per
    node per prox; a gossip of a p-vector is ``p`` floats sent to each neighbour, so
    ``floats_up`` (sent) and ``floats_down`` (received) each grow by ``p * sum_i d_i``.
    """

    extra_columns = ("consensus", "objective_spread", "floats_per_node")
    positive = ("lr",)
    shared = ("edge_prob",)  # a batch gossips over one graph

    lr: float = 0.05
    batch_size: int | None = 32
    topology: Any = "ring"
    mixing: str = "metropolis"
    edge_prob: float | None = None
    topology_seed: int = 0

    def __post_init__(self):
        super().__post_init__()
        if self.mixing not in T.MIXINGS:
            raise ValueError(f"mixing={self.mixing!r} is unknown; choose one of {', '.join(map(repr, T.MIXINGS))}")
        if isinstance(self.topology, str):
            if self.topology not in T.TOPOLOGIES:
                raise ValueError(f"topology={self.topology!r} is unknown; choose one of "
                                 f"{', '.join(map(repr, T.TOPOLOGIES))}, "
                                 "or pass a Topology, a mixing matrix or a graph")
            if self.topology == "erdos_renyi" and self.edge_prob is None:
                raise ValueError("topology='erdos_renyi' needs edge_prob, the probability of each edge (e.g. 0.3)")
        object.__setattr__(self, "topology_seed", count("topology_seed", self.topology_seed, 0))

    def check(self, problem, regularizer):
        regularizer.check_step(self.lr, "lr (the prox step alpha)")

    def resume(self, state: State) -> State:
        """The graph and gossip operator of this instance's ``topology``, ``mixing``, ``edge_prob`` and
        ``topology_seed`` on the resumed problem's nodes: the nodes keep their iterates and gossip over
        the network asked for."""
        graph, mixer = self.network(state.env.problem)
        return replace(state, vars={**state.vars, "topology": graph, "mixer": mixer})

    # ---- helpers for the methods
    def network(self, problem) -> tuple[T.Topology, Mixer]:
        """The topology on the problem's clients and its gossip operator on the problem's backend."""
        graph = T.make(self.topology, problem.n_clients, self.mixing, self.edge_prob, self.topology_seed)
        return graph, Mixer(graph, problem.backend, problem.dtype)

    def new_state(self, problem, regularizer, rng, graph, mixer, X, costs: Costs, **arrays) -> State:
        """The state with node models ``X`` (reported as their average) and the method's ``arrays``."""
        return State(Env(problem, regularizer, rng), problem.node_mean(X), costs=costs,
                     vars={"X": X, **arrays, "topology": graph, "mixer": mixer})

    def draw_rows(self, env: Env, steps: int | None = None):
        """One minibatch of ``batch_size`` rows per node from the run's generator, ``(n, b)``, or one
        per iteration for ``steps`` iterations, ``(steps, n, b)`` (the same draws as ``steps`` calls);
        None: full local data."""
        return None if self.batch_size is None else env.problem.sample_rows(env.rng, self.batch_size, steps=steps)

    def node_gradients(self, env: Env, X, rows, out):
        """``grad (n w_i f_i)(x_i)`` of every node on its ``rows`` (None: all its data), written to ``out``."""
        problem = env.problem
        problem.client_grad(X, rows, out=out)
        weights = problem.weights * problem.n_clients
        uniform = np.abs(weights - 1) <= 1e-12  # f_i itself: n w_i of 1/n rounds to 1 - 1e-16
        if not uniform.all():  # a batch's uniform runs keep scale 1 beside the others, as each alone does
            weights = np.where(uniform, 1.0, weights)
            out *= problem.backend.xp.asarray(weights[..., None], dtype=out.dtype)  # (n, 1) or a batch's (R, n, 1)
        return out

    @staticmethod
    def gossip_costs(graph: T.Topology, p: int, vectors: int) -> Costs:
        """Floats of ``vectors`` gossips of p-vectors: each node sends each vector to each neighbour."""
        floats = vectors * p * int(graph.degrees.sum())
        return Costs(floats_up=floats, floats_down=floats)

    # ---- metrics
    def evaluate(self, state: State, gamma: float) -> dict:
        row = super().evaluate(state, gamma)
        env, X, xbar = state.env, state.vars["X"], state.x
        problem, xp = env.problem, env.problem.backend.xp
        losses = np.array([problem.loss(X[i]) for i in range(problem.n_clients)])
        objectives = losses + env.regularizer.value(X)
        finite = bool(np.isfinite(objectives).all())
        row["consensus"] = float(xp.sum((X - xbar) ** 2))
        row["objective_spread"] = float(np.ptp(objectives)) if finite else math.inf
        row["floats_per_node"] = state.costs.floats_up / problem.n_clients
        return row
