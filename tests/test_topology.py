"""Graphs, mixing matrices and their spectral quantity; the gossip kernel against its reference."""

import numpy as np
import pytest

from fedopt._backend import get_backend
from fedopt.algorithms.decentralized import topology as T
from fedopt.algorithms.decentralized.mixing import Mixer
from fedopt.kernels import reference
from fedopt.kernels.cpu import mix_sparse


def doubly_stochastic(W):
    np.testing.assert_allclose(W, W.T, atol=1e-15)
    np.testing.assert_allclose(W.sum(axis=1), 1, atol=1e-14)
    assert (W >= 0).all()


# ---------------------------------------------------------------- named graphs and lambda
@pytest.mark.parametrize("n, ring, star", [(4, 0.33333, 0.75), (9, 0.84403, 0.88889), (10, 0.87268, 0.9),
                                           (16, 0.94925, 0.9375), (25, 0.97906, 0.96)])
def test_lambda_of_ring_star_and_complete_match_the_spec_table(n, ring, star):
    assert T.make("ring", n).lam == pytest.approx(ring, abs=5e-6)
    assert T.make("ring", n).lam == pytest.approx((1 + 2 * np.cos(2 * np.pi / n)) / 3, abs=1e-12)
    assert T.make("star", n).lam == pytest.approx(1 - 1 / n, abs=1e-12)
    assert T.make("complete", n).lam == pytest.approx(0, abs=1e-12)
    np.testing.assert_allclose(T.make("complete", n).mixing, np.full((n, n), 1 / n), atol=1e-15)


@pytest.mark.parametrize("name, n, degrees", [
    ("ring", 7, [2] * 7), ("complete", 5, [4] * 5), ("star", 6, [5, 1, 1, 1, 1, 1]), ("torus", 20, [4] * 20),
    ("exponential", 16, [7] * 16), ("exponential", 10, [6] * 10),
])
def test_named_graphs_have_their_degrees_and_valid_mixing(name, n, degrees):
    graph = T.make(name, n)
    assert graph.name == name and graph.n == n
    np.testing.assert_array_equal(graph.degrees, degrees)
    doubly_stochastic(graph.mixing)
    assert 0 <= graph.lam < 1 and graph.spectral_gap == pytest.approx(1 - graph.lam)


def test_small_graphs_and_the_torus_grid():
    assert T.make("ring", 1).lam == 0 and T.make("ring", 2).n_edges == 1
    assert T.make("exponential", 1).lam == 0 and T.make("exponential", 2).n_edges == 1  # one node has no hops
    torus = T.make("torus", 12)  # 3 x 4 grid with wrap-around
    assert torus.adjacency[0, 1] and torus.adjacency[0, 3] and torus.adjacency[0, 4] and torus.adjacency[0, 8]
    with pytest.raises(ValueError, match="n=7 has no such factorization"):
        T.make("torus", 7)


def test_erdos_renyi_is_seeded_and_connected():
    a, b = T.make("erdos_renyi", 30, edge_prob=0.15, seed=3), T.make("erdos_renyi", 30, edge_prob=0.15, seed=3)
    np.testing.assert_array_equal(a.mixing, b.mixing)
    assert not np.array_equal(a.adjacency, T.make("erdos_renyi", 30, edge_prob=0.15, seed=4).adjacency)
    assert a.lam < 1
    with pytest.raises(ValueError, match="needs edge_prob"):
        T.make("erdos_renyi", 10)
    with pytest.raises(ValueError, match="no connected Erdos-Renyi graph"):
        T.make("erdos_renyi", 200, edge_prob=0.001)


@pytest.mark.parametrize("edge_prob", [True, [0.2, 0.3], "dense", 0.0, 1.5, float("nan")])
def test_a_bad_edge_prob_is_refused_by_name(edge_prob):
    with pytest.raises(ValueError, match="edge_prob must be"):
        T.make("erdos_renyi", 10, edge_prob=edge_prob)


def test_lazy_mixing_halves_the_distance_to_the_identity():
    ring = T.make("ring", 10)
    lazy = T.make("ring", 10, mixing="lazy")
    np.testing.assert_allclose(lazy.mixing, (np.eye(10) + ring.mixing) / 2)
    assert np.linalg.eigvalsh(lazy.mixing).min() >= -1e-15
    assert lazy.lam == pytest.approx((1 + ring.lam) / 2)


# ---------------------------------------------------------------- user graphs and matrices
class Graph:
    """The two methods of a networkx graph that Topology.from_networkx reads."""

    def __init__(self, edges, directed=False):
        self._edges, self._directed = edges, directed

    def nodes(self):
        return sorted({u for e in self._edges for u in e})

    def edges(self):
        return list(self._edges)

    def is_directed(self):
        return self._directed


def test_graphs_from_adjacency_and_from_a_networkx_style_object():
    path = Graph([("a", "b"), ("b", "c"), ("c", "d")])
    graph = T.make(path, 4)
    np.testing.assert_array_equal(graph.degrees, [1, 2, 2, 1])
    same = T.Topology.from_adjacency(graph.adjacency)
    np.testing.assert_array_equal(same.mixing, graph.mixing)
    with pytest.raises(ValueError, match="directed"):
        T.make(Graph([(0, 1)], directed=True), 2)


