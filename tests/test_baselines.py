"""The remaining server-client baselines: Scaffnew, FedMiD, FedDA, FedDR and FedADMM.

Exact special cases, known answers, backend parity, the documented biases, costs and errors.
"""

import numpy as np
import pytest
from sklearn.linear_model import Lasso

import fedopt
from fedopt.datasets import partition
from fedopt.problems import LeastSquares, Logistic
from fedopt.regularizers import L1, MCP, ElasticNet, Zero

BASELINES = ["scaffnew", "fedmid", "fedda", "feddr", "fedadmm"]


def regression(n_clients=6, n_samples=240, d=12, scheme="sorted", seed=0, weights="samples", backend="numba"):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_samples, d))
    coef = np.where(np.arange(d) < 4, rng.normal(size=d) * 2, 0.0)
    y = X @ coef + 0.5 * rng.normal(size=n_samples)
    return LeastSquares(partition(X, y, n_clients, scheme, seed=seed), weights=weights, backend=backend)


def classification(n_clients=5, backend="numba", weights="samples"):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 8))
    y = (X @ rng.normal(size=8) + 0.5 * rng.normal(size=300) > 0).astype(int)
    return Logistic(partition(X, y, n_clients, "sorted"), weights=weights, backend=backend)


def smooth_or_l1(method, lam=0.01):
    """Scaffnew takes only smooth problems; the others get an l1 penalty."""
    return Zero() if method == "scaffnew" else L1(lam)


def steps(method, k):
    """``k`` local steps per round: Scaffnew's deterministic variant, or ``local_steps`` (the others)."""
    return {"comm_prob": 1 / k, "random_steps": False} if method == "scaffnew" else {"local_steps": k}


def gradient_descent(problem, step, rounds):
    x = np.zeros(problem.n_params)
    for _ in range(rounds):
        x = x - step * problem.grad(x)
    return x


