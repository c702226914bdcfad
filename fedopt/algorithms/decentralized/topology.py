"""Communication graphs of the decentralized methods: topologies, mixing matrices, spectral gap.

A :class:`Topology` is a connected undirected graph on ``n`` nodes with a symmetric doubly
stochastic mixing matrix ``W`` (``w_ij > 0`` only for neighbours and the node itself). Node ``i``
replaces a vector by ``sum_j w_ij v_j`` in one gossip, so a gossip over all nodes is ``W @ V``.

Graphs (``n`` nodes, node 0 first):

* ``ring``: ``i ~ i +- 1 (mod n)``;
* ``complete``: every pair;
* ``star``: node 0 is the hub;
* ``torus``: a ``rows x cols`` grid with wrap-around (``rows`` the largest divisor of ``n`` up to
  ``sqrt(n)``; ``n`` must have one of at least 2);
* ``erdos_renyi``: each edge with probability ``edge_prob``, drawn from ``seed`` and redrawn
  until the graph is connected;
* ``exponential``: ``i ~ i +- 2^k (mod n)`` for ``2^k < n``, the undirected exponential graph;
* :meth:`Topology.from_adjacency` (a 0/1 matrix) and :meth:`Topology.from_networkx` (any graph
  with ``nodes()`` and ``edges()``, e.g. a networkx ``Graph``; networkx itself is not needed).

Mixing weights: ``metropolis`` (Metropolis-Hastings, the default), ``w_ij = 1 / (1 + max(d_i,
d_j))`` for each edge and ``w_ii = 1 - sum_{j != i} w_ij``; it gives the complete graph
``W = 11^T / n`` and the ring weights 1/3. ``lazy`` is ``(I + W) / 2`` of the Metropolis
weights (every eigenvalue in [0, 1]). A mixing matrix given by the user is checked: square,
finite, nonnegative, symmetric, rows summing to 1, a connected support, and ``lambda < 1``.

The spectral quantity of the theory (DEPOSITUM, Assumption 2) is
``lambda = ||W - 11^T / n||_2 = max(|lambda_2|, |lambda_n|)``, in [0, 1) for a connected graph;
``1 - lambda`` is the spectral gap. For the ring ``lambda = (1 + 2 cos(2 pi / n)) / 3`` (n >= 4),
for the star ``1 - 1/n``, for the complete graph 0.

Negative eigenvalues matter beyond lambda: ``lambda_min`` is the smallest eigenvalue of ``W``.
Metropolis weights on a bipartite graph put it near -1 (-0.6 on the 4 x 4 torus, -1/3 on a long
ring). With long communication periods (DEPOSITUM, T0 = 20) an eigenvalue near -1 makes every
gossip overshoot, the tracker turns the jump into a gradient difference, and the consensus error
grows instead of shrinking (measured on the 4 x 4 torus; T0 <= 5 or ``mixing="lazy"``, whose
eigenvalues are all >= 0, are stable there).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from fedopt._checks import count, real

TOPOLOGIES = ("ring", "complete", "star", "torus", "erdos_renyi", "exponential")
MIXINGS = ("metropolis", "lazy")

#: Tolerance of the symmetry and row-sum checks of a user mixing matrix.
MIXING_TOL = 1e-10
#: Redraws of an Erdos-Renyi graph before giving up on connectivity.
MAX_DRAWS = 1000


@dataclass(frozen=True, eq=False)
class Topology:
    """A connected undirected graph with its mixing matrix ``mixing`` (``W``, ``(n, n)`` float64).

    Build one with :func:`make` (by name), :meth:`from_adjacency`, :meth:`from_networkx`, or from
    a mixing matrix directly (``Topology(W)``, checked). ``lam`` is the spectral quantity
    ``lambda = ||W - 11^T/n||_2`` and ``spectral_gap = 1 - lambda``.
    """

    mixing: np.ndarray
    name: str = "custom"
    lam: float = field(init=False)

    def __post_init__(self):
        W = check_mixing(self.mixing)
        W.setflags(write=False)
        object.__setattr__(self, "mixing", W)
        object.__setattr__(self, "lam", _lambda(W))
        if not self.lam < 1 - 1e-12:
            raise ValueError(f"topology: the mixing matrix has lambda = ||W - 11^T/n||_2 = {self.lam:.6g}, so gossip "
                             "never reaches consensus (an eigenvalue -1: a bipartite graph without self-weights); "
                             "use mixing='lazy' in fedopt.run or make, i.e. Topology((I + W) / 2)")

    # ---- constructors
    @classmethod
    def from_adjacency(cls, adjacency, mixing: str = "metropolis", name: str = "custom") -> Topology:
        """The graph of the symmetric 0/1 matrix ``adjacency`` (diagonal ignored) with ``mixing`` weights."""
        A = np.asarray(adjacency)
        if A.ndim != 2 or A.shape[0] != A.shape[1] or A.shape[0] < 1:
            raise ValueError(f"adjacency must be a square (n, n) matrix, got shape {A.shape}")
        A = A != 0
        np.fill_diagonal(A, False)
        if not (A == A.T).all():
            raise ValueError("adjacency must be symmetric (an undirected graph); use A | A.T")
        _check_connected(A, "adjacency")
        return cls(mixing_matrix(A, mixing), name)

    @classmethod
    def from_networkx(cls, graph, mixing: str = "metropolis") -> Topology:
        """The undirected graph ``graph`` (anything with ``nodes()`` and ``edges()``, e.g. networkx).

        Nodes are numbered in the order of ``graph.nodes()``; self-loops are ignored.
        """
        if getattr(graph, "is_directed", lambda: False)():
            raise ValueError("topology: the graph is directed; mixing needs an undirected graph "
                             "(graph.to_undirected())")
        index = {node: i for i, node in enumerate(graph.nodes())}
        A = np.zeros((len(index), len(index)), dtype=bool)
        for u, v, *_ in graph.edges():
            A[index[u], index[v]] = A[index[v], index[u]] = True
        return cls.from_adjacency(A, mixing, name=type(graph).__name__)

    # ---- properties
    @property
    def n(self) -> int:
        return self.mixing.shape[0]

    @property
    def adjacency(self) -> np.ndarray:
        """``(n, n)`` bool: ``i ~ j`` iff ``w_ij > 0`` and ``i != j``."""
        A = self.mixing > 0
        np.fill_diagonal(A, False)
        return A

    @property
    def degrees(self) -> np.ndarray:
        return self.adjacency.sum(axis=1)

    @property
    def n_edges(self) -> int:
        return int(self.degrees.sum()) // 2

    @property
    def spectral_gap(self) -> float:
        return 1.0 - self.lam

    @property
    def lambda_min(self) -> float:
        """The smallest eigenvalue of ``W`` (in (-1, 1); >= 0 for lazy mixing)."""
        return float(np.linalg.eigvalsh(self.mixing)[0])

    def lazy(self) -> Topology:
        """The same graph with ``W' = (I + W) / 2``."""
        return Topology((np.eye(self.n) + self.mixing) / 2, self.name)

    def __repr__(self) -> str:
        return f"Topology({self.name!r}, n={self.n}, edges={self.n_edges}, lambda={self.lam:.4g})"


