"""Per-sample weights of the linear models (scikit-learn's ``sample_weight``).

* the weighted ``linear_oracle`` of every CPU backend (Numba, batched NumPy) against the reference;
* integer weights give the loss and gradient of the data with rows repeated;
* the datasets carry the weights with their rows, and refuse bad ones;
* the methods, stepping array-wise on weighted problems, reach the weighted centralized solution.
"""

import numpy as np
import pytest
from sklearn.linear_model import Lasso
from test_kernel_runs import DTYPES, LOSSES, SIZES, assert_close, make_data, tolerances

import fedopt
from fedopt.datasets import FederatedDataset, from_client_ids, partition
from fedopt.kernels import LOGISTIC, batched, cpu, reference
from fedopt.problems import LeastSquares, Logistic, Softmax
from fedopt.problems.base import client_weights
from fedopt.regularizers import L1, ElasticNet, Zero

OFFSETS = np.concatenate([[0], np.cumsum(SIZES)])


# ---------------------------------------------------------------------------------- kernels
@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("d", [6, 7])
@pytest.mark.parametrize("storage", ["dense", "csr"])
@pytest.mark.parametrize("loss", list(LOSSES))
def test_weighted_linear_oracle_matches_the_reference(loss, storage, d, dtype):
    kind, n_out = LOSSES[loss]
    rng = np.random.default_rng(d + 10 * kind)
    n, m = len(SIZES), OFFSETS[-1]
    X, y = make_data(rng, dtype, d, kind, n_out, storage)
    weights = np.where(rng.random(m) < 0.2, 0, rng.uniform(0, 3, m)).astype(dtype)
    modules = (cpu, batched) if storage == "dense" else (cpu,)
    minibatches = [np.stack([rng.integers(OFFSETS[i], OFFSETS[i + 1], b) for i in range(n)]) for b in (4, 5)]
    for rows in (np.empty((n, 0), np.int64), *minibatches):
        for fit in (False, True):
            p = n_out * (d + fit)
            for W in (rng.normal(size=(1, p)).astype(dtype), rng.normal(size=(n, p)).astype(dtype)):
                args = (X, y, OFFSETS, W, rows, kind, n_out, 0.7, fit, weights)
                want = reference.linear_oracle(*args, np.empty(n, dtype), np.empty((n, p), dtype))
                for module in modules:
                    assert_close(module.linear_oracle(*args, np.empty(n, dtype), np.empty((n, p), dtype)), want)
                # the weights really count: all ones give the unweighted oracle, these do not
                ones = reference.linear_oracle(*args[:-1], np.ones(X.shape[0], dtype), np.empty(n, dtype),
                                               np.empty((n, p), dtype))
                plain = reference.linear_oracle(*args[:-1], np.empty(0, dtype), np.empty(n, dtype),
                                                np.empty((n, p), dtype))
                np.testing.assert_allclose(ones[0], plain[0], **tolerances(dtype))
                np.testing.assert_allclose(ones[1], plain[1], **tolerances(dtype))
                assert not np.allclose(want[0], plain[0])


@pytest.mark.parallel
def test_weighted_parallel_kernel_matches_the_reference():
    """8 clients x 250 rows x 300 features: the prange variant."""
    rng = np.random.default_rng(3)
    offsets = np.arange(0, 2001, 250)
    X, y = rng.normal(size=(2000, 300)), np.sign(rng.normal(size=2000))
    weights, W = rng.uniform(0, 2, 2000), rng.normal(size=(8, 301)) * 0.05
    for rows in (np.empty((8, 0), np.int64), np.stack([rng.integers(s, s + 250, 64) for s in offsets[:-1]])):
        args = (X, y, offsets, W, rows, LOGISTIC, 1, 1.0, True, weights, np.empty(8), np.empty((8, 301)))
        for got, want in zip(cpu.linear_oracle(*args), reference.linear_oracle(*args), strict=True):
            np.testing.assert_allclose(got, want, **tolerances(np.float64))


# ---------------------------------------------------------------------------------- problems
def weighted_and_repeated(rng, task, n=61, d=5, n_clients=4):
    """A dataset with integer sample weights (zeros included), and the same data with each row
    repeated as often as its weight."""
    X = rng.normal(size=(n, d))
    y = rng.normal(size=n) if task == "regression" else rng.integers(0, 2 if task == "binary" else 3, n)
    clients = np.arange(n) % n_clients
    weights = rng.integers(0, 4, n)
    weights[:n_clients] += 1  # every client keeps a sample
    repeat = np.repeat(np.arange(n), weights)
    task = "regression" if task == "regression" else "classification"
    return (from_client_ids(X, y, clients, task=task, sample_weight=weights),
            from_client_ids(X[repeat], y[repeat], clients[repeat], task=task))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("weights", ["samples", "uniform"])
