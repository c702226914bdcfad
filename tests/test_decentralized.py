"""Decentralized methods: DEPOSITUM, its ablation, Prox-DSGT and DEEPSTORM.

Known answers (scikit-learn's Lasso), the spec's exact special cases and equivalences, backend
parity, costs, errors, and the built-in DEPOSITUM experiments.
"""

import itertools
import json

import numpy as np
import pytest
from sklearn.linear_model import Lasso

import fedopt
from fedopt import sweep
from fedopt.algorithms import Depositum
from fedopt.datasets import from_client_ids, partition
from fedopt.problems import LeastSquares, Logistic
from fedopt.regularizers import L1, MCP, Zero

DECENTRALIZED = ["depositum", "depositum-no-tracking", "prox-dsgt", "deepstorm"]
EXPERIMENTS = ["depositum_baselines", "depositum_comm_period", "depositum_momentum", "depositum_speedup",
               "depositum_topology"]


def regression(n_clients=8, n_samples=320, d=10, scheme="sorted", weights="samples", backend="numba", seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_samples, d))
    coef = np.where(np.arange(d) < 4, rng.normal(size=d) * 2, 0.0)
    y = X @ coef + 0.5 * rng.normal(size=n_samples)
    return LeastSquares(partition(X, y, n_clients, scheme, seed=seed), weights=weights, backend=backend)


def classification(n_clients=12, backend="numba"):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(360, 8))
    y = (X @ rng.normal(size=8) + 0.5 * rng.normal(size=360) > 0).astype(int)
    return Logistic(partition(X, y, n_clients, "sorted"), backend=backend)


def lasso(problem, lam):
    X, y = problem.dataset.X, problem.dataset.y
    return Lasso(alpha=lam, fit_intercept=False, tol=1e-13, max_iter=100_000).fit(X, y).coef_


def trajectory(method, problem, reg, rounds, **kw):
    """The reported models ``xbar`` after every round."""
    models = []
    fedopt.run(method, problem, reg, rounds=rounds, **kw,
               callback=lambda state, row: models.append(state.env.problem.backend.to_numpy(state.x).copy()))
    return np.array(models)


# ---------------------------------------------------------------- known answers
@pytest.mark.parametrize("momentum_type, comm_period, rounds", [("polyak", 5, 500), ("nesterov", 1, 300)])
def test_depositum_on_a_ring_reaches_the_scikit_learn_lasso_and_consensus(momentum_type, comm_period, rounds):
    problem, lam = regression(), 0.05
    result = fedopt.run("depositum", problem, L1(lam), rounds=rounds, lr=0.1, tracking_rate=1.0, momentum=0.5,
                        momentum_type=momentum_type, comm_period=comm_period, batch_size=None, topology="ring",
                        eval_every=rounds)
    expected = lasso(problem, lam)
    np.testing.assert_allclose(result.x, expected, atol=1e-9)
    assert set(np.flatnonzero(result.x)) == set(np.flatnonzero(expected))
    assert result.history["consensus"][-1] < 1e-20 and result.history["consensus"][0] == 0
    assert result.history["stationarity"][-1] < 1e-18


@pytest.mark.parametrize("method, extra", [("prox-dsgt", {}), ("deepstorm", {"momentum": 0.5})])
def test_prox_dsgt_and_deepstorm_reach_the_scikit_learn_lasso(method, extra):
    problem, lam = regression(), 0.05
    result = fedopt.run(method, problem, L1(lam), rounds=600, lr=0.1, batch_size=None, topology="torus",
                        eval_every=600, **extra)
    np.testing.assert_allclose(result.x, lasso(problem, lam), atol=1e-9)
    assert result.history["consensus"][-1] < 1e-20


