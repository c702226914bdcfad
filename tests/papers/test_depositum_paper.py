"""DEPOSITUM (Zhou, Shi, Li, Zhong, Wen, Cao, arXiv:2504.12742), its no-tracking ablation and the two
decentralized baselines the paper restates (Prox-DSGT, eqs. (7)-(8); DEEPSTORM, ``deepstormv2`` of
its authors' code), checked round by round against plain per-node NumPy loops written from the
paper's Algorithm 1 and equations.

Each reference takes fedopt's recorded minibatches (:class:`replay.Draws`) and must reproduce
fedopt's whole trajectory to 1e-12 relative, on the numpy and numba backends, for least squares
and logistic losses, l1, group lasso and MCP, full and minibatch gradients: the reported network
average and every per-node array (models, momenta, trackers, gradients). The nodes sit on a star
(node 0 the hub) with Metropolis weights, built here from the graph's definition and checked
against the matrix fedopt gossips with.

Weighted nodes. The paper's objective is ``(1/n) sum_i f_i`` (eq. (1)); fedopt's ``sum_i w_i f_i``
is that objective with local functions ``n w_i f_i``, so node i's stochastic gradient here is
``n w_i grad F_i``, and the weights are non-uniform (0.1 to 0.4).

Costs. The paper gives no per-iteration cost counts, so fedopt's cumulative ``grad_evals``,
``prox_evals`` and ``floats_up``/``floats_down`` are tested after every round against the
algorithm boxes as the references execute them: each call of a node's gradient oracle (on a
minibatch or all its data), each prox, and ``p`` floats per neighbour per gossiped p-vector.
Per iteration and node that is, for DEPOSITUM's Algorithm 1, one gradient ``g_i^{t+1}``, one
``prox_h^{1/alpha}`` and, at ``t in T`` only, two neighbour sums (the prox outputs, then
``y_j^t + beta g_j^{t+1} - beta g_j^t``); without tracking, the first sum only; for Prox-DSGT,
one gradient, one prox and the two sums of (7) and (8), after one gradient for ``y_i^0``; for
DEEPSTORM, two gradients on one minibatch, one prox and two sums, after one gradient and one sum
for ``y^0 = W d^0``.

Mutation check (run by hand once on fedopt's method, then reverted; each mistake fails every case
of its method, with the relative error of x at the first round it departs, smallest to largest):

* DEPOSITUM, the gradient ``g_i^{t+1}`` taken at the node's own prox output before the gossip
  instead of at the mixed ``x_i^{t+1}`` of Algorithm 1's ``else`` branch: 8e-4 to 1e-2 at round 2.
* DEPOSITUM without tracking, the gossip applied before the prox, ``prox(sum_j w_ij (x_j - alpha
  nu_j))`` instead of (12a)'s ``W^t prox(x^t - alpha nu^{t+1})``: 1e-4 to 8e-3 at round 1 or 2.
  (fedopt's former reading, the momentum on ``beta g`` instead of the paper's ``g``, departed by
  1e-1 at round 1 with beta = 0.7.)
* Prox-DSGT, the tracker of (8) without the correction ``- grad F_j(x_j^t, xi_j^t)``: 6e-2 to 3e-1
  at round 2.
* DEEPSTORM, the prox taken before the step, ``prox_{alpha h}(x_i) - alpha y_i`` instead of
  ``prox_{alpha h}(x_i - alpha y_i)``: 7e-4 to 9e-3 at round 1.

A mistake in the fused kernel alone (the compiled ``tracking_steps`` updating ``y += beta g_new -
g``) fails the 16 numba DEPOSITUM cases with l1 and MCP, the ones that run it.
"""

from __future__ import annotations

import numpy as np
import pytest

from replay import (
    BACKENDS,
    BATCHES,
    LOSSES,
    PHIS,
    ROUNDS,
    assert_same_trajectory,
    every_case,
    federated_problem,
    fedopt_trajectory,
)

