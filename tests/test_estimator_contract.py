"""scikit-learn's contract beyond check_estimator: sample weights, warm starts, partial_fit, float32,
client weights and the metadata routing of ``clients``."""

import re
import warnings

import numpy as np
import pytest
import sklearn
from sklearn.datasets import load_breast_cancer, load_diabetes, load_iris
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import ElasticNet, Lasso, LogisticRegression
from sklearn.model_selection import GridSearchCV, GroupKFold
from sklearn.preprocessing import StandardScaler

from fedopt.estimators import (
    FederatedElasticNet,
    FederatedLasso,
    FederatedLogisticRegression,
    FederatedMLPClassifier,
    FederatedMLPRegressor,
)
from fedopt.estimators._gap import logistic_scale


def diabetes():
    X, y = load_diabetes(return_X_y=True)
    return X, y, np.argsort(np.argsort(y)) * 4 // len(y)  # 4 clients holding sorted targets


def weights_and_repeats(n, seed=0):
    """Integer sample weights (some 0) and the row indices that repeat each row that often."""
    weights = np.random.default_rng(seed).integers(0, 4, size=n)
    return weights, np.repeat(np.arange(n), weights)


# ---- sample_weight -------------------------------------------------------------------------------


def test_lasso_with_integer_weights_equals_repeated_rows():
    X, y, clients = diabetes()
    weights, rows = weights_and_repeats(len(y))
    options = {"alpha": 0.1, "tol": 1e-12, "max_rounds": 30_000, "random_state": 0}
    weighted = FederatedLasso(**options).fit(X, y, clients=clients, sample_weight=weights)
    repeated = FederatedLasso(**options).fit(X[rows], y[rows], clients=clients[rows])
    np.testing.assert_allclose(weighted.coef_, repeated.coef_, rtol=1e-6, atol=1e-6)
    assert weighted.intercept_ == pytest.approx(repeated.intercept_, rel=1e-8)


def test_elastic_net_with_weights_reaches_scikit_learn():
    X, y, clients = diabetes()
    weights = np.random.default_rng(1).uniform(0.2, 3.0, size=len(y))
    exact = ElasticNet(alpha=0.01, tol=1e-14, max_iter=1_000_000).fit(X, y, sample_weight=weights)
    est = FederatedElasticNet(0.01, random_state=0).fit(X, y, clients=clients, sample_weight=weights)
    share = weights / weights.sum()

    def objective(coef, intercept):
        r = y - X @ coef - intercept
        return 0.5 * share @ (r * r) + 0.005 * np.abs(coef).sum() + 0.0025 * coef @ coef

    best = objective(exact.coef_, exact.intercept_)
    assert 0 <= objective(est.coef_, est.intercept_) - best <= est.dual_gap_ <= 1e-6 * best


def test_logistic_regression_with_weights_reaches_scikit_learn():
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    weights = np.random.default_rng(2).uniform(0.5, 2.0, size=len(y))
    alpha = 0.01
    exact = LogisticRegression(C=1 / (alpha * weights.sum()), l1_ratio=0.0, tol=1e-12, max_iter=100_000).fit(
        X, y, sample_weight=weights)  # C sum_j s_j loss_j + ||w||^2 / 2: alpha = 1 / (C sum_j s_j)
    est = FederatedLogisticRegression(alpha, penalty="l2", random_state=0).fit(X, y, sample_weight=weights)
    share = weights / weights.sum()

    def objective(coef, intercept):
        margins = X @ coef[0] + intercept[0]
        return share @ np.logaddexp(0, -(2 * y - 1) * margins) + 0.5 * alpha * coef[0] @ coef[0]

    best = objective(exact.coef_, exact.intercept_)
    assert est.n_iter_ < est.max_rounds
    assert 0 <= objective(est.coef_, est.intercept_) - best <= est.dual_gap_ <= 1e-6 * best
    np.testing.assert_allclose(est.predict_proba(X), exact.predict_proba(X), atol=1e-3)