def test_unequal_client_weights_are_honoured_through_rescaled_node_losses():
    """Gossip averages nodes uniformly; node i works with n w_i f_i so that the pooled Lasso is still the answer."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 10))
    y = X @ np.where(np.arange(10) < 4, 1.5, 0.0) + 0.5 * rng.normal(size=300)
    clients = np.repeat(np.arange(6), [10, 20, 30, 50, 80, 110])  # sorted rows: heterogeneous and unequal
    problem, lam = LeastSquares(from_client_ids(X, y, clients), weights="samples", backend="numba"), 0.05
    lr = 0.5 / (problem.smoothness() * problem.weights * problem.n_clients).max()
    result = fedopt.run("depositum", problem, L1(lam), rounds=400, lr=lr, comm_period=2, batch_size=None,
                        topology="exponential", eval_every=400)
    np.testing.assert_allclose(result.x, lasso(problem, lam), atol=1e-8)


def test_without_gradient_tracking_heterogeneous_nodes_stall_away_from_the_solution():
    problem, reg = regression(), L1(0.05)
    kw = dict(rounds=300, lr=0.1, momentum=0.5, comm_period=5, batch_size=None, eval_every=150)
    tracked = fedopt.run("depositum", problem, reg, **kw).history
    ablation = fedopt.run("depositum-no-tracking", problem, reg, **kw).history
    assert tracked["stationarity"][-1] < 1e-18
    assert ablation["stationarity"][-1] > 1e-4 and ablation["consensus"][-1] > 1e-3
    np.testing.assert_allclose(ablation["stationarity"][-1], ablation["stationarity"][-2], rtol=1e-6)  # a fixed point


# ---------------------------------------------------------------- exact special cases of the spec
def test_complete_graph_with_one_step_periods_is_centralized_proximal_gradient():
    """W = 11^T/n and T0 = 1: in consensus from t = 2 on, then x <- prox_{alpha h}(x - alpha beta grad f(x))."""
    problem, reg, alpha, beta = regression(weights="uniform"), L1(0.05), 0.1, 0.5
    xs = trajectory("depositum", problem, reg, 12, lr=alpha, tracking_rate=beta, momentum=0.0, comm_period=1,
                    batch_size=None, topology="complete")
    for x, x_next in itertools.pairwise(xs[2:]):
        np.testing.assert_allclose(x_next, reg.prox(x - alpha * beta * problem.grad(x), alpha), rtol=1e-12, atol=1e-14)


def test_complete_graph_without_regularizer_is_centralized_heavy_ball():
    problem, alpha, beta, gamma = regression(weights="uniform"), 0.1, 0.7, 0.6
    xs = trajectory("depositum", problem, Zero(), 10, lr=alpha, tracking_rate=beta, momentum=gamma, comm_period=1,
                    batch_size=None, topology="complete")
    x = np.zeros(problem.n_params)  # t = 0: nu^1 = 0, so x^1 = x^0
    nu, expected = np.zeros_like(x), [x]
    for _ in range(10):  # x^{t+1} = x^t - alpha nu^{t+1}, nu^{t+1} = gamma nu^t + (1 - gamma) beta grad f(x^t)
        nu = gamma * nu + (1 - gamma) * beta * problem.grad(x)
        x = x - alpha * nu
        expected.append(x)
    np.testing.assert_allclose(xs, expected, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("momentum_type", ["polyak", "nesterov"])
def test_tracking_rate_is_a_rescaling_of_step_and_regularizer(momentum_type):
    """Spec I4: DEPOSITUM(alpha, beta, h) and DEPOSITUM(alpha beta, 1, h / beta) walk the same x-trajectory."""
    problem, alpha, beta, lam = classification(), 0.4, 0.5, 0.02
    kw = dict(momentum=0.7, momentum_type=momentum_type, comm_period=3, batch_size=4, seed=5, topology="star")
    a = trajectory("depositum", problem, L1(lam), 8, lr=alpha, tracking_rate=beta, **kw)
    b = trajectory("depositum", problem, L1(lam / beta), 8, lr=alpha * beta, tracking_rate=1.0, **kw)
    c = trajectory("depositum", problem, L1(lam), 8, lr=alpha, tracking_rate=beta, rescaled_prox=True, **kw)
    d = trajectory("depositum", problem, L1(lam), 8, lr=alpha * beta, tracking_rate=1.0, **kw)
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(c, d, rtol=1e-12, atol=1e-14)
    assert np.abs(a - c).max() > 1e-3  # the paper's rule and the rescaled prox differ


def test_first_iteration_and_the_tracking_invariant():
    """t = 0 is x_i = prox(x_0), y_i = beta g_i, no gossip; and ybar = beta gbar holds after every round."""
    problem, reg, beta = classification(), L1(0.05), 0.3
    method = Depositum(lr=0.5, tracking_rate=beta, comm_period=2, batch_size=None, topology="ring")
    x0 = np.linspace(-1, 1, problem.n_params)
    state = method.init(problem, reg, np.random.default_rng(0), x0)
    X, Y, G = state.vars["X"], state.vars["Y"], state.vars["G"]
    np.testing.assert_allclose(X, np.broadcast_to(reg.prox(x0, 0.5), X.shape))
    np.testing.assert_allclose(G, problem.client_grad(X))
    np.testing.assert_allclose(Y, beta * G)
    for _ in range(4):
        state = method.round(state)
        np.testing.assert_allclose(state.vars["Y"].mean(axis=0), beta * state.vars["G"].mean(axis=0), atol=1e-14)


def test_prox_dsgt_is_depositum_without_momentum_from_the_same_start():
    """Both report the run's x_0 at round 0: DEPOSITUM's iteration t = 0 takes the prox of its pre-prox point."""
    problem, reg, alpha = classification(), L1(0.03), 0.4
    kw = dict(lr=alpha, batch_size=5, seed=2, topology="ring")
    x0 = np.linspace(-0.5, 0.5, problem.n_params)
    dep = trajectory("depositum", problem, reg, 6, momentum=0.0, tracking_rate=1.0, comm_period=1, x0=x0, **kw)
    dsgt = trajectory("prox-dsgt", problem, reg, 6, x0=x0, **kw)
    np.testing.assert_allclose(dep, dsgt, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(dep[0], reg.prox(x0, 1.0), rtol=1e-12, atol=1e-14)  # x_0 = prox_{metric_gamma phi}(w_0)


def test_rounds_do_not_change_the_state_they_are_given():
    problem = classification()
    method = Depositum(batch_size=4, comm_period=2)
    state = method.init(problem, L1(0.01), np.random.default_rng(0))
    before = {k: v.copy() for k, v in state.vars.items() if isinstance(v, np.ndarray)}
    method.round(state)
    for k, v in before.items():
        np.testing.assert_array_equal(state.vars[k], v)


# ---------------------------------------------------------------- parity, costs, errors
@pytest.mark.parametrize("method, extra", [
    ("depositum", {"momentum_type": "nesterov", "comm_period": 3}), ("depositum-no-tracking", {"comm_period": 2}),
    ("prox-dsgt", {}), ("deepstorm", {"init_batch_size": 16}),
])
def test_numpy_and_numba_backends_walk_the_same_trajectory(method, extra):
    runs = [trajectory(method, classification(backend=b), MCP(0.02, gamma=4.0), 6, lr=0.3, batch_size=6, seed=9,
                       topology="ring", **extra) for b in ("numpy", "numba")]
    np.testing.assert_allclose(runs[0], runs[1], rtol=1e-10, atol=1e-12)
    assert np.abs(runs[0][-1] - runs[0][0]).max() > 1e-3


@pytest.mark.gpu
@pytest.mark.parametrize("topology", ["ring", "complete"])  # sparse (cupyx) and dense (cuBLAS) gossip
@pytest.mark.parametrize("method", DECENTRALIZED)
def test_gpu_backend_walks_the_numba_trajectory(method, topology):
    runs = [trajectory(method, classification(backend=b), MCP(0.02, gamma=4.0), 5, lr=0.3, batch_size=6, seed=9,
                       topology=topology) for b in ("numba", "gpu")]
    np.testing.assert_allclose(runs[0], runs[1], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("method, grads, proxes, gossips, start", [
    ("depositum", 5, 5, 2, (1, 1, 0)), ("depositum-no-tracking", 5, 5, 1, (1, 1, 0)),
    ("prox-dsgt", 1, 1, 2, (1, 0, 0)), ("deepstorm", 2, 1, 2, (1, 0, 1)),
])
def test_costs_per_round(method, grads, proxes, gossips, start):
    problem = classification()
    n, p = problem.n_clients, problem.n_params
    period = {"comm_period": 5} if method.startswith("depositum") else {}
    h = fedopt.run(method, problem, L1(0.01), rounds=3, lr=0.1, batch_size=4, topology="star", **period).history
    sent = p * 2 * (n - 1)  # floats of one gossip on a star: sum of degrees = 2 (n - 1)
    np.testing.assert_array_equal(h["grad_evals"], n * (start[0] + grads * h["round"]))
    np.testing.assert_array_equal(h["prox_evals"], n * (start[1] + proxes * h["round"]))
    np.testing.assert_array_equal(h["floats_up"], sent * (start[2] + gossips * h["round"]))
    np.testing.assert_array_equal(h["floats_down"], h["floats_up"])
    np.testing.assert_allclose(h["floats_per_node"], h["floats_up"] / n)
    assert (h["objective_spread"] >= 0).all() and h["objective_spread"][-1] > 0


@pytest.mark.parametrize("kwargs, message", [
    ({"comm_period": 0}, r"comm_period \(T0\) must be an integer >= 1"),
    ({"comm_period": "ten"}, r"comm_period \(T0\) must be an integer >= 1, got 'ten'"),  # int() named nothing
    ({"momentum": 1.0}, r"momentum \(gamma\) must be in \[0, 1\)"),
    ({"momentum": "high"}, r"momentum \(gamma\) must be in \[0, 1\), got 'high'"),
    ({"momentum_type": "heavy"}, "momentum_type='heavy' is unknown; choose 'polyak'"),
    ({"tracking_rate": 0.0}, "tracking_rate must be a finite number > 0"),
    ({"lr": -1.0}, "lr must be a finite number > 0"),
    ({"topology": "grid"}, "topology='grid' is unknown; choose one of 'ring'"),
    ({"topology": "erdos_renyi"}, "needs edge_prob"),
    ({"mixing": "uniform"}, "mixing='uniform' is unknown"),
    ({"topology": np.full((3, 3), 1 / 3)}, "topology has 3 nodes but the problem has 8 clients"),
    ({"topology": "torus", "edge_prob": 0.5, "topology_seed": 1.5}, "topology_seed must be an integer"),
    ({"topology_seed": "one"}, "topology_seed must be an integer >= 0, got 'one'"),
    ({"lr": 4.0}, r"lr \(the prox step alpha\)=4 is too large"),
    ({"lr": 1.0, "tracking_rate": 4.0, "rescaled_prox": True}, r"lr \* tracking_rate \(the prox step\)=4 is too large"),
])
def test_invalid_hyperparameters_are_refused_with_the_argument_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        fedopt.run("depositum", regression(), MCP(0.1, gamma=3.0), rounds=1, **kwargs)


def test_the_ablation_refuses_a_tracking_rate_it_would_not_use():
    """Sec. IV.A: the ablation's momentum reads g itself; beta scales only the tracker update (12b)."""
    with pytest.raises(ValueError, match=r"tracking_rate \(beta\) scales only the tracker update \(12b\)"):
        fedopt.run("depositum-no-tracking", regression(), L1(0.1), rounds=1, tracking_rate=0.5)