# ------------------------------------------------------------------------------------------ graphs
def ring(n: int) -> np.ndarray:
    i = np.arange(n)
    return _adjacency(n, i, (i + 1) % n)


def complete(n: int) -> np.ndarray:
    A = np.ones((n, n), dtype=bool)
    np.fill_diagonal(A, False)
    return A


def star(n: int) -> np.ndarray:
    leaves = np.arange(1, n)
    return _adjacency(n, np.zeros_like(leaves), leaves)


def torus(n: int) -> np.ndarray:
    rows = max(r for r in range(1, math.isqrt(n) + 1) if n % r == 0)
    if rows < 2:
        raise ValueError(f"topology='torus' lays n nodes on a rows x cols grid with rows, cols >= 2; n={n} has no such "
                         "factorization (choose n = 4, 6, 8, 9, ...) or use 'ring'")
    cols = n // rows
    r, c = np.divmod(np.arange(n), cols)
    right = r * cols + (c + 1) % cols
    down = ((r + 1) % rows) * cols + c
    return _adjacency(n, np.concatenate([np.arange(n)] * 2), np.concatenate([right, down]))


def exponential(n: int) -> np.ndarray:
    hops = [2**k for k in range(max(1, (n - 1).bit_length())) if 2**k < n]  # none for one node
    i = np.arange(n)
    return _adjacency(n, np.tile(i, len(hops)), np.concatenate([(i + h) % n for h in hops] or [i[:0]]))