MOMENTUM_TYPES = ("polyak", "nesterov")
TOPOLOGY = "star"


# ---------------------------------------------------------------- the network and the oracles
def star_adjacency(n: int) -> np.ndarray:
    """Node 0 is the hub, joined to every other node."""
    A = np.zeros((n, n), dtype=bool)
    A[0, 1:] = A[1:, 0] = True
    return A


def metropolis_weights(adjacency: np.ndarray) -> np.ndarray:
    """Metropolis weights, a mixing matrix of Assumption 2: ``w_ij = 1 / (1 + max(d_i, d_j))`` on an
    edge, ``w_ii = 1 - sum_{j != i} w_ij``."""
    n = len(adjacency)
    degree = adjacency.sum(axis=1)
    W = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            if i != j and adjacency[i, j]:
                W[i, j] = 1.0 / (1.0 + max(degree[i], degree[j]))
        W[i, i] = 1.0 - W[i].sum()
    return W


class Nodes:
    """The n nodes' oracles as the references call them, each call counted.

    ``grad(i, x, rows)`` is ``grad (n w_i f_i)(x)`` on ``rows`` (None: all of node i's data);
    ``prox`` is ``prox_{step phi}``; ``gossip(V)`` is node i's ``sum_{j in N_i u {i}} w_ij v_j``
    for every i, each neighbour j sending its p-vector to i.
    """

    def __init__(self, clients, phi, W):
        self.clients, self.phi, self.W = clients, phi, W
        self.grads = self.proxes = self.floats = 0

    @property
    def n(self) -> int:
        return self.clients.n

    def grad(self, i, x, rows):
        self.grads += 1
        return (self.n * self.clients.w[i]) * self.clients.grad(i, x, rows)

    def prox(self, v, step):
        self.proxes += 1
        return self.phi.prox(v, step)

    def gossip(self, V):
        mixed = []
        for i in range(self.n):
            total = self.W[i, i] * V[i]
            for j in range(self.n):
                if j != i and self.W[i, j] > 0:
                    total = total + self.W[i, j] * V[j]
                    self.floats += len(V[j])
            mixed.append(total)
        return mixed

    def costs(self) -> tuple[int, int, int]:
        return self.grads, self.proxes, self.floats


class Minibatches:
    """fedopt's recorded minibatches, one ``(n, b)`` array per iteration in the order they were drawn
    (fedopt draws the local iterations of a period in one ``(steps, n, b)`` call); None: full gradients."""

    def __init__(self, draws, batch_size, n):
        self.draws, self.batch_size, self.n, self.queue = draws, batch_size, n, []

    def next(self):
        if self.batch_size is None:
            return [None] * self.n
        if not self.queue:
            drawn = self.draws.take("sample_rows")
            self.queue = list(drawn) if drawn.ndim == 3 else [drawn]
        return self.queue.pop(0)


def snapshot(nodes: Nodes, **arrays) -> dict:
    """The per-node arrays of one round as ``(n, p)`` arrays, the network average ``x`` and the costs so far."""
    stacked = {name: np.array(value) for name, value in arrays.items()}
    return {"x": stacked["X"].mean(axis=0), "vars": stacked, "costs": nodes.costs()}


