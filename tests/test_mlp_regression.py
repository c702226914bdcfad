"""``MLP(loss="squared")``: one regression output, R^2 score, checked targets, and federated fits."""

import numpy as np
import pytest
from sklearn.metrics import r2_score

import fedopt
from fedopt import kernels as K
from fedopt.datasets import partition
from fedopt.problems import MLP
from fedopt.regularizers import L1, ElasticNet


def regression_data(n=400, d=5, seed=0):
    """A smooth nonlinear target with a little noise: a hidden layer of 8 fits it to R^2 > 0.9."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] ** 2 - X[:, 2] + 0.1 * rng.normal(size=n)
    return X, y


def regression(backend="numba", hidden=8, weights="uniform"):
    X, y = regression_data()
    return MLP(partition(X, y, 4, "sorted", test_size=0.25, seed=0), hidden=hidden, weights=weights,
               backend=backend, loss="squared")


def test_layout_outputs_loss_and_score():
    problem = regression(weights="samples")
    h, d = problem.hidden, problem.n_features
    assert problem.n_out == 1 and problem.n_params == h * (d + 1) + h + 1 and not problem.is_classifier
    x = problem.init(3)
    W1, b1, W2, b2 = problem.unpack(x)
    assert W1.shape == (h, d) and W2.shape == (1, h) and b2.shape == (1,)
    ds = problem.dataset
    outputs = problem.decision_function(x)
    assert outputs.shape == (ds.n_samples, 1)
    H = 1 / (1 + np.exp(-(ds.X @ W1.T + b1)))
    np.testing.assert_allclose(outputs[:, 0], H @ W2[0] + b2[0], rtol=1e-12)
    # weights="samples": f is the pooled mean squared error / 2
    assert problem.loss(x) == pytest.approx(np.mean((outputs[:, 0] - ds.y) ** 2) / 2, rel=1e-12)
    test_outputs = problem.decision_function(x, ds.X_test)[:, 0]
    assert problem.score(x) == pytest.approx(r2_score(ds.y_test, test_outputs), rel=1e-12)
    assert problem.score(x, test=False) == pytest.approx(r2_score(ds.y, outputs[:, 0]), rel=1e-12)
    with pytest.raises(ValueError, match="is a regression; use score"):
        problem.accuracy(x)
    moved = problem.on("numpy")
    assert moved.kind == K.LEAST_SQUARES and moved.n_params == problem.n_params and moved.hidden == h
    assert moved.loss(x) == pytest.approx(problem.loss(x), rel=1e-12)


def test_loss_names_and_targets_that_do_not_fit():
    X, y = regression_data(60)
    ds = partition(X, y, 2)
    with pytest.raises(ValueError, match=r"loss='hinge' is unknown.*'cross_entropy'.*'squared'"):
        MLP(ds, loss="hinge")
    with pytest.raises(ValueError, match=r"needs class labels.*use loss='squared'"):
        MLP(ds)
    with pytest.raises(ValueError, match=r"needs numeric targets.*use loss='cross_entropy'"):
        MLP(partition(X, np.array(["a", "b", "c"] * 20), 2), loss="squared")
    # integer targets are read as classes by partition; the squared error takes them as numbers
    counts = np.arange(60) % 7 * 3
    problem = MLP(partition(X, counts, 2, test_size=0.2, seed=0), hidden=3, backend="numpy", loss="squared")
    assert problem.n_out == 1 and problem.n_classes == 7
    np.testing.assert_array_equal(np.sort(problem._y), np.sort(problem.dataset.classes[problem.dataset.y]))
    assert np.isin(problem._y_test, counts).all() and problem._y.max() == 18


def test_fednmap_fits_a_regression():
    """Full local gradients, elastic net: the objective falls by 10x, the natural-map residual by
    1e4, the test R^2 passes 0.9, and the history has no accuracy."""
    problem = regression()
    result = fedopt.run("fednmap", problem, ElasticNet(1e-4, 1e-3), rounds=200, local_steps=5, lr_local=0.3,
                        batch_size=None, seed=0, eval_every=50)
    objective, stationarity = result.history["objective"], result.history["stationarity"]
    assert objective[-1] < 0.1 * objective[0] and (np.diff(objective) < 0).all()
    assert stationarity[-1] < 1e-4 * stationarity[0]
    assert problem.score(result.x) > 0.9
    assert np.isnan(result.history["test_accuracy"]).all()


@pytest.mark.parametrize("method", ["fednmap", "depositum"])
def test_fused_rounds_walk_the_reference_trajectory(method, monkeypatch):
    """Minibatch rounds on the CPU kernels (one fused local-steps or tracking call per round) and
    on the NumPy reference reach the same model; run_batch's runs equal the single runs."""
    kw = (dict(local_steps=3, lr_local=0.2) if method == "fednmap" else
          dict(lr=0.05, momentum=0.6, comm_period=3, tracking_rate=0.7))
    kw.update(rounds=3, batch_size=8)
    fused_problem = regression()
    fused = "fused_local_steps" if method == "fednmap" else "fused_tracking_steps"
    calls, kernel = [], getattr(fused_problem, fused)
    monkeypatch.setattr(fused_problem, fused, lambda *a, **kw: calls.append(kernel(*a, **kw)) or calls[-1])
    result = fedopt.run(method, fused_problem, L1(0.01), seed=1, **kw)
    assert calls and all(calls)
    expected = fedopt.run(method, regression("numpy"), L1(0.01), seed=1, **kw)
    assert np.abs(expected.x - fused_problem.init(1)).max() > 1e-3  # the rounds move (from init(seed))
    np.testing.assert_allclose(result.x, expected.x, rtol=1e-10, atol=1e-12)
    if method == "fednmap":
        runs = fedopt.run_batch(method, regression(), L1(0.01), seeds=[0, 1], **kw)
        for seed, run in enumerate(runs):
            np.testing.assert_array_equal(run.x, fedopt.run(method, regression(), L1(0.01), seed=seed, **kw).x)