def erdos_renyi(n: int, edge_prob: float, seed=0) -> np.ndarray:
    """A connected G(n, edge_prob): graphs are drawn from ``seed`` until one is connected."""
    if edge_prob is None:
        raise ValueError("topology='erdos_renyi' needs edge_prob, the probability of each edge (e.g. 0.3; "
                         f"connectivity needs about edge_prob > log(n)/n = {math.log(max(n, 2)) / max(n, 2):.3g})")
    edge_prob = real("edge_prob", edge_prob, strict=True)  # named also for True, a list, a string
    if edge_prob > 1:
        raise ValueError(f"edge_prob must be in (0, 1], got {edge_prob!r}")
    rng = np.random.default_rng(seed)
    upper = np.triu(np.ones((n, n), dtype=bool), 1)
    for _ in range(MAX_DRAWS):
        A = upper & (rng.random((n, n)) < edge_prob)
        A |= A.T
        if _connected(A):
            return A
    raise ValueError(f"no connected Erdos-Renyi graph with n={n}, edge_prob={edge_prob:g} in {MAX_DRAWS} draws; "
                     f"raise edge_prob above log(n)/n = {math.log(n) / n:.3g}")


BUILDERS = {"ring": ring, "complete": complete, "star": star, "torus": torus, "exponential": exponential}


# ------------------------------------------------------------------------------------------ mixing
def metropolis(adjacency: np.ndarray) -> np.ndarray:
    """Metropolis-Hastings weights ``w_ij = 1 / (1 + max(d_i, d_j))`` on edges, the rest on the diagonal."""
    d = adjacency.sum(axis=1)
    W = np.where(adjacency, 1.0 / (1.0 + np.maximum(d[:, None], d[None, :])), 0.0)
    np.fill_diagonal(W, 1.0 - W.sum(axis=1))
    return W


def mixing_matrix(adjacency: np.ndarray, mixing: str = "metropolis") -> np.ndarray:
    """The mixing matrix of a graph: ``"metropolis"`` or ``"lazy"`` (``(I + W_metropolis) / 2``)."""
    if mixing not in MIXINGS:
        raise ValueError(f"mixing={mixing!r} is unknown; choose one of {', '.join(map(repr, MIXINGS))}")
    W = metropolis(adjacency)
    return (np.eye(len(W)) + W) / 2 if mixing == "lazy" else W


def check_mixing(W, n: int | None = None) -> np.ndarray:
    """``W`` as a float64 copy after checking that it is a valid mixing matrix (ValueError saying what fails)."""
    W = np.array(W, dtype=np.float64)
    if W.ndim != 2 or W.shape[0] != W.shape[1] or W.shape[0] < 1:
        raise ValueError(f"topology: a mixing matrix must be square (n, n), got shape {W.shape}")
    if n is not None and W.shape[0] != n:
        raise ValueError(f"topology: the mixing matrix is {W.shape[0]} x {W.shape[0]} but the problem has {n} clients")
    if not np.isfinite(W).all():
        raise ValueError("topology: the mixing matrix has NaN or inf entries")
    if (W < -MIXING_TOL).any():
        raise ValueError(f"topology: the mixing matrix has a negative entry ({W.min():.3g}); weights must be >= 0")
    if not np.allclose(W, W.T, rtol=0, atol=MIXING_TOL):
        raise ValueError("topology: the mixing matrix is not symmetric; use Metropolis weights "
                         "(Topology.from_adjacency) or (W + W.T) / 2")
    sums = W.sum(axis=1)
    if not np.allclose(sums, 1, rtol=0, atol=MIXING_TOL):
        worst = int(np.argmax(np.abs(sums - 1)))
        raise ValueError("topology: the mixing matrix is not doubly stochastic: "
                         f"row {worst} sums to {sums[worst]:.12g}, not 1")
    W = np.maximum(W, 0)
    _check_connected(W > 0, "the mixing matrix's graph (its nonzero entries)")
    return W