# ---------------------------------------------------------------- the references
def depositum_reference(nodes: Nodes, draws, x0, *, rounds, lr, momentum, momentum_type, comm_period, batch_size,
                        tracking_rate=1.0, tracking=True):
    """DEPOSITUM, Algorithm 1, for each client i; with ``tracking=False`` the ablation of Sec. IV.A.

    Iterations t = 0, 1, ..., rounds * T0; fedopt's round 0 is iteration t = 0 and its round r ends
    with iteration t = r T0, the r-th in ``T = {T0, 2 T0, ...}`` (the one that gossips). Without
    tracking, "the momentum updates (10) and (11) of DEPOSITUM directly utilizes g instead of y and
    removes (12b)".
    """
    n, alpha, beta, gamma, T0 = nodes.n, lr, tracking_rate, momentum, comm_period
    batches = Minibatches(draws, batch_size, n)
    zero = np.zeros_like(x0)
    x = [x0.copy() for _ in range(n)]  # x_i^0 = x_0
    mu, nu, y, g = [zero] * n, [zero] * n, [zero] * n, [zero] * n  # mu_i^0 = nu_i^0 = y_i^0 = g_i^0 = 0
    rounds_out = []
    for t in range(rounds * T0 + 1):
        communicate = t >= T0 and t % T0 == 0  # t in T
        tracked = y if tracking else g
        for i in range(n):
            if momentum_type == "polyak":  # OPTION I, (10)
                nu[i] = gamma * nu[i] + (1 - gamma) * tracked[i]
            else:  # OPTION II, (11a) and (11b)
                mu[i] = gamma * mu[i] + (1 - gamma) * tracked[i]
                nu[i] = gamma * mu[i] + (1 - gamma) * tracked[i]
        z = [nodes.prox(x[i] - alpha * nu[i], alpha) for i in range(n)]  # prox_h^{1/alpha}{x_i^t - alpha nu_i^{t+1}}
        x = nodes.gossip(z) if communicate else z  # (12a): x^{t+1} = W^t prox(...)
        rows = batches.next()
        g_new = [nodes.grad(i, x[i], rows[i]) for i in range(n)]  # g_i^{t+1} at x_i^{t+1}
        if tracking:
            u = [y[i] + beta * g_new[i] - beta * g[i] for i in range(n)]
            y = nodes.gossip(u) if communicate else u  # (12b): y^{t+1} = W^t (y^t + beta g^{t+1} - beta g^t)
        g = g_new
        if t % T0 == 0:  # the end of fedopt's round t / T0
            arrays = dict(X=x, NU=nu, G=g, **(dict(Y=y) if tracking else {}))
            if momentum_type == "nesterov":
                arrays["MU"] = mu
            rounds_out.append(snapshot(nodes, **arrays))
    assert draws.exhausted()
    return rounds_out


def prox_dsgt_reference(nodes: Nodes, draws, x0, *, rounds, lr, batch_size):
    """Prox-DSGT, eq. (7) with the adapt-then-combine tracker (8), ``y_i^0 = grad F_i(x_i^0, xi_i^0)``.

    The paper's (8) writes ``grad F_i`` inside the sum over j; node j's own gradients are meant.
    """
    n, alpha = nodes.n, lr
    batches = Minibatches(draws, batch_size, n)
    x = [x0.copy() for _ in range(n)]
    rows = batches.next()
    g = [nodes.grad(i, x[i], rows[i]) for i in range(n)]
    y = list(g)
    rounds_out = [snapshot(nodes, X=x, Y=y, G=g)]
    for _ in range(rounds):
        x = nodes.gossip([nodes.prox(x[j] - alpha * y[j], alpha) for j in range(n)])  # (7)
        rows = batches.next()
        g_new = [nodes.grad(i, x[i], rows[i]) for i in range(n)]  # grad F_i(x_i^{t+1}, xi_i^{t+1})
        y = nodes.gossip([y[j] + g_new[j] - g[j] for j in range(n)])  # (8)
        g = g_new
        rounds_out.append(snapshot(nodes, X=x, Y=y, G=g))
    assert draws.exhausted()
    return rounds_out