def test_deepstorm_refuses_a_momentum_of_one():
    with pytest.raises(ValueError, match=r"momentum \(1 - beta\) must be in \[0, 1\)"):
        fedopt.run("deepstorm", regression(), L1(0.1), rounds=1, momentum=1.0)
    with pytest.raises(ValueError, match=r"init_batch_size must be an integer >= 1, or None .*, got 'all'"):
        fedopt.run("deepstorm", regression(), L1(0.1), rounds=1, init_batch_size="all")


def test_topology_objects_and_matrices_are_accepted():
    from fedopt.algorithms.decentralized import topology as T

    problem = regression()
    W = T.make("ring", 8).mixing
    by_name = fedopt.run("prox-dsgt", problem, L1(0.05), rounds=5, batch_size=None)
    by_matrix = fedopt.run("prox-dsgt", problem, L1(0.05), rounds=5, batch_size=None, topology=W)
    by_object = fedopt.run("prox-dsgt", problem, L1(0.05), rounds=5, batch_size=None, topology=T.make("ring", 8))
    np.testing.assert_array_equal(by_name.x, by_matrix.x)
    np.testing.assert_array_equal(by_name.x, by_object.x)
    assert by_name.state.vars["topology"].lam == pytest.approx(T.make("ring", 8).lam)