def test_mlp_with_integer_weights_has_the_objective_of_repeated_rows():
    X, y = load_iris(return_X_y=True)
    weights, rows = weights_and_repeats(len(y), seed=3)
    options = {"hidden_layer_size": 8, "max_rounds": 5, "tol": 0, "eval_every": 5, "batch_size": None,
               "random_state": 0}
    with pytest.warns(ConvergenceWarning):
        weighted = FederatedMLPClassifier(**options).fit(X, y, sample_weight=weights)
    with pytest.warns(ConvergenceWarning):
        repeated = FederatedMLPClassifier(**options).fit(X[rows], y[rows])
    # the same initial network: the round-0 objective is the pooled weighted mean, computed federatedly
    assert weighted.history_["objective"][0] == pytest.approx(repeated.history_["objective"][0], rel=1e-12)


def test_bad_sample_weights_are_refused_and_zero_weights_drop_rows():
    X, y, clients = diabetes()
    with pytest.raises(ValueError, match="sample_weight"):
        FederatedLasso().fit(X, y, sample_weight=-np.ones(len(y)))
    with pytest.raises(ValueError, match=r"non-zero|positive"):
        FederatedLasso().fit(X, y, sample_weight=np.zeros(len(y)))
    weights = (clients != 3).astype(float)  # client 3 weighs nothing: it is left out
    est = FederatedLasso(0.1, random_state=0).fit(X, y, clients=clients, sample_weight=weights)
    assert est.n_clients_ == 3


def test_a_class_of_zero_weight_is_refused_where_its_intercept_has_no_minimum():
    X, y = load_iris(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    binary = (y > 0).astype(int)
    for labels, weights, label in ((binary, (y == 0).astype(float), 1), (y, (y > 0).astype(float), 0)):
        with pytest.raises(ValueError, match=re.escape(
                f"FederatedLogisticRegression with fit_intercept=True needs positive sample_weight on every class, "
                f"but class {label} has weight 0 on all its samples: the log-loss then has no minimum (that class's "
                "intercept falls without bound); drop its samples, or set fit_intercept=False")):
            FederatedLogisticRegression(n_clients=3).fit(X, labels, sample_weight=weights)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)  # the penalty bounds the coefficients: a minimum
        est = FederatedLogisticRegression(n_clients=3, fit_intercept=False, random_state=0)
        est.fit(X, binary, sample_weight=(y == 0).astype(float))
    assert (est.predict(X[y == 0]) == 0).all()
    # the yardstick of one class: 0, where shares that sum to 1 + 2e-16 gave -4e-16 (or +2e-16 for 7 samples)
    for n in (7, 50):
        assert logistic_scale(np.zeros(n, dtype=int), 2, True, np.full(n, 1 / n)) == 0.0


def test_uniform_client_weights_equal_sample_weights_of_one_over_the_client_size():
    X, y, clients = diabetes()
    clients = np.minimum(clients, 2)  # unequal clients: 110, 111 and 221 samples
    sizes = np.bincount(clients)
    uniform = FederatedLasso(0.1, client_weights="uniform", tol=1e-12, random_state=0).fit(X, y, clients=clients)
    weighted = FederatedLasso(0.1, tol=1e-12, random_state=0).fit(X, y, clients=clients,
                                                                   sample_weight=1.0 / sizes[clients])
    samples = FederatedLasso(0.1, tol=1e-12, random_state=0).fit(X, y, clients=clients)
    np.testing.assert_allclose(uniform.coef_, weighted.coef_, rtol=1e-6, atol=1e-6)
    assert np.abs(uniform.coef_ - samples.coef_).max() > 1.0  # another objective
    # the means that center X and y carry the same weights: scikit-learn's solution, intercept included
    exact = Lasso(alpha=0.1, tol=1e-14, max_iter=1_000_000).fit(X, y, sample_weight=1.0 / sizes[clients])
    np.testing.assert_allclose(uniform.coef_, exact.coef_, atol=1e-5)
    assert uniform.intercept_ == pytest.approx(exact.intercept_, abs=1e-5)


# ---- warm_start and partial_fit ------------------------------------------------------------------