def deepstorm_reference(nodes: Nodes, draws, x0, *, rounds, lr, momentum, batch_size, init_batch_size):
    """DEEPSTORM with one gossip of x and one of y per step and constant steps (``deepstormv2`` of
    Mancino-Ball et al.'s code, restated in the DEPOSITUM spec, Sec. 3.3); ``momentum`` is ``1 - beta``.

    Start: ``d_i^0`` a gradient on the initial batch, ``y^0 = W d^0``. Step: ``x_i <- sum_j w_ij x_j``;
    ``x_i <- prox_{alpha h}(x_i - alpha y_i)``; STORM on one minibatch xi_i,
    ``d_i <- grad F_i(x_i; xi_i) + (1 - beta)(d_i - grad F_i(x_i^prev; xi_i))``;
    ``y <- W (y + d^new - d)``; ``x^prev <- x``.
    """
    n, alpha = nodes.n, lr
    batches = Minibatches(draws, batch_size, n)
    x = [x0.copy() for _ in range(n)]
    init_rows = [None] * n if init_batch_size is None else draws.take("sample_rows")
    d = [nodes.grad(i, x[i], init_rows[i]) for i in range(n)]
    y = nodes.gossip(d)
    rounds_out = [snapshot(nodes, X=x, D=d, Y=y)]
    for _ in range(rounds):
        x_prev = x
        mixed = nodes.gossip(x_prev)
        x = [nodes.prox(mixed[i] - alpha * y[i], alpha) for i in range(n)]
        rows = batches.next()
        d_new = [nodes.grad(i, x[i], rows[i]) + momentum * (d[i] - nodes.grad(i, x_prev[i], rows[i]))
                 for i in range(n)]
        y = nodes.gossip([y[i] + d_new[i] - d[i] for i in range(n)])
        d = d_new
        rounds_out.append(snapshot(nodes, X=x, D=d, Y=y))
    assert draws.exhausted()
    return rounds_out


# ---------------------------------------------------------------- the comparison
def compare(run, reference):
    """fedopt's network average and per-node arrays against the reference's at every round, and its costs."""
    assert_same_trajectory([r["x"] for r in reference], run.x)
    names = set(reference[0]["vars"])
    assert names <= set(run.vars[0]), f"fedopt keeps {sorted(run.vars[0])}, the reference {sorted(names)}"
    for name in sorted(names):
        assert_same_trajectory([r["vars"][name] for r in reference], [v[name] for v in run.vars], what=name)
    history = run.result.history
    assert list(history["round"]) == list(range(len(reference)))
    counts = np.array([r["costs"] for r in reference])
    np.testing.assert_array_equal(history["grad_evals"], counts[:, 0])
    np.testing.assert_array_equal(history["prox_evals"], counts[:, 1])
    np.testing.assert_array_equal(history["floats_up"], counts[:, 2])
    np.testing.assert_array_equal(history["floats_down"], counts[:, 2])


def setup(loss, phi, backend):
    """The problem, the reference's oracles on the star, the weights ``w_0`` passed to ``fedopt.run`` and
    the start ``x_0 = prox_{phi}(w_0)`` (run's start at its default metric_gamma = 1) that every method
    reports at round 0."""
    problem, clients = federated_problem(loss, backend)
    nodes = Nodes(clients, phi, metropolis_weights(star_adjacency(clients.n)))
    w0 = np.linspace(-0.4, 0.6, problem.n_params)
    return problem, nodes, w0, phi.prox(w0, 1.0)


def pre_prox(w0, x0, alpha):
    """DEPOSITUM's ``x_i^0``: ``x_0 + alpha s`` with ``s = (w_0 - x_0) / 1`` the subgradient of phi at ``x_0``
    that run's start gives, so that iteration t = 0's prox with the step alpha returns ``x_0``."""
    return x0 + alpha * (w0 - x0)


def check_network(run, nodes: Nodes):
    """fedopt gossips with the reference's matrix."""
    np.testing.assert_allclose(run.result.state.vars["topology"].mixing, nodes.W, rtol=0, atol=1e-15)