def test_a_user_mixing_matrix_is_accepted_as_given():
    W = np.array([[0.5, 0.25, 0.25], [0.25, 0.5, 0.25], [0.25, 0.25, 0.5]])
    graph = T.make(W, 3)
    np.testing.assert_array_equal(graph.mixing, W)
    assert graph.lam == pytest.approx(0.25)
    with pytest.raises(ValueError, match="read-only"):
        graph.mixing[0, 0] = 1


@pytest.mark.parametrize("W, message", [
    (np.array([[0.5, 0.5], [0.4, 0.6]]), "not symmetric"),
    (np.array([[0.5, 0.4], [0.4, 0.5]]), "not doubly stochastic: row 0 sums to 0.9"),
    (np.array([[1.2, -0.2], [-0.2, 1.2]]), "negative entry"),
    (np.eye(3), "not connected"),
    (np.array([[0.0, 1.0], [1.0, 0.0]]), "mixing='lazy'"),
    (np.ones((2, 3)) / 3, "must be square"),
    (np.array([[np.nan, 1], [1, 0]]), "NaN or inf"),
])
def test_bad_mixing_matrices_are_refused_with_the_reason(W, message):
    with pytest.raises(ValueError, match=message):
        T.make(W, len(W))


def test_lazy_mixing_of_a_matrix_with_an_eigenvalue_minus_one_follows_the_advice():
    """A 4-cycle without self-weights (eigenvalue -1) is refused with the advice mixing='lazy', which
    used to fail the same check: make built Topology(W) before taking (I + W) / 2."""
    W = np.array([[0, 0.5, 0, 0.5], [0.5, 0, 0.5, 0], [0, 0.5, 0, 0.5], [0.5, 0, 0.5, 0]])
    with pytest.raises(ValueError, match="mixing='lazy'"):
        T.make(W, 4)
    lazy = T.make(W, 4, mixing="lazy")
    np.testing.assert_array_equal(lazy.mixing, (np.eye(4) + W) / 2)
    assert lazy.lam == pytest.approx(0.5) and lazy.lambda_min >= -1e-15
    with pytest.raises(ValueError, match="not doubly stochastic"):  # lazy does not excuse an invalid W
        T.make(W * 0.9, 4, mixing="lazy")


def test_bad_topology_arguments_are_refused_clearly():
    with pytest.raises(ValueError, match="topology='rnig' is unknown; choose one of 'ring', 'complete'"):
        T.make("rnig", 5)
    with pytest.raises(ValueError, match="has 4 nodes but the problem has 5 clients"):
        T.make(T.make("ring", 4), 5)
    with pytest.raises(TypeError, match="topology must be a name"):
        T.make(3.5, 5)
    with pytest.raises(ValueError, match="mixing='max' is unknown"):
        T.make("ring", 5, mixing="max")
    for n in (0, 16.5):  # 16.5 raised range()'s "'float' object cannot be interpreted as an integer"
        with pytest.raises(ValueError, match=f"n must be an integer >= 1, got {n}"):
            T.make("ring", n)
    with pytest.raises(ValueError, match="adjacency must be symmetric"):
        T.Topology.from_adjacency(np.triu(np.ones((3, 3)), 1))


# ---------------------------------------------------------------- gossip
def csr(W):
    rows, cols = np.nonzero(W)  # cols is a strided view: contiguous, as the Mixer passes it (one compile)
    return np.searchsorted(rows, np.arange(len(W) + 1)), np.ascontiguousarray(cols), W[rows, cols]


@pytest.mark.parallel
@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-12), (np.float32, 1e-5)])
@pytest.mark.parametrize("n, p", [(7, 1), (12, 33), (16, 1000)])
def test_sparse_gossip_kernel_matches_the_reference_and_the_dense_product(dtype, tol, n, p, rng):
    W = T.make("erdos_renyi", n, edge_prob=0.3, seed=1).mixing
    V = rng.standard_normal((n, p)).astype(dtype)
    indptr, indices, weights = csr(W)
    expected = reference.mix_sparse(indptr, indices, weights, V, np.empty_like(V))
    out = mix_sparse(indptr, indices, weights, V, np.empty_like(V))
    assert out.dtype == dtype
    np.testing.assert_allclose(out, expected, rtol=tol, atol=tol)
    np.testing.assert_allclose(expected, W.astype(dtype) @ V, rtol=tol, atol=tol)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_mixer_forms_agree_and_auto_picks_sparse_for_sparse_graphs(backend, rng):
    bk = get_backend(backend)
    ring, complete = T.make("ring", 20), T.make("complete", 20)
    assert Mixer(ring, bk, np.float64).form == "sparse" and Mixer(complete, bk, np.float64).form == "dense"
    V = rng.standard_normal((20, 9))
    dense = Mixer(ring, bk, np.float64, form="dense")(V, np.empty_like(V))
    sparse = Mixer(ring, bk, np.float64, form="sparse")(V, np.empty_like(V))
    np.testing.assert_allclose(sparse, dense, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(dense, ring.mixing @ V, rtol=1e-13)
    with pytest.raises(ValueError, match="form='csr' is unknown"):
        Mixer(ring, bk, np.float64, form="csr")