def test_warm_start_continues_from_the_fitted_model():
    X, y, _ = diabetes()
    est = FederatedLasso(0.1, random_state=0).fit(X, y)
    rounds = est.n_iter_
    est.set_params(warm_start=True).fit(X, y)
    assert est.n_iter_ == 0  # already converged: the first evaluation stops it
    est.set_params(alpha=0.09).fit(X, y)
    cold = FederatedLasso(0.09, random_state=0).fit(X, y)
    # it starts next to the new solution (the rounds are few either way: they shrink the residual 50x every 10)
    assert est.history_["stationarity"][0] < 1e-3 * cold.history_["stationarity"][0]
    assert est.n_iter_ <= cold.n_iter_ and rounds > 0
    np.testing.assert_allclose(est.coef_, cold.coef_, atol=5e-3)


def test_partial_fit_continues_the_run():
    X, y, _ = diabetes()
    online = FederatedLasso(0.1, eval_every=20, random_state=0)
    for _ in range(5):
        online.partial_fit(X, y)
    assert online.n_iter_ == 20 and online.history_["round"][-1] == 100
    with pytest.warns(ConvergenceWarning):
        full = FederatedLasso(0.1, eval_every=20, max_rounds=100, tol=0, random_state=0).fit(X, y)
    np.testing.assert_allclose(online.coef_, full.coef_, rtol=1e-12)  # the method's state carries over
    assert online.dual_gap_ == pytest.approx(full.dual_gap_, rel=1e-10)


@pytest.mark.parametrize("make", [lambda: FederatedMLPRegressor(hidden_layer_size=8, n_clients=4, max_rounds=30),
                                  lambda: FederatedLasso(0.01, n_clients=4, fit_intercept=False, gamma=1.0)])
def test_partial_fit_on_float32_after_a_float64_fit_goes_on_in_float32(make):
    X, y = load_diabetes(return_X_y=True)
    X, y = StandardScaler().fit_transform(X), (y - y.mean()) / y.std()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = make().set_params(random_state=0).fit(X, y)
    rounds = est.history_["round"][-1]
    est.partial_fit(X.astype(np.float32), y)
    params = [est.coef_] if hasattr(est, "coef_") else est.coefs_ + est.intercepts_
    assert all(p.dtype == np.float32 for p in params) and est.predict(X.astype(np.float32)).dtype == np.float32
    assert est.n_iter_ == est.eval_every and est.history_["round"][-1] == rounds + est.eval_every  # numbered on
    est.partial_fit(X, y)  # and back
    params = [est.coef_] if hasattr(est, "coef_") else est.coefs_ + est.intercepts_
    assert all(p.dtype == np.float64 for p in params)


def test_classifier_partial_fit_takes_the_classes_first_and_batches_without_some():
    X, y = load_iris(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    est = FederatedLogisticRegression(0.01, penalty="l2", eval_every=50, random_state=0)
    with pytest.raises(ValueError, match="needs classes on its first call"):
        est.partial_fit(X, y)
    order = np.random.default_rng(0).permutation(len(y))
    for batch in np.array_split(order, 3):
        est.partial_fit(X[batch], y[batch], classes=[0, 1, 2])
    assert est.n_iter_ == 50 and est.history_["round"][-1] == 150 and est.score(X, y) > 0.9
    class_2 = est.predict_proba(X[y < 2])[:, 2].mean()
    est.partial_fit(X[y < 2], y[y < 2])  # a batch without class 2: its rounds push class 2 down
    assert est.coef_.shape == (3, 4) and est.history_["round"][-1] == 200
    assert est.predict_proba(X[y < 2])[:, 2].mean() < class_2
    with pytest.raises(ValueError, match="not among the classes"):
        est.partial_fit(X, y + 1)
    mlp = FederatedMLPClassifier(hidden_layer_size=8, random_state=0)
    mlp.partial_fit(X[y > 0], y[y > 0], classes=np.unique(y))
    assert mlp.coefs_[1].shape == (8, 3) and mlp.n_iter_ == mlp.eval_every


@pytest.mark.parametrize("make", [lambda: FederatedLogisticRegression(0.01, penalty="l2"),
                                  lambda: FederatedMLPClassifier(hidden_layer_size=8, max_rounds=20)])
def test_warm_start_refuses_other_classes_as_scikit_learn_does(make):
    X, y = load_iris(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    est = make().set_params(warm_start=True, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y)
        # as many classes, other labels: the fitted output units would start unrelated classes
        with pytest.raises(ValueError, match=r"classes_ are array\(\[0, 1, 2\]\), but y has the classes "
                                             r"array\(\[5, 6, 7\]\).*warm_start=False"):
            est.fit(X, y + 5)
        est.set_params(warm_start=False).fit(X, y + 5)
    assert list(est.classes_) == [5, 6, 7]
    with pytest.raises(ValueError, match="differs from the classes_ of the fitted model"):
        est.partial_fit(X, y + 5, classes=[0, 1, 2])
    with pytest.raises(ValueError, match=r"not among the classes .* of the fitted model"):
        est.partial_fit(X, y)


# ---- float32 -------------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [lambda: FederatedLasso(0.1), lambda: FederatedElasticNet(0.01),
                                  lambda: FederatedLogisticRegression(0.01, penalty="l2"),
                                  lambda: FederatedMLPClassifier(hidden_layer_size=8),
                                  lambda: FederatedMLPRegressor(hidden_layer_size=8, max_rounds=10_000)])