def test_a_resumed_run_gossips_over_the_network_it_is_given():
    """resume= used to keep the state's graph: a run resumed with topology="complete" walked the ring's
    trajectory while its result.algorithm reported the complete graph."""
    problem = regression()
    kw = {"lr": 0.05, "batch_size": None}
    first = fedopt.run("prox-dsgt", problem, L1(0.05), rounds=3, topology="ring", **kw)
    complete = fedopt.run("prox-dsgt", problem, L1(0.05), rounds=3, topology="complete", resume=first.state, **kw)
    assert complete.state.vars["topology"].name == "complete" and first.state.vars["topology"].name == "ring"
    assert complete.history["consensus"][0] > 1e-3  # the ring's nodes, as they were
    assert complete.history["consensus"][1:].max() < 1e-20  # the complete graph averages the nodes in one gossip
    ring = fedopt.run("prox-dsgt", problem, L1(0.05), rounds=3, topology="ring", resume=first.state, **kw)
    np.testing.assert_array_equal(ring.x, fedopt.run("prox-dsgt", problem, L1(0.05), rounds=6, **kw).x)


@pytest.mark.parametrize("momentum_type", ["polyak", "nesterov"])
def test_a_run_resumed_with_a_new_tracking_rate_solves_the_new_problem(momentum_type):
    """resume= used to keep y = beta_0 g with the new beta: ybar - beta gbar = (beta_0 - beta) gbar for
    good, and the run settled away from the stationary point. y, nu, mu scale to the new beta, so by
    spec I4 DEPOSITUM(alpha, beta, h) resumed walks DEPOSITUM(alpha beta, 1, h / beta) resumed."""
    problem, beta, lam = classification(), 0.5, 0.02
    kw = dict(momentum=0.7, momentum_type=momentum_type, comm_period=3, batch_size=4, seed=5, topology="star")
    first = fedopt.run("depositum", problem, L1(lam), rounds=3, lr=0.4, tracking_rate=1.0, **kw)
    a = trajectory("depositum", problem, L1(lam), 6, lr=0.4, tracking_rate=beta, resume=first.state, **kw)
    b = trajectory("depositum", problem, L1(lam / beta), 6, lr=0.4 * beta, tracking_rate=1.0, resume=first.state, **kw)
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    resumed = fedopt.run("depositum", problem, L1(lam), rounds=2, lr=0.4, tracking_rate=beta, resume=first.state, **kw)
    Y, G = resumed.state.vars["Y"], resumed.state.vars["G"]
    np.testing.assert_allclose(Y.mean(axis=0), beta * G.mean(axis=0), atol=1e-14)  # spec I1 with the new beta
    # full gradients, phi = 0: the resumed run reaches the least-squares solution
    problem = regression()
    g0 = problem.grad(np.zeros(problem.n_params))
    H = np.column_stack([problem.grad(e) - g0 for e in np.eye(problem.n_params)])
    kw = dict(lr=0.05, batch_size=None, comm_period=2, momentum=0.5, momentum_type=momentum_type)
    first = fedopt.run("depositum", problem, Zero(), rounds=2, tracking_rate=1.0, **kw)
    resumed = fedopt.run("depositum", problem, Zero(), rounds=2000, tracking_rate=beta, resume=first.state,
                         eval_every=2000, **kw)
    np.testing.assert_allclose(resumed.x, np.linalg.solve(H, -g0), rtol=0, atol=1e-10)