@pytest.mark.parametrize("model", [LeastSquares, Logistic, Softmax])
def test_integer_weights_equal_repeated_rows(model, weights, backend):
    rng = np.random.default_rng(0)
    task = {LeastSquares: "regression", Logistic: "binary", Softmax: "classes"}[model]
    weighted, repeated = weighted_and_repeated(rng, task)
    for fit in (False, True):
        a, b = (model(ds, weights=weights, fit_intercept=fit, backend=backend) for ds in (weighted, repeated))
        np.testing.assert_allclose(a.weights, b.weights, rtol=1e-15)
        for _ in range(3):
            x = rng.normal(size=a.n_params)
            np.testing.assert_allclose(a.loss(x), b.loss(x), rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(a.grad(x), b.grad(x), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(a.smoothness(), b.smoothness(), rtol=1e-10)


def test_samples_weights_are_the_clients_weight_totals():
    weighted, _ = weighted_and_repeated(np.random.default_rng(1), "regression")
    totals = np.array([weighted.sample_weight[s:e].sum() for s, e in zip(weighted.offsets[:-1], weighted.offsets[1:],
                                                                            strict=True)])
    np.testing.assert_allclose(client_weights(weighted, "samples"), totals / totals.sum(), rtol=1e-15)
    unweighted = partition(weighted.X, weighted.y, 4, "iid", seed=0)
    np.testing.assert_array_equal(client_weights(unweighted, "samples"), unweighted.client_sizes / 61)


def test_a_minibatch_of_every_row_once_gives_the_full_gradient():
    """Minibatches are uniform draws of a client's rows: the weighted estimate is unbiased."""
    rng = np.random.default_rng(2)
    ds = partition(rng.normal(size=(40, 4)), rng.normal(size=40), 4, "iid", seed=0,
                   sample_weight=rng.uniform(0, 2, 40))
    problem = LeastSquares(ds, backend="numba")
    W = rng.normal(size=(4, problem.n_params))
    every_row = np.arange(40).reshape(4, 10)
    np.testing.assert_allclose(problem.client_grad(W, every_row), problem.client_grad(W), rtol=1e-12)


def test_unweighted_problems_keep_the_fused_path():
    rng = np.random.default_rng(3)
    X, y = rng.normal(size=(30, 4)), rng.normal(size=30)
    plain = LeastSquares(partition(X, y, 3, seed=0), backend="numba")
    weighted = LeastSquares(partition(X, y, 3, seed=0, sample_weight=np.ones(30)), backend="numba")
    assert not plain.has_sample_weight and len(plain._sample_weights) == 0
    assert weighted.has_sample_weight
    Z = np.zeros((3, plain.n_params))
    args = (None, np.empty((0, 0)), 0.1, 0, np.zeros((2, 1)), np.empty((0, 0)), Z, Z)
    assert plain.fused_local_steps(*args)
    assert not weighted.fused_local_steps(*args)
    x = rng.normal(size=plain.n_params)
    assert plain.loss(x) == pytest.approx(weighted.loss(x), rel=1e-14)


# ---------------------------------------------------------------------------------- datasets
@pytest.mark.parametrize("scheme", ["iid", "sorted"])
def test_partition_moves_the_weights_with_their_rows(scheme):
    y = np.arange(50) + 0.5  # each row's weight is twice its target
    X = np.random.default_rng(0).normal(size=(50, 3))
    ds = partition(X, y, 4, scheme, seed=1, sample_weight=2 * y)
    np.testing.assert_array_equal(ds.sample_weight, 2 * ds.y)
    held = partition(X, y, 4, scheme, seed=1, test_size=0.2, sample_weight=2 * y)
    assert held.sample_weight.shape == (40,)
    np.testing.assert_array_equal(held.sample_weight, 2 * held.y)
    given = from_client_ids(X, y, np.arange(50) % 3, sample_weight=2 * y)
    np.testing.assert_array_equal(given.sample_weight, 2 * given.y)
    assert "sample weights" in repr(given)
    assert partition(X, y, 4, scheme, seed=1).sample_weight is None


@pytest.mark.parametrize(("weights", "match"), [
    (np.ones(5), r"one weight per sample: shape \(6,\)"),
    (np.array([1, 1, -1, 1, 1, 1.0]), "finite and >= 0, got -1.0 at index 2"),
    (np.array([1, 1, np.nan, 1, 1, 1.0]), "finite and >= 0"),
    (np.array([1, 1, 1, 0, 0, 0.0]), "sums to 0 on client 1"),
    (np.array(list("abcdef")), "must hold numbers"),
])
def test_bad_sample_weights_are_refused(weights, match):
    X, y = np.arange(12.0).reshape(6, 2), np.arange(6.0) + 0.5
    with pytest.raises(ValueError, match=match):
        FederatedDataset(X, y, [0, 3, 6], sample_weight=weights)
    if "client" not in match:
        with pytest.raises(ValueError, match=match):
            partition(X, y, 2, sample_weight=weights)


class UnweightedSoftmax(Softmax):
    supports_sample_weight = False


def test_models_without_weighted_oracles_refuse_a_weighted_dataset():
    rng = np.random.default_rng(4)
    ds = partition(rng.normal(size=(30, 4)), rng.integers(0, 3, 30), 3, sample_weight=rng.uniform(1, 2, 30))
    with pytest.raises(ValueError, match="UnweightedSoftmax does not support sample_weight"):
        UnweightedSoftmax(ds)


# ---------------------------------------------------------------------------------- methods
def weighted_regression(backend, n=240, d=12, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = X @ np.where(np.arange(d) < 4, rng.normal(size=d) * 2, 0.0) + 0.5 * rng.normal(size=n)
    weights = np.where(rng.random(n) < 0.1, 0.0, rng.uniform(0.2, 3, n))
    return LeastSquares(partition(X, y, 6, "sorted", seed=seed, sample_weight=weights), weights="samples",
                        backend=backend), X, y, weights


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_fednmap_reaches_the_weighted_scikit_learn_lasso(backend):
    """scikit-learn rescales the weights to sum to n_samples: the same minimiser as the weighted mean."""
    problem, X, y, weights = weighted_regression(backend)
    alpha = 0.1
    expected = Lasso(alpha=alpha, fit_intercept=False, tol=1e-12, max_iter=100_000).fit(X, y, sample_weight=weights)
    step = 1 / problem.smoothness().max()
    result = fedopt.run("fednmap", problem, L1(alpha), rounds=400, local_steps=5, lr_local=step / 5, gamma=step,
                        batch_size=None, eval_every=100)
    np.testing.assert_allclose(result.x, expected.coef_, atol=1e-8)
    assert result.history["stationarity"][-1] < 1e-16


@pytest.mark.parametrize("method", ["fednmap", "fedcanon", "scaffold", "fedavg", "zhang", "feddr", "depositum"])
def test_methods_step_array_wise_on_weighted_problems(method):
    """With full gradients, integer weights walk the trajectory of the repeated rows (which takes
    the fused kernels); with minibatches, the numpy and numba backends walk the same trajectory."""
    rng = np.random.default_rng(5)
    weighted, repeated = weighted_and_repeated(rng, "binary", n=80)
    reg = Zero() if method == "scaffold" else ElasticNet(0.01, 0.05)
    kw = dict(rounds=3, seed=0, lr=0.1) if method == "depositum" else dict(rounds=3, seed=0, local_steps=3,
                                                                           lr_local=0.1)
    full = [fedopt.run(method, Logistic(ds, weights="samples", backend="numba"), reg, batch_size=None, **kw).x
            for ds in (weighted, repeated)]
    np.testing.assert_allclose(full[0], full[1], rtol=1e-10, atol=1e-12)
    mini = [fedopt.run(method, Logistic(weighted, weights="samples", backend=b), reg, batch_size=6, **kw).x
            for b in ("numpy", "numba")]
    np.testing.assert_allclose(mini[0], mini[1], rtol=1e-10, atol=1e-12)


def test_a_batch_mixes_weighted_and_unweighted_data_sets():
    rng = np.random.default_rng(6)
    X, y = rng.normal(size=(60, 5)), rng.integers(0, 2, 60)
    problems = [Logistic(partition(X, y, 3, "iid", seed=s, sample_weight=w), backend="numba")
                for s, w in ((0, rng.uniform(0.5, 2, 60)), (1, None))]
    kw = dict(rounds=3, local_steps=2, lr_local=0.2, batch_size=5)
    runs = fedopt.run_batch("fednmap", problems, L1(0.01), seeds=[0, 1], **kw)
    for seed, (problem, run) in enumerate(zip(problems, runs, strict=True)):
        np.testing.assert_allclose(run.x, fedopt.run("fednmap", problem, L1(0.01), seed=seed, **kw).x, rtol=1e-10,
                                   atol=1e-12)