def test_float32_data_is_fitted_in_float32(make):
    est = make().set_params(random_state=0)
    if isinstance(est, FederatedLogisticRegression | FederatedMLPClassifier):
        X, y = load_breast_cancer(return_X_y=True)
    else:
        X, y = load_diabetes(return_X_y=True)
        y = (y - y.mean()) / y.std()
    X = StandardScaler().fit_transform(X).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)  # float32 stops at its own floor of tol
        est.fit(X, y)
    params = [est.coef_] if hasattr(est, "coef_") else est.coefs_ + est.intercepts_
    assert all(p.dtype == np.float32 for p in params)
    outputs = est.predict_proba(X) if hasattr(est, "predict_proba") else est.predict(X)
    assert outputs.dtype == np.float32
    float64 = make().set_params(random_state=0).fit(X.astype(np.float64), y)
    assert est.score(X, y) == pytest.approx(float64.score(X, y), abs=0.02)


# ---- clients through metadata routing ------------------------------------------------------------


def test_grid_search_over_group_folds_routes_clients_to_fit():
    X, y, clients = diabetes()
    with sklearn.config_context(enable_metadata_routing=True):
        lasso = FederatedLasso(random_state=0).set_fit_request(clients=True, sample_weight=False)
        search = GridSearchCV(lasso, {"alpha": [0.05, 0.5]}, cv=GroupKFold(n_splits=4))
        search.fit(X, y, clients=clients, groups=clients)  # each fold leaves one client out
    assert search.best_estimator_.n_clients_ == 4  # the refit on all clients, not the default 10
    assert np.isfinite(search.best_score_)


def test_a_run_resumes_only_a_state_that_fits_the_problem():
    import fedopt
    from fedopt.datasets import partition
    from fedopt.problems import LeastSquares

    X, y, _ = diabetes()
    four = LeastSquares(partition(X, y, 4, seed=0), backend="numba")
    first = fedopt.run("fednmap", four, rounds=5, seed=0, batch_size=None, lr_local=0.1, gamma=1.0)
    more = fedopt.run("fednmap", four, rounds=5, seed=1, batch_size=None, lr_local=0.1, gamma=1.0, resume=first.state)
    both = fedopt.run("fednmap", four, rounds=10, seed=0, batch_size=None, lr_local=0.1, gamma=1.0)
    np.testing.assert_array_equal(more.x, both.x)  # full gradients: the generator does not matter
    assert list(more.history["round"]) == [5, 6, 7, 8, 9, 10]
    five = LeastSquares(partition(X, y, 5, seed=0), backend="numba")
    with pytest.raises(ValueError, match="the problem has 10 parameters and 5 clients"):
        fedopt.run("fednmap", five, rounds=1, batch_size=None, resume=first.state)
    # FedCanon keeps a correction "c" of the same shape, so only the state's method tells them apart
    with pytest.raises(ValueError, match="resume holds a state of fednmap"):
        fedopt.run("fedcanon", four, rounds=1, batch_size=None, resume=first.state)
    with pytest.raises(TypeError, match=r"result\.state"):
        fedopt.run("fednmap", four, rounds=1, batch_size=None, resume=first)