# ---------------------------------------------------------------- exact special cases
@pytest.mark.parametrize("random_steps", [True, False])
def test_scaffnew_communicating_after_every_step_is_gradient_descent(random_steps):
    problem, step = regression(weights="uniform"), 0.05
    result = fedopt.run("scaffnew", problem, Zero(), rounds=7, comm_prob=1.0, random_steps=random_steps,
                        lr_local=step, batch_size=None, x0=np.zeros(problem.n_params))
    np.testing.assert_allclose(result.x, gradient_descent(problem, step, 7), rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(result.history["grad_evals"], result.history["round"] * problem.n_clients)


def test_deterministic_scaffnew_is_fedcanon_without_regularizer():
    """With K = 1/p local steps, Scaffnew's control step p/beta = 1/(beta K) is FedCanon's (spec 2.7, item 2)."""
    problem = regression()
    kw = dict(rounds=8, lr_local=0.05, batch_size=4, seed=3)
    a = fedopt.run("scaffnew", problem, Zero(), comm_prob=0.2, random_steps=False, **kw)
    b = fedopt.run("fedcanon", problem, Zero(), local_steps=5, lr_server=1.0, **kw)
    np.testing.assert_allclose(a.x, b.x, rtol=1e-10, atol=1e-12)
    assert a.history["grad_evals"][-1] == b.history["grad_evals"][-1] == 8 * 5 * problem.n_clients


def test_scaffnew_draws_geometric_local_steps_from_the_run_generator():
    problem, p, rounds = regression(), 0.25, 40
    kw = dict(rounds=rounds, comm_prob=p, lr_local=0.02, batch_size=None)
    a = fedopt.run("scaffnew", problem, Zero(), seed=5, **kw)
    b = fedopt.run("scaffnew", problem, Zero(), seed=5, **kw)
    np.testing.assert_array_equal(a.x, b.x)  # reproducible bit for bit
    # with full gradients the run's generator draws nothing but the step counts: K_t ~ Geometric(p)
    counts = np.diff(a.history["grad_evals"]) // problem.n_clients
    np.testing.assert_array_equal(counts, np.random.default_rng(5).geometric(p, size=rounds))
    assert len(set(counts)) > 3
    c = fedopt.run("scaffnew", problem, Zero(), seed=6, **kw)
    assert c.history["grad_evals"][-1] != a.history["grad_evals"][-1]
    np.testing.assert_allclose(problem.weights @ a.state.vars["e"], 0, atol=1e-12)  # sum_i w_i e_i stays 0


@pytest.mark.parametrize("method", ["fedmid", "fedda"])
def test_without_regularizer_one_local_step_is_gradient_descent(method):
    problem, step = regression(weights="uniform"), 0.05
    result = fedopt.run(method, problem, Zero(), rounds=7, local_steps=1, lr_local=step, batch_size=None,
                        x0=np.zeros(problem.n_params))
    np.testing.assert_allclose(result.x, gradient_descent(problem, step, 7), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("method", ["fedmid", "fedda"])
def test_without_regularizer_fedmid_and_fedda_are_fedavg(method):
    problem = regression()
    kw = dict(rounds=6, local_steps=4, lr_local=0.05, lr_server=0.7, batch_size=4, seed=2)
    a = fedopt.run(method, problem, Zero(), **kw)
    b = fedopt.run("fedavg", problem, Zero(), **kw)
    np.testing.assert_allclose(a.x, b.x, rtol=1e-10, atol=1e-12)


def test_fedmid_with_one_client_and_one_step_proxes_twice():
    """The server prox acts on a model the client already proxed: for l1 that doubles the penalty."""
    problem, step, lam = regression(n_clients=1), 0.05, 0.3
    result = fedopt.run("fedmid", problem, L1(lam), rounds=7, local_steps=1, lr_local=step, batch_size=None,
                        x0=np.zeros(problem.n_params))
    x = np.zeros(problem.n_params)
    for _ in range(7):
        x = L1(2 * lam).prox(x - step * problem.grad(x), step)
    np.testing.assert_allclose(result.x, x, rtol=1e-12, atol=1e-14)


def test_fedda_with_one_local_step_is_centralised_dual_averaging():
    problem, step, reg = regression(), 0.05, ElasticNet(0.2, 0.1)
    result = fedopt.run("fedda", problem, reg, rounds=9, local_steps=1, lr_local=step, batch_size=None,
                        x0=np.zeros(problem.n_params))
    w = x = np.zeros(problem.n_params)
    for t in range(9):
        w = w - step * problem.grad(x)
        x = reg.prox(w, step * (t + 1))
    np.testing.assert_allclose(result.x, x, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(result.state.vars["dual"], w, rtol=1e-12, atol=1e-14)


def test_fedadmm_is_feddr_without_relaxation_when_the_local_solves_are_accurate():
    """ADMM on the consensus problem is Douglas-Rachford with alpha = 1 (y_i = z - eta lam_i)."""
    problem = regression()
    L = problem.smoothness().max()
    kw = dict(rounds=5, local_steps=60, lr_local=1 / (2 * L), gamma=1 / L, batch_size=None)
    a = fedopt.run("fedadmm", problem, L1(0.1), **kw)
    b = fedopt.run("feddr", problem, L1(0.1), relax=1.0, **kw)
    c = fedopt.run("feddr", problem, L1(0.1), relax=1.5, **kw)
    np.testing.assert_allclose(a.x, b.x, atol=1e-11)
    np.testing.assert_allclose(a.z, b.z, atol=1e-11)
    assert np.abs(a.x - c.x).max() > 1e-3  # the relaxation matters, so the agreement above is not trivial


@pytest.mark.parametrize("method, extra", [("feddr", {"relax": 1.0}), ("feddr", {"relax": 1.6}), ("fedadmm", {})])
def test_feddr_and_fedadmm_reach_the_scikit_learn_lasso_on_a_heterogeneous_partition(method, extra):
    problem = regression(scheme="sorted", weights="samples")
    alpha = 0.1
    X, y = problem.dataset.X, problem.dataset.y
    expected = Lasso(alpha=alpha, fit_intercept=False, tol=1e-12, max_iter=100_000).fit(X, y).coef_
    eta = 1 / problem.smoothness().max()
    # five inexact gradient steps per round; the warm-started local solves leave the fixed point exact
    result = fedopt.run(method, problem, L1(alpha), rounds=150, local_steps=5, lr_local=eta / 2, gamma=eta,
                        batch_size=None, eval_every=50, **extra)
    np.testing.assert_allclose(result.x, expected, atol=1e-8)
    assert result.history["stationarity"][-1] < 1e-16
    assert result.history["normal_map"][-1] < 1e-16  # at z = xtilde, with the metric's gamma = eta
    assert set(np.flatnonzero(result.x)) == set(np.flatnonzero(expected))


# ---------------------------------------------------------------- the documented bias of FedMiD
def test_fedmid_stalls_at_a_biased_fixed_point_that_fednmap_goes_below():
    problem = regression(scheme="sorted", weights="samples")
    step, reg = 1 / problem.smoothness().max(), L1(0.1)
    kw = dict(rounds=300, local_steps=5, lr_local=step / 5, batch_size=None, eval_every=100, metric_gamma=step)
    mid = fedopt.run("fedmid", problem, reg, **kw).history["stationarity"]
    nmap = fedopt.run("fednmap", problem, reg, gamma=step, **kw).history["stationarity"]
    assert nmap[-1] < 1e-16
    assert mid[-1] > 1e-3  # exact gradients, yet far from stationary
    np.testing.assert_allclose(mid[-1], mid[-2], rtol=1e-6)  # and not moving: a fixed point, not slow progress


# ---------------------------------------------------------------- parity, progress, costs
@pytest.mark.parametrize("method", BASELINES)
def test_numpy_and_numba_backends_walk_the_same_trajectory(method):
    results = [fedopt.run(method, classification(backend=b), smooth_or_l1(method, 0.02), rounds=5, lr_local=0.3,
                          batch_size=8, seed=11, **steps(method, 3)) for b in ("numpy", "numba")]
    np.testing.assert_allclose(results[1].x, results[0].x, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(results[1].history["stationarity"], results[0].history["stationarity"], rtol=1e-8)


def test_random_scaffnew_walks_the_same_trajectory_on_both_backends():
    results = [fedopt.run("scaffnew", classification(backend=b), Zero(), rounds=6, comm_prob=0.3, lr_local=0.3,
                          batch_size=8, seed=4) for b in ("numpy", "numba")]
    np.testing.assert_allclose(results[1].x, results[0].x, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(results[1].history["grad_evals"], results[0].history["grad_evals"])


@pytest.mark.parametrize("method", BASELINES)
def test_every_baseline_decreases_stationarity(method):
    result = fedopt.run(method, classification(), smooth_or_l1(method), rounds=30, lr_local=0.2, batch_size=16,
                        metric_gamma=1.0, eval_every=10, **steps(method, 5))
    s = result.history["stationarity"]
    assert s[-1] < 0.2 * s[0]


@pytest.mark.parametrize("method, prox_per_round", [
    ("scaffnew", lambda n, K, t: 0),
    ("fedmid", lambda n, K, t: n * K + 1),
    ("fedda", lambda n, K, t: n * (K - (t == 0)) + 1),  # the first local prox of round 0 has weight 0
    ("feddr", lambda n, K, t: 1),
    ("fedadmm", lambda n, K, t: 1),
])
def test_costs_per_round(method, prox_per_round):
    problem, K, rounds = regression(), 3, 4
    n, p = problem.n_clients, problem.n_params
    h = fedopt.run(method, problem, smooth_or_l1(method, 0.05), rounds=rounds, lr_local=0.05, batch_size=4,
                   **steps(method, K)).history
    np.testing.assert_array_equal(h["grad_evals"], h["round"] * n * K)
    np.testing.assert_array_equal(np.diff(h["prox_evals"]), [prox_per_round(n, K, t) for t in range(rounds)])
    np.testing.assert_array_equal(h["floats_up"], h["round"] * n * p)  # one vector up
    np.testing.assert_array_equal(h["floats_down"], h["round"] * n * p)  # one vector down


# ---------------------------------------------------------------- refused hyperparameters
@pytest.mark.parametrize("method, reg, kwargs, message", [
    ("scaffnew", Zero(), {"comm_prob": 0.0}, r"comm_prob must be a probability in \(0, 1\]"),
    ("scaffnew", Zero(), {"comm_prob": 1.5}, r"comm_prob must be a probability in \(0, 1\]"),
    ("scaffnew", Zero(), {"comm_prob": True}, "comm_prob must be a finite number"),
    ("scaffnew", Zero(), {"comm_prob": [0.1, 0.2]}, r"comm_prob must be a finite number .*\(one run takes one value"),
    ("scaffnew", Zero(), {"comm_prob": 0.3, "random_steps": False}, "1/comm_prob must be an integer"),
    ("scaffnew", Zero(), {"random_steps": "yes"}, "random_steps must be True or False"),
    ("scaffnew", Zero(), {"lr_local": -0.1}, "lr_local must be a finite number > 0"),
    ("scaffnew", L1(0.1), {}, "scaffnew is for smooth problems"),
    ("scaffnew", Zero(), {"local_steps": 5}, "scaffnew has no hyperparameter 'local_steps'"),
    ("fedmid", MCP(0.1, gamma=2.0), {"lr_local": 3.0, "local_steps": 1, "lr_server": 0.1},
     r"lr_local \(FedMiD's local prox step\)=3 is too large"),
    ("fedmid", MCP(0.1, gamma=2.0), {"lr_local": 0.5, "local_steps": 10},
     r"lr_server \* lr_local \* local_steps \(FedMiD's server prox step\)=5 is too large"),
    ("fedmid", L1(0.1), {"local_steps": 0}, "local_steps must be an integer >= 1"),
    ("fedda", MCP(0.1, gamma=2.0), {"lr_local": 0.01}, "fedda needs a convex regularizer"),
    ("fedda", L1(0.1), {"lr_server": 0.0}, "lr_server must be a finite number > 0"),
    ("feddr", L1(0.1), {"relax": 2.0}, r"relax must be in \(0, 2\)"),
    ("feddr", L1(0.1), {"relax": 0.0}, r"relax must be in \(0, 2\)"),
    ("feddr", MCP(0.1, gamma=2.0), {"gamma": 3.0}, "gamma=3 is too large"),
    ("feddr", L1(0.1), {"batch_size": 0}, "batch_size must be an integer >= 1"),
    ("fedadmm", L1(0.1), {"gamma": -1.0}, "gamma must be a finite number > 0"),
    ("fedadmm", MCP(0.1, gamma=2.0), {"gamma": 2.0}, "gamma=2 is too large"),
    ("fedadmm", L1(0.1), {"lr_local": float("nan")}, "lr_local must be a finite number > 0"),
])
def test_invalid_hyperparameters_are_refused_with_the_argument_named(method, reg, kwargs, message):
    with pytest.raises(ValueError, match=message):
        fedopt.run(method, regression(), reg, rounds=1, **kwargs)


def test_fedda_refuses_weakly_convex_regularizers_even_for_tiny_steps():
    """The prox weight grows with the rounds, so it passes 1/rho whatever the steps; the message says when."""
    with pytest.raises(ValueError, match=r"passes 1/rho=3 after about 30000 rounds"):
        fedopt.run("fedda", regression(), MCP(0.1, gamma=3.0), rounds=1, local_steps=10, lr_local=1e-5, lr_server=1.0)
    fedopt.run("fedda", regression(), L1(0.1), rounds=1, local_steps=10, lr_local=1e-5)  # convex: accepted