def make(topology, n: int, mixing: str = "metropolis", edge_prob: float | None = None, seed=0) -> Topology:
    """The :class:`Topology` on ``n`` nodes named or given by ``topology``.

    ``topology`` is a name of :data:`TOPOLOGIES` (with ``edge_prob`` and ``seed`` for
    ``"erdos_renyi"``), a :class:`Topology`, an ``(n, n)`` mixing matrix, or a graph with
    ``nodes()`` and ``edges()`` (networkx). ``mixing`` picks the weights of a named graph or a
    graph object; for a given matrix or Topology, ``"lazy"`` replaces ``W`` by ``(I + W) / 2``.
    """
    if mixing not in MIXINGS:
        raise ValueError(f"mixing={mixing!r} is unknown; choose one of {', '.join(map(repr, MIXINGS))}")
    n = count("n", n)
    if isinstance(topology, str):
        if topology == "erdos_renyi":
            return Topology.from_adjacency(erdos_renyi(n, edge_prob, seed), mixing, topology)
        if topology not in BUILDERS:
            raise ValueError(f"topology={topology!r} is unknown; choose one of {', '.join(map(repr, TOPOLOGIES))}, "
                             "or pass a Topology, a mixing matrix or a networkx graph")
        return Topology.from_adjacency(BUILDERS[topology](n), mixing, topology)
    if hasattr(topology, "nodes") and hasattr(topology, "edges"):
        topology = Topology.from_networkx(topology, mixing)
    elif not isinstance(topology, Topology):
        if not isinstance(topology, (np.ndarray, list, tuple)):
            raise TypeError(f"topology must be a name ({', '.join(TOPOLOGIES)}), a Topology, an (n, n) mixing matrix "
                            f"or a networkx graph, got {type(topology).__name__}")
        W = check_mixing(topology)
        # lazy before Topology's lambda < 1 check, which a W with an eigenvalue -1 fails and (I + W) / 2 passes
        topology = Topology((np.eye(len(W)) + W) / 2 if mixing == "lazy" else W)
    elif mixing == "lazy":
        topology = topology.lazy()
    if topology.n != n:
        raise ValueError(f"topology has {topology.n} nodes but the problem has {n} clients; they must match")
    return topology


# ------------------------------------------------------------------------------------------ helpers
def _adjacency(n, i, j) -> np.ndarray:
    A = np.zeros((n, n), dtype=bool)
    A[i, j] = A[j, i] = True
    np.fill_diagonal(A, False)
    return A


def _components(A):
    """``(count, labels)`` of the graph with adjacency ``A`` (scipy's csgraph, imported here: it
    costs 0.1 s of every ``import fedopt``)."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    return connected_components(csr_matrix(A), directed=False)


def _connected(A) -> bool:
    return _components(A)[0] <= 1


def _check_connected(A, what: str) -> None:
    count, labels = _components(A)
    if count > 1:
        cut = np.flatnonzero(labels != labels[0])[:5]
        raise ValueError(f"topology: {what} is not connected ({count} components; e.g. nodes {cut.tolist()} cannot "
                         "reach node 0), so the nodes never agree; add edges")


def _lambda(W) -> float:
    """``||W - 11^T/n||_2``: the largest eigenvalue modulus of the symmetric ``W`` off the consensus direction."""
    n = len(W)
    if n == 1:
        return 0.0
    eigenvalues = np.linalg.eigvalsh(W - 1.0 / n)
    return float(max(abs(eigenvalues[0]), abs(eigenvalues[-1])))