def fused_calls(problem):
    """The outcome of each of fedopt's calls of the fused ``tracking_steps`` (made for a separable prox only)."""
    calls = []
    fused = problem.fused_tracking_steps

    def recording(*args, **phases):
        calls.append(fused(*args, **phases))
        return calls[-1]

    problem.fused_tracking_steps = recording
    return calls


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("batch_size", BATCHES)
@pytest.mark.parametrize("momentum_type", MOMENTUM_TYPES)
@pytest.mark.parametrize("phi", PHIS)
@pytest.mark.parametrize("loss", LOSSES)
def test_depositum_follows_algorithm_1(loss, phi, momentum_type, batch_size, backend):
    problem, nodes, w0, x0 = setup(loss, phi, backend)
    hp = dict(lr=0.1, tracking_rate=0.7, momentum=0.6, momentum_type=momentum_type, comm_period=3,
              batch_size=batch_size)
    calls = fused_calls(problem)
    run = fedopt_trajectory("depositum", problem, phi.regularizer, rounds=ROUNDS, x0=w0, topology=TOPOLOGY, **hp)
    check_network(run, nodes)
    compare(run, depositum_reference(nodes, run.draws, pre_prox(w0, x0, hp["lr"]), rounds=ROUNDS, **hp))
    np.testing.assert_allclose(run.x[0], x0, rtol=1e-12, atol=1e-14)  # round 0 reports the start
    # the local iterations run in the fused ``tracking_steps`` (the NumPy reference kernel on numpy, the
    # compiled one on numba) for a separable prox (l1, MCP), and array-wise for group lasso
    assert calls == ([] if phi.name == "group_lasso" else [True] * 2 * ROUNDS)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("batch_size", BATCHES)
@pytest.mark.parametrize("momentum_type", MOMENTUM_TYPES)
@pytest.mark.parametrize("phi", PHIS)
@pytest.mark.parametrize("loss", LOSSES)
def test_depositum_without_tracking_follows_section_iv_a(loss, phi, momentum_type, batch_size, backend):
    problem, nodes, w0, x0 = setup(loss, phi, backend)
    hp = dict(lr=0.1, momentum=0.6, momentum_type=momentum_type, comm_period=3, batch_size=batch_size)
    calls = fused_calls(problem)
    run = fedopt_trajectory("depositum-no-tracking", problem, phi.regularizer, rounds=ROUNDS, x0=w0,
                            topology=TOPOLOGY, **hp)
    check_network(run, nodes)
    compare(run, depositum_reference(nodes, run.draws, pre_prox(w0, x0, hp["lr"]), rounds=ROUNDS, tracking=False,
                                     **hp))
    assert calls == ([] if phi.name == "group_lasso" else [True] * 2 * ROUNDS)


@every_case()
def test_prox_dsgt_follows_equations_7_and_8(loss, phi, batch_size, backend):
    problem, nodes, w0, x0 = setup(loss, phi, backend)
    hp = dict(lr=0.1, batch_size=batch_size)
    run = fedopt_trajectory("prox-dsgt", problem, phi.regularizer, rounds=ROUNDS, x0=w0, topology=TOPOLOGY, **hp)
    check_network(run, nodes)
    compare(run, prox_dsgt_reference(nodes, run.draws, x0, rounds=ROUNDS, **hp))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("batch_size, init_batch_size", [(None, None), (3, 5)])
@pytest.mark.parametrize("phi", PHIS)
@pytest.mark.parametrize("loss", LOSSES)
def test_deepstorm_follows_its_single_gossip_variant(loss, phi, batch_size, init_batch_size, backend):
    problem, nodes, w0, x0 = setup(loss, phi, backend)
    hp = dict(lr=0.1, momentum=0.6, batch_size=batch_size, init_batch_size=init_batch_size)
    run = fedopt_trajectory("deepstorm", problem, phi.regularizer, rounds=ROUNDS, x0=w0, topology=TOPOLOGY, **hp)
    check_network(run, nodes)
    compare(run, deepstorm_reference(nodes, run.draws, x0, rounds=ROUNDS, **hp))