def test_batched_runs_with_their_own_tracking_rates_resume_as_single_runs():
    problem, reg = regression(), L1(0.01)
    kw = dict(rounds=3, batch_size=4, comm_period=2, lr=0.05)
    batched = fedopt.run_batch("depositum", problem, reg, seeds=[0, 1], tracking_rate=[0.5, 1.0], **kw)
    for seed, beta, result in zip([0, 1], [0.5, 1.0], batched, strict=True):
        single = fedopt.run("depositum", problem, reg, seed=seed, tracking_rate=beta, **kw)
        assert result.state.vars["tracking_rate"] == single.state.vars["tracking_rate"] == beta
        np.testing.assert_array_equal(
            fedopt.run("depositum", problem, reg, seed=seed, tracking_rate=0.7, resume=result.state, **kw).x,
            fedopt.run("depositum", problem, reg, seed=seed, tracking_rate=0.7, resume=single.state, **kw).x)


def test_a_uniform_run_batched_with_sample_weighted_ones_is_bit_for_bit_a_single_run():
    """n w_i of 1/n rounds to 1 - 1e-16 for n = 49: a single uniform run skips that scale, and a batch that
    scaled every run once one was weighted moved the uniform run's last bits."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(980, 8))
    data = partition(X, (X[:, 0] > 0).astype(int), 49, "dirichlet", alpha=50.0, seed=0)
    uniform, samples = (Logistic(data, weights=weights) for weights in ("uniform", "samples"))
    assert np.abs(uniform.weights * 49 - 1).max() > 0 and np.ptp(samples.weights) > 0
    kw = dict(rounds=4, lr=0.05, batch_size=4)
    batched = fedopt.run_batch("prox-dsgt", [uniform, samples], L1(0.01), seeds=[0, 1], **kw)
    for problem, seed, result in zip([uniform, samples], [0, 1], batched, strict=True):
        np.testing.assert_array_equal(result.x, fedopt.run("prox-dsgt", problem, L1(0.01), seed=seed, **kw).x)


def test_a_run_resumed_with_the_other_momentum_type_takes_its_average_of_y():
    """Polyak's nu (10) and Nesterov's mu (11a) are the same average of y: resuming a Polyak run with
    momentum_type="nesterov" used to fail with KeyError: 'MU'; it takes mu = nu, and the way back nu = mu."""
    problem, reg = regression(), L1(0.01)
    kw = dict(lr=0.05, batch_size=None, comm_period=2)
    polyak = fedopt.run("depositum", problem, reg, rounds=3, **kw)
    nesterov = Depositum(momentum_type="nesterov", **kw)
    state = nesterov.resume(polyak.state)
    np.testing.assert_array_equal(state.vars["MU"], polyak.state.vars["NU"])
    resumed = fedopt.run("depositum", problem, reg, rounds=3, momentum_type="nesterov", resume=polyak.state, **kw)
    np.testing.assert_array_equal(resumed.x, fedopt.run("depositum", problem, reg, rounds=3, momentum_type="nesterov",
                                                        resume=state, **kw).x)
    back = Depositum(**kw).resume(resumed.state)
    assert "MU" not in back.vars
    np.testing.assert_array_equal(back.vars["NU"], resumed.state.vars["MU"])
    # both reach the fixed point of a fresh run
    fresh = fedopt.run("depositum", problem, reg, rounds=1500, momentum_type="nesterov", **kw)
    resumed = fedopt.run("depositum", problem, reg, rounds=1500, momentum_type="nesterov", resume=polyak.state, **kw)
    np.testing.assert_allclose(resumed.x, fresh.x, rtol=0, atol=1e-10)


# ---------------------------------------------------------------- experiments
@pytest.mark.parametrize("name", EXPERIMENTS)
def test_depositum_experiments_load_and_expand(name):
    exp = sweep.load_experiment(name)
    assert exp.title and exp.from_paper and exp.defaults
    specs = exp.expand()
    assert specs and {s.config["algorithm"]["name"] for s in specs} & set(DECENTRALIZED)


def test_the_speedup_experiment_takes_t_as_the_last_iteration_index():
    """Round 0 is iteration t = 0 and round r ends with t = r T0: the Corollary-1 T is rounds * T0."""
    run = sweep.load_experiment("depositum_speedup").run
    rounds, T0 = 3, run["algorithm"]["comm_period"]
    problem = regression(n_clients=4)
    grads = fedopt.run("depositum", problem, L1(0.01), rounds=rounds, comm_period=T0, batch_size=None,
                       eval_every=rounds).history["grad_evals"][-1]
    assert grads == problem.n_clients * (rounds * T0 + 1)  # T + 1 iterations t = 0, ..., T
    assert run["params"]["T"] == run["rounds"] * T0


def test_the_topology_experiment_runs_end_to_end_at_tiny_size(tmp_path):
    exp = sweep.load_experiment("depositum_topology").shortened(rounds=2, seeds=1, values=4)
    with sweep.Store(tmp_path / "s.db") as store:
        summary = sweep.run_sweep(exp, store, executor="serial")
        members = list(store.members(exp.name))
        assert summary.executed == len({m["key"] for m in members}) >= 4  # the 16-node ring is in both grids
        assert all(m["status"] == "done" for m in members)
        assert {m["config"]["algorithm"]["topology"] for m in members} >= {"ring", "star", "complete", "torus"}
        assert all("consensus" in m["history"] for m in members)
        with open(tmp_path / "log", "w") as log:
            result = sweep.report(store, out=tmp_path / "out", plots=False, stream=log)
    json.dumps([str(s) for s in result["slopes"]])


@pytest.mark.parametrize("method, momentum_type", [("depositum", "polyak"), ("depositum", "nesterov"),
                                                   ("depositum-no-tracking", "polyak")])
@pytest.mark.parametrize("batch_size", [6, None], ids=["minibatch", "full"])
@pytest.mark.parametrize("regularizer", [L1(0.05), Zero()], ids=["l1", "zero"])
def test_depositum_fused_local_iterations_equal_the_step_by_step_ones(method, momentum_type, batch_size, regularizer,
                                                                     monkeypatch):
    """The iterations between gossips run as one ``tracking_steps`` call on the CPU; on weighted
    nodes, with an l1 prox and with none, they walk the step-by-step trajectory (and the NumPy reference's)."""
    kw = dict(rounds=4, lr=0.05, momentum=0.6, momentum_type=momentum_type, comm_period=4, batch_size=batch_size,
              seed=2, **({"tracking_rate": 0.7} if method == "depositum" else {}))
    def problem(backend="numba"):  # 8 nodes of 20 to 60 samples: weights n w_i from 0.5 to 1.5
        rng = np.random.default_rng(3)
        X = rng.normal(size=(320, 10))
        y = X @ rng.normal(size=10) + 0.5 * rng.normal(size=320)
        clients = np.repeat(np.arange(8), [20, 60, 30, 50, 40, 45, 35, 40])
        return LeastSquares(from_client_ids(X, y, clients), weights="samples", backend=backend)

    fused_problem = problem()
    calls = []
    kernel = fused_problem.fused_tracking_steps
    monkeypatch.setattr(fused_problem, "fused_tracking_steps",
                        lambda *a, **kw: calls.append(kernel(*a, **kw)) or calls[-1])
    fused = trajectory(method, fused_problem, regularizer, **kw)
    assert len(calls) == 2 * 4 and all(calls)  # a round: up to the gossip of x, then the gradient
    stepwise_problem = problem()
    monkeypatch.setattr(stepwise_problem, "fused_tracking_steps", lambda *args, **phases: False)
    stepwise = trajectory(method, stepwise_problem, regularizer, **kw)
    reference = trajectory(method, problem("numpy"), regularizer, **kw)
    assert np.abs(np.diff(fused, axis=0)).max() > 1e-3  # the rounds move
    np.testing.assert_allclose(fused, stepwise, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(fused, reference, rtol=1e-10, atol=1e-12)
