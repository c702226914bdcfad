"""The scikit-learn estimators: conformance, scikit-learn's answers, the digits MLP, and composition."""

import pickle
import re
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.special import expit, logsumexp
from sklearn.base import clone
from sklearn.datasets import load_diabetes, load_digits, load_iris
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import Lasso, LinearRegression, LogisticRegression
from sklearn.model_selection import GridSearchCV, GroupKFold, train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import (
    check_sample_weight_equivalence_on_dense_data,
    check_sample_weight_equivalence_on_sparse_data,
    parametrize_with_checks,
)

import fedopt
from fedopt import regularizers as R
from fedopt.algorithms import make
from fedopt.estimators import (
    FederatedElasticNet,
    FederatedLasso,
    FederatedLogisticRegression,
    FederatedMLPClassifier,
    FederatedMLPRegressor,
    FederatedSparseRegressor,
)
from fedopt.estimators._base import SMOOTH_METHODS

# ---- data ----------------------------------------------------------------------------------------


def regression(n=240, d=12, seed=0):
    """Features with nonzero means, a sparse truth, an intercept, and 6 clients holding sorted targets."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) + rng.uniform(-1, 2, size=d)
    coef = np.where(np.arange(d) < 4, rng.normal(size=d) * 2, 0.0)
    y = X @ coef + 3.0 + 0.5 * rng.normal(size=n)
    clients = np.argsort(np.argsort(y)) * 6 // n  # client c holds the c-th sixth of the sorted targets
    return X, y, clients


def classification(n=300, d=10, n_classes=2, seed=1):
    """Overlapping classes (a unique, finite solution) split among 5 clients by label."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) + 0.5
    W = rng.normal(size=(n_classes, d)) * np.where(np.arange(d) < 5, 1.0, 0.0)
    y = (X @ W.T + 1.5 * rng.gumbel(size=(n, n_classes))).argmax(axis=1)
    clients = np.argsort(np.argsort(y + rng.uniform(size=n))) * 5 // n  # sorted by label
    return X, y, clients


def standardized(X, y, clients):
    """``(X, y, clients)`` with standardized features and targets, the scale that a network's steps assume."""
    return (X - X.mean(axis=0)) / X.std(axis=0), (y - y.mean()) / y.std(), clients


def lasso_objective(X, y, coef, intercept, alpha):
    return 0.5 * np.mean((y - X @ coef - intercept) ** 2) + alpha * np.abs(coef).sum()


def logistic_objective(X, y, coef, intercept, alpha):
    """Mean log-loss (binary or multinomial) + alpha ||coef||_1."""
    M = X @ coef.T + intercept
    if coef.shape[0] == 1:
        loss = np.logaddexp(0, -(2 * y - 1) * M[:, 0])
    else:
        loss = logsumexp(M, axis=1) - M[np.arange(len(y)), y]
    return loss.mean() + alpha * np.abs(coef).sum()


# ---- scikit-learn conformance --------------------------------------------------------------------

EQUIVALENCE = ("check_sample_weight_equivalence_on_dense_data", "check_sample_weight_equivalence_on_sparse_data")


# Numba rather than "auto": on a GPU machine tiny fits would time kernel launches. The regressor's
# network keeps fitting the checks' small random data up to max_rounds: fewer keep the checks quick.
@parametrize_with_checks([FederatedLasso(backend="numba"), FederatedElasticNet(backend="numba"),
                          FederatedSparseRegressor(backend="numba"), FederatedLogisticRegression(backend="numba"),
                          FederatedMLPClassifier(backend="numba"),
                          FederatedMLPRegressor(backend="numba", max_rounds=200)])
def test_scikit_learn_conventions(estimator, check):
    if check.func.__name__ in EQUIVALENCE:
        pytest.skip("test_weighted_fits_equal_repeated_rows runs it with the parameters it needs")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # random labels in some checks
        check(estimator)


TIGHT = [FederatedLasso(backend="numba", tol=1e-14, max_rounds=50_000),
         FederatedElasticNet(backend="numba", tol=1e-14, max_rounds=50_000),
         FederatedSparseRegressor(backend="numba", tol=1e-14, max_rounds=50_000),
         FederatedLogisticRegression(backend="numba", tol=1e-9, max_rounds=50_000)]
ONE_PATH = [FederatedMLPClassifier(backend="numba", n_clients=1, batch_size=None),
            # dense X only; the regressor's network keeps fitting these 15 random targets past the default tol
            FederatedMLPRegressor(backend="numba", n_clients=1, batch_size=None, tol=1e-3)]


@pytest.mark.parametrize("estimator, check", [
    *[(e, c) for e in TIGHT for c in (check_sample_weight_equivalence_on_dense_data,
                                      check_sample_weight_equivalence_on_sparse_data)],
    *[(e, check_sample_weight_equivalence_on_dense_data) for e in ONE_PATH]])
def test_weighted_fits_equal_repeated_rows(estimator, check):
    """scikit-learn's checks that a weighted fit equals a fit on repeated rows to 1e-7 relative,
    with the parameters they need, as scikit-learn runs them for its own iterative solvers: an
    iterative fit agrees only to its ``tol`` (the linear models' at the default is about 1e-5 on
    this tiny data), and the MLPs' weighted and
    repeated rows must take one path (one client, full gradients: another split or other
    minibatches give another network)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)  # the fits reach their tol
        check(type(estimator).__name__, estimator)


# ---- scikit-learn's answers ------------------------------------------------------------------------


@pytest.mark.parametrize("sparse", [False, True])
def test_lasso_reaches_scikit_learn_on_clients_with_sorted_targets(sparse):
    X, y, clients = regression()
    alpha = 0.1
    expected = Lasso(alpha=alpha, tol=1e-14, max_iter=100_000).fit(X, y)
    Xfit = sp.csr_matrix(X) if sparse else X
    est = FederatedLasso(alpha, tol=1e-13, max_rounds=20_000).fit(Xfit, y, clients=clients)
    ours = lasso_objective(X, y, est.coef_, est.intercept_, alpha)
    best = lasso_objective(X, y, expected.coef_, expected.intercept_, alpha)
    assert abs(ours - best) <= 1e-6 * best
    assert set(np.flatnonzero(est.coef_)) == set(np.flatnonzero(expected.coef_))
    assert 0 < np.count_nonzero(est.coef_) < X.shape[1]
    np.testing.assert_allclose(est.coef_, expected.coef_, atol=1e-5)
    np.testing.assert_allclose(est.intercept_, expected.intercept_, atol=1e-5)
    # the 6 clients send the coefficients: the intercept is in closed form, sparse X centered implicitly
    assert est.history_["floats_up"][1] == 6 * X.shape[1] * est.history_["round"][1]


@pytest.mark.parametrize("make", [lambda: FederatedLasso(0.1), lambda: FederatedLogisticRegression(0.01)])
def test_sparse_features_are_centered_like_dense_ones(make):
    """CSR features are centered implicitly: the fit takes the dense fit's rounds to the same model."""
    X, y, clients = regression() if isinstance(make(), FederatedLasso) else classification(n_classes=3)
    X = np.where(np.abs(X) > 1, X, 0.0)  # some zeros, and features with nonzero means
    dense, sparse = make().fit(X, y, clients=clients), make().fit(sp.csr_matrix(X), y, clients=clients)
    assert sparse.n_iter_ == dense.n_iter_  # before centering: 140 and 90 rounds against 90 and 50
    np.testing.assert_allclose(sparse.coef_, dense.coef_, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(sparse.intercept_, dense.intercept_, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("n, columns", [(40, [1.0]), (221, [1.0, 1.0, 0.7])])
def test_constant_features_give_coef_zero_and_the_mean_intercept(sparse, n, columns):
    """Features constant on every sample center to zeros, dense or sparse: coef_ 0 and intercept_
    mean(y), at once. (Centered to rounding noise instead, they set the default steps by its
    smoothness, 1e-31: coef_ 10 dense, 1e12 sparse.)"""
    y = np.random.default_rng(0).standard_normal(n) + 5
    X = np.tile(columns, (n, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        fitted = FederatedLasso(0.0, n_clients=4, random_state=0).fit(sp.csr_matrix(X) if sparse else X, y)
    np.testing.assert_array_equal(fitted.coef_, 0.0)
    assert fitted.intercept_ == pytest.approx(y.mean(), abs=1e-12)
    assert fitted.n_iter_ == 0


@pytest.mark.parametrize("n_classes", [2, 3])
def test_l1_logistic_regression_reaches_scikit_learn(n_classes):
    X, y, clients = classification(n_classes=n_classes)
    alpha = 0.02
    C = 1 / (alpha * len(y))  # C sum_j loss_j + ||w||_1 = n C (mean loss + alpha ||w||_1)
    expected = LogisticRegression(l1_ratio=1.0, C=C, solver="saga", tol=1e-10, max_iter=100_000).fit(X, y)
    est = FederatedLogisticRegression(alpha, penalty="l1", tol=1e-13, max_rounds=20_000).fit(X, y, clients=clients)
    assert est.coef_.shape == expected.coef_.shape and est.intercept_.shape == expected.intercept_.shape
    ours = logistic_objective(X, y, est.coef_, est.intercept_, alpha)
    best = logistic_objective(X, y, expected.coef_, expected.intercept_, alpha)
    assert abs(ours - best) <= 1e-6 * best
    assert set(np.flatnonzero(est.coef_)) == set(np.flatnonzero(expected.coef_))
    assert 0 < np.count_nonzero(est.coef_) < est.coef_.size
    np.testing.assert_array_equal(est.classes_, expected.classes_)
    np.testing.assert_allclose(est.predict_proba(X), expected.predict_proba(X), atol=1e-4)


@pytest.mark.parametrize("penalty, l1_ratio", [("l2", 0.0), ("elasticnet", 0.5)])
def test_l2_and_elastic_net_match_scikit_learn_with_the_same_conversion(penalty, l1_ratio):
    X, y, clients = classification(n_classes=3)
    alpha = 0.05
    C = 1 / (alpha * len(y))
    expected = LogisticRegression(l1_ratio=l1_ratio, C=C, solver="saga", tol=1e-10, max_iter=100_000).fit(X, y)
    est = FederatedLogisticRegression(alpha, penalty=penalty, l1_ratio=l1_ratio, tol=1e-13).fit(X, y, clients=clients)
    np.testing.assert_allclose(est.coef_, expected.coef_, atol=1e-5)
    np.testing.assert_allclose(est.intercept_, expected.intercept_, atol=1e-5)


@pytest.mark.parametrize("penalty", ["mcp", "scad"])
def test_weakly_convex_penalties_end_at_a_stationary_point_of_the_pooled_objective(penalty):
    X, y, clients = classification()
    est = FederatedLogisticRegression(0.05, penalty=penalty, tol=1e-16, max_rounds=20_000).fit(X, y, clients=clients)
    # the natural residual of the pooled problem, in plain NumPy: coefficients through the
    # penalty's prox, the intercept (unpenalized) by a plain gradient step
    reg = fedopt.regularizers.MCP(0.05) if penalty == "mcp" else fedopt.regularizers.SCAD(0.05)
    r = expit(X @ est.coef_[0] + est.intercept_[0]) - y
    step = 0.5
    coef_step = reg.prox(est.coef_[0] - step * X.T @ r / len(y), step, backend="numpy")
    np.testing.assert_allclose(coef_step, est.coef_[0], atol=1e-7)
    assert abs(r.mean()) < 1e-7
    assert 0 < np.count_nonzero(est.coef_) < X.shape[1]
    lasso_like = FederatedLogisticRegression(0.05, penalty="l1", tol=1e-12).fit(X, y)
    big = np.abs(est.coef_) > 0.5
    assert (np.abs(est.coef_[big]) > np.abs(lasso_like.coef_[big])).all()  # less shrinkage of large weights


def test_the_intercept_is_not_penalized():
    X, y, _ = regression()
    est = FederatedLasso(alpha=1e3).fit(sp.csr_matrix(X), y)  # every coefficient is zero
    assert not est.coef_.any()
    np.testing.assert_allclose(est.intercept_, y.mean(), rtol=1e-4)
    Xc, yc, _ = classification()
    for penalty in ("l1", "l2", "elasticnet", "mcp", "scad"):
        clf = FederatedLogisticRegression(1e3, penalty=penalty).fit(Xc, yc)
        assert np.abs(clf.coef_).max() < 1e-3, penalty
        np.testing.assert_allclose(expit(clf.intercept_[0]), yc.mean(), atol=1e-3)


# ---- the MLP on the digits -----------------------------------------------------------------------


def test_mlp_classifies_the_digits_split_by_sorted_labels():
    X, y = load_digits(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(X / 16, y, test_size=0.2, stratify=y, random_state=0)
    est = FederatedMLPClassifier(partition="sorted", random_state=0).fit(X_train, y_train)
    # measured: 0.964 after 470 rounds (0.95-0.96 for other seeds)
    assert est.score(X_test, y_test) > 0.93
    assert est.coefs_[0].shape == (64, 64) and est.coefs_[1].shape == (64, 10)
    assert est.n_rounds_ <= 500 and est.history_["round"][-1] == est.n_rounds_
    proba = est.predict_proba(X_test)
    np.testing.assert_allclose(proba.sum(axis=1), 1)
    np.testing.assert_array_equal(est.classes_[proba.argmax(axis=1)], est.predict(X_test))


# ---- stopping ------------------------------------------------------------------------------------


def test_tol_stops_early_and_max_rounds_warns():
    X, y, _ = regression()
    est = FederatedLasso(0.1, tol=1e-6, eval_every=1).fit(X, y)  # the duality gap, scaled as scikit-learn's
    assert est.n_rounds_ < est.max_rounds and 0 <= est.dual_gap_ <= 1e-6 * np.var(y)
    assert len(est.history_) == est.n_rounds_ + 1  # a row per evaluation: every round here
    assert est.n_iter_ == est.n_rounds_  # scikit-learn's name
    with pytest.warns(ConvergenceWarning, match="did not converge in max_rounds=3 rounds"):
        est = FederatedLasso(0.1, max_rounds=3, tol=1e-30).fit(X, y)
    assert est.n_rounds_ == 3


@pytest.mark.parametrize("make, data", [
    (lambda: FederatedMLPClassifier(hidden_layer_size=8, n_clients=4), classification),
    (lambda: FederatedMLPRegressor(hidden_layer_size=8, n_clients=4), lambda: standardized(*regression())),
    (lambda: FederatedSparseRegressor(0.1, n_clients=4), regression),
    (lambda: FederatedSparseRegressor(0.1, penalty="scad", n_clients=4), regression),
], ids=["mlp-classifier", "mlp-regressor", "mcp", "scad"])
def test_a_warm_refit_of_a_converged_model_stops_within_a_few_rounds(make, data):
    # relative stationarity is measured from where a fit from scratch starts, a warm fit's too: measured
    # from its own start at the converged model, the refit would run to max_rounds (the MLPs) or 3x the rounds
    X, y, _ = data()
    est = make().set_params(warm_start=True, random_state=0).fit(X, y)
    scale = est.history_["stationarity"][0]
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est.fit(X, y)
    assert est.n_iter_ <= est.eval_every
    assert est.history_["stationarity"][-1] <= est.tol * scale


@pytest.mark.parametrize("method", ["fedcanon", "fedavg", "fedmid", "fedda"])
def test_a_method_with_a_biased_fixed_point_is_named_when_it_does_not_converge(method):
    X, y, _ = regression()
    est = FederatedLasso(0.1, algorithm=method, partition="sorted", max_rounds=300, eval_every=100)
    with pytest.warns(ConvergenceWarning, match=f"{method} may settle short of the solution: .* fednmap, zhang"):
        est.fit(X, y)
    fednmap = FederatedLasso(0.1, partition="sorted", max_rounds=300, eval_every=100).fit(X, y)
    assert est.dual_gap_ > 1e3 * fednmap.dual_gap_  # the bias, not slowness: FedNMap converges in these rounds


def test_a_fit_on_minibatches_that_stops_short_names_the_noise_floor():
    X, y, _ = regression()
    with pytest.warns(ConvergenceWarning, match="Minibatches of batch_size=8 leave a noise floor") as caught:
        FederatedLasso(0.1, batch_size=8, max_rounds=50).fit(X, y)
    assert "may settle short" not in str(caught[0].message)  # FedNMap has no biased fixed point


@pytest.mark.parametrize("penalty, concavity, cap, bound, times", [
    ("mcp", "3", "1.5", "concavity = 3", "695"), ("scad", "3.7", "1.35", "concavity - 1 = 2.7", "773")])
def test_the_warning_names_the_weak_convexity_cap_on_gamma_where_it_sets_the_rounds(penalty, concavity, cap, bound,
                                                                                    times):
    X, y = load_diabetes(return_X_y=True)  # features of standard deviation 0.048: L = 0.00959, 1 / L = 104
    est = FederatedSparseRegressor(0.1, penalty=penalty, n_clients=4, max_rounds=30, random_state=0)
    with pytest.warns(ConvergenceWarning) as caught:
        est.fit(X, y)
    message = str(caught[0].message)
    assert message.endswith(
        f"Raise max_rounds or tol, or check the step sizes. The rounds grow with 1 / gamma, and the weakly convex "
        f"penalty='{penalty}' with concavity={concavity} caps gamma at {cap} "
        f"(half of {bound}), {times} times below the local_steps / L = 1.04e+03 that the smoothness L = 0.00959 "
        "allows. Features on a larger scale (StandardScaler; then choose alpha anew) give each round's gamma more "
        "curvature to act on, and a larger concavity raises the cap.")
    with pytest.warns(ConvergenceWarning) as caught:
        est.set_params(gamma=1.0).fit(X, y)  # the user's gamma, not the cap
    assert "caps gamma" not in str(caught[0].message)


@pytest.mark.parametrize("method", SMOOTH_METHODS)
def test_methods_without_a_prox_fit_alpha_zero_and_refuse_a_penalty(method):
    X, y, clients = regression(n=120, d=4)
    lasso = FederatedLasso(0.0, algorithm=method, tol=1e-12).fit(X, y, clients=clients)
    exact = LinearRegression().fit(X, y)
    np.testing.assert_allclose(lasso.coef_, exact.coef_, atol=1e-4)
    assert lasso.intercept_ == pytest.approx(exact.intercept_, abs=1e-4)
    X, y, clients = classification(n=120, d=4)
    logistic = FederatedLogisticRegression(0.0, algorithm=method, tol=1e-12).fit(X, y, clients=clients)
    exact = LogisticRegression(C=np.inf, tol=1e-10).fit(X, y)  # an intercept in the problem, left free by Zero
    np.testing.assert_allclose(logistic.coef_, exact.coef_, atol=1e-4)
    np.testing.assert_allclose(logistic.intercept_, exact.intercept_, atol=1e-4)
    with pytest.warns(ConvergenceWarning):  # the network's elastic net with alpha=0 too
        FederatedMLPRegressor(4, alpha=0.0, algorithm=method, max_rounds=10, tol=0).fit(X, y.astype(float))
    for estimator in (FederatedLasso(0.1), FederatedElasticNet(0.1), FederatedLogisticRegression(penalty="l2"),
                      FederatedMLPClassifier()):
        with pytest.raises(ValueError, match=f"algorithm='{method}' has no prox step.*needs alpha=0, got alpha=.*"
                                             "algorithm='fednmap'"):
            estimator.set_params(algorithm=method).fit(X, y)
    with pytest.raises(ValueError, match="regularizer Zero"):  # SMOOTH_METHODS: the methods that refuse a penalty
        make(method).check(None, R.L1(1.0))


def test_scaffnew_takes_local_steps_as_its_mean_step_count():
    X, y, clients = regression(n=120, d=4)
    fits = {steps: FederatedLasso(0.0, algorithm="scaffnew", local_steps=steps, max_rounds=3, tol=0, random_state=0)
            for steps in (2, 20)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for estimator in fits.values():
            estimator.fit(X, y, clients=clients)
    assert [fits[k]._state_key[0]["comm_prob"] for k in (2, 20)] == [0.5, 0.05]  # 1 / local_steps
    evals = {k: fits[k].history_["grad_evals"][-1] for k in fits}
    assert evals[20] > 3 * evals[2]  # Geometric(p) local steps: mean 1/p per round


@pytest.mark.parametrize("method", ["feddr", "fedadmm", "scaffnew"])
def test_methods_without_a_server_step_refuse_lr_server(method):
    X, y, _ = regression(n=60, d=3)
    with pytest.raises(ValueError, match=f"algorithm='{method}' has no server step size, so it cannot take "
                                         r"lr_server=0.5: leave lr_server=1.0, or use one of fednmap, "):
        FederatedLasso(0.0, algorithm=method, lr_server=0.5).fit(X, y)


# ---- partial_fit ---------------------------------------------------------------------------------


def two_batches(X):
    """The rows below and above the median of feature 0: batches whose features have different means."""
    order = np.argsort(X[:, 0])
    return order[: len(order) // 2], order[len(order) // 2 :]


@pytest.mark.parametrize("algorithm", ["fednmap", "fedcanon", "fedda"])
def test_partial_fit_on_a_batch_with_another_mean_starts_from_the_model(algorithm):
    # the state holds the intercept of X - mu for the first batch's mu, and FedNMap's pre-prox point z
    # is made with gamma = local_steps / L of that batch: steps of 1e-12 must leave the model in place
    X, y, _ = classification()
    first, second = two_batches(X)
    est = FederatedLogisticRegression(0.01, algorithm=algorithm, n_clients=3, eval_every=50, random_state=0)
    for _ in range(2):
        est.partial_fit(X[first], y[first], classes=[0, 1])
    coef, intercept, scores = est.coef_.copy(), est.intercept_.copy(), est.decision_function(X)
    seconds = est.history_["seconds"][-1]
    est.set_params(lr_local=1e-12, lr_server=1e-12).partial_fit(X[second], y[second])
    np.testing.assert_allclose(est.coef_, coef, rtol=0, atol=1e-9)
    np.testing.assert_allclose(est.intercept_, intercept, rtol=0, atol=1e-9)
    np.testing.assert_allclose(est.decision_function(X), scores, rtol=0, atol=1e-9)
    assert est.n_iter_ == 50 and est.history_["round"][-1] == 150  # the rounds are numbered on
    assert est.history_["seconds"][0] >= seconds  # and timed on


def test_partial_fit_restarts_on_another_feature_mean_alone():
    """The steps stay fixed over both batches, so only the centering of the intercept tells them apart."""
    X, y, _ = classification()
    first, second = two_batches(X)
    est = FederatedLogisticRegression(0.01, n_clients=3, gamma=1.0, lr_local=0.1, eval_every=5, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y)  # a model away from 0, whose intercept depends on the centering
    est.set_params(lr_local=1e-12, lr_server=1e-12).partial_fit(X[first], y[first])
    coef, intercept = est.coef_.copy(), est.intercept_.copy()
    est.partial_fit(X[second], y[second])
    np.testing.assert_allclose(est.coef_, coef, rtol=0, atol=1e-9)
    np.testing.assert_allclose(est.intercept_, intercept, rtol=0, atol=1e-9)


def test_fedda_restarted_on_another_batch_keeps_its_elapsed_prox_weight():
    # FedDA reports prox_{a_t phi}(dual) with a_t growing with the round t: a dual at the model would zero it
    X, y, _ = classification()
    first, second = two_batches(X)
    est = FederatedLogisticRegression(0.01, algorithm="fedda", n_clients=3, eval_every=50, random_state=0)
    for _ in range(2):
        est.partial_fit(X[first], y[first], classes=[0, 1])
    size = np.abs(est.coef_).sum()
    est.set_params(eval_every=1).partial_fit(X[second], y[second])
    assert np.abs(est.coef_).sum() > 0.5 * size  # one round of its own steps, not a collapse to 0


def test_partial_fit_on_a_batch_of_another_smoothness_keeps_the_lasso_coefficients():
    # no intercept among the Lasso's parameters, but the default gamma = local_steps / L follows the batch
    X, y, _ = regression()
    first, second = two_batches(X)
    est = FederatedLasso(0.1, n_clients=3, eval_every=50, random_state=0)
    for _ in range(2):
        est.partial_fit(X[first], y[first])
    coef = est.coef_.copy()
    est.set_params(lr_local=1e-12, lr_server=1e-12).partial_fit(X[second], y[second])
    np.testing.assert_allclose(est.coef_, coef, rtol=0, atol=1e-9)
    # its intercept is the batch's best one for these coefficients, mean(y) - mean(X) w
    assert est.intercept_ == pytest.approx(y[second].mean() - X[second].mean(axis=0) @ coef, abs=1e-9)


# ---- clients, composition, persistence ----------------------------------------------------------


def test_clients_define_the_federation():
    X, y, clients = classification()
    est = FederatedLogisticRegression(max_rounds=5, tol=0, eval_every=5)
    with pytest.warns(ConvergenceWarning):
        est.fit(X, y, clients=np.where(clients < 2, "a", "b"))  # two clients
        floats_two = est.history_["floats_up"][-1]
        est.fit(X, y)  # the default: n_clients=10 iid clients
    assert est.history_["floats_up"][-1] == 5 * floats_two


@pytest.mark.parametrize("clients, got", [(np.zeros(199), r"shape \(199,\)"), (np.zeros((1, 200)), r"shape \(1, 200\)"),
                                          ("abc", "the scalar 'abc'")])
def test_a_bad_clients_array_is_refused_by_name(clients, got):
    X, y, _ = regression(n=200, d=3)
    with pytest.raises(ValueError, match=rf"clients must be a 1-D array of one client id per sample, shape \(200,\) "
                                         rf".*got {got}"):
        FederatedLasso().fit(X, y, clients=clients)


@pytest.mark.parametrize("sparse", [False, True])
def test_a_client_of_zero_rows_and_an_all_zero_design_fit(sparse):
    """A block without nonzero entries has smoothness 0 (ARPACK found no start vector there)."""
    X, y, clients = regression(n=60, d=4)
    X[clients == 0] = 0
    convert = sp.csr_matrix if sparse else np.asarray
    fitted = FederatedLasso(0.1, fit_intercept=False).fit(convert(X), y, clients=clients)
    exact = Lasso(0.1, fit_intercept=False).fit(X, y)
    np.testing.assert_allclose(fitted.coef_, exact.coef_, atol=1e-3)
    zero = FederatedLasso(0.1).fit(convert(np.zeros_like(X)), y)  # centering leaves nothing
    np.testing.assert_array_equal(zero.coef_, 0.0)
    assert zero.intercept_ == pytest.approx(y.mean())


def test_pipeline_and_grid_search_with_client_ids():
    X, y, clients = classification(n_classes=3)
    pipe = make_pipeline(StandardScaler(), FederatedLogisticRegression())
    search = GridSearchCV(pipe, {"federatedlogisticregression__alpha": [1e-2, 1e-1]}, cv=GroupKFold(3))
    search.fit(X, y, groups=np.arange(len(y)) % 3, federatedlogisticregression__clients=clients)
    assert search.best_params_["federatedlogisticregression__alpha"] in (1e-2, 1e-1)
    assert search.best_score_ > 0.5  # chance is 1/3; scikit-learn's LogisticRegression scores 0.62
    X, y, _ = regression(n=400)
    lasso = GridSearchCV(FederatedLasso(), {"alpha": [0.01, 0.1, 10.0]}, cv=3).fit(X[:300], y[:300])
    assert lasso.best_params_["alpha"] < 10 and lasso.best_estimator_.score(X[300:], y[300:]) > 0.9


@pytest.mark.parametrize("estimator", [FederatedLasso(0.1), FederatedLogisticRegression(penalty="elasticnet"),
                                       FederatedMLPClassifier(max_rounds=20, tol=0)])
def test_clone_and_pickle_round_trip(estimator):
    X, y = load_iris(return_X_y=True)
    if isinstance(estimator, FederatedLasso):
        y = X[:, 0] - X[:, 1]
    copy = clone(estimator)
    assert copy.get_params() == estimator.get_params() and not hasattr(copy, "n_rounds_")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fitted = estimator.set_params(random_state=0).fit(X, y)
    restored = pickle.loads(pickle.dumps(fitted))
    np.testing.assert_array_equal(restored.predict(X), fitted.predict(X))
    np.testing.assert_array_equal(restored.history_["objective"], fitted.history_["objective"])
    assert restored.n_rounds_ == fitted.n_rounds_


def test_invalid_parameters_raise_value_errors():
    X, y, _ = classification()
    for params in ({"penalty": "l3"}, {"l1_ratio": 1.5, "penalty": "elasticnet"}, {"n_clients": 0},
                   {"alpha": -1.0}, {"algorithm": "fedprox2"}, {"partition": "random"}, {"lr_local": 0.0}):
        with pytest.raises(ValueError):
            FederatedLogisticRegression(**params).fit(X, y)
    with pytest.raises(ValueError, match="at least 2 classes"):
        FederatedLogisticRegression().fit(X, np.zeros(len(y)))
    for method in ("depositum", "prox-dsgt", "lippax"):  # no server: they would ignore the steps and never converge
        with pytest.raises(ValueError, match=f"algorithm='{method}' has no server: the estimators run fednmap, "):
            FederatedLasso(algorithm=method).fit(X, y)
    with pytest.raises(TypeError, match="dense data is required"):
        FederatedMLPClassifier().fit(sp.csr_matrix(X), y)


@pytest.mark.parametrize("estimator, message", [
    (FederatedLasso(fit_intercept="no"), "fit_intercept must be True or False, got 'no'"),
    (FederatedLasso(fit_intercept=None), "fit_intercept must be True or False, got None"),
    (FederatedLogisticRegression(warm_start=1), "warm_start must be True or False, got 1"),
    (FederatedElasticNet(l1_ratio=True), r"l1_ratio must be a finite number in \[0, 1\], got True"),
    (FederatedElasticNet(l1_ratio=np.nan), r"l1_ratio must be a finite number in \[0, 1\], got nan"),
    (FederatedLogisticRegression(penalty="elasticnet", l1_ratio=1.5), r"l1_ratio must be .* in \[0, 1\], got 1.5"),
    (FederatedMLPRegressor(l1_ratio=-0.1), r"l1_ratio must be .* in \[0, 1\], got -0.1"),
    (FederatedSparseRegressor(concavity=-1), r"concavity must be a finite number > 0 for penalty='mcp'.*got -1"),
    (FederatedSparseRegressor(penalty="scad", concavity=1.5), "concavity must be a finite number > 2 for "
                                                               "penalty='scad'.*got 1.5"),
    (FederatedLogisticRegression(penalty="mcp", concavity=True), "concavity must be .* got True"),
    (FederatedMLPRegressor(hidden_layer_size=True), "hidden_layer_size must be an integer >= 1, got True"),
    (FederatedMLPClassifier(hidden_layer_size=2.0), "hidden_layer_size must be an integer >= 1, got 2.0"),
])
def test_parameter_errors_name_the_estimators_own_parameters(estimator, message):
    X, y, _ = classification(n=60, d=3)
    with pytest.raises(ValueError, match=message):
        estimator.fit(X, y)


def test_lr_server_none_is_the_default_one():
    X, y, _ = regression()
    for estimator in (FederatedLasso(0.1, random_state=0),
                      FederatedMLPRegressor(hidden_layer_size=4, max_rounds=20, random_state=0)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            default = clone(estimator).set_params(lr_server=1.0).fit(X, y)
            none = clone(estimator).set_params(lr_server=None).fit(X, y)
        np.testing.assert_array_equal(none.predict(X), default.predict(X))
        assert none.n_iter_ == default.n_iter_


@pytest.mark.parametrize("estimator, message", [
    (FederatedSparseRegressor(gamma=100), "gamma=100 is too large for penalty='mcp' with concavity=3: its prox needs "
                                          "gamma < concavity = 3; lower gamma, or leave gamma=None for the default, "
                                          "which is capped at half that bound"),
    (FederatedSparseRegressor(concavity=5, gamma=5), "gamma=5 is too large for penalty='mcp' with concavity=5: its "
                                                     "prox needs gamma < concavity = 5;"),
    (FederatedLogisticRegression(penalty="scad", gamma=10),
     "gamma=10 is too large for penalty='scad' with concavity=3.7: its prox needs gamma < concavity - 1 = 2.7;"),
    # exactly at the bound, where gamma * (1 / gamma) rounds below 1 (the prox divided by zero)
    (FederatedSparseRegressor(concavity=49, gamma=49), "gamma=49 is too large for penalty='mcp' with concavity=49: "
                                                       "its prox needs gamma < concavity = 49;"),
    (FederatedSparseRegressor(penalty="scad", concavity=2.27, gamma=2.27 - 1),
     "gamma=1.27 is too large for penalty='scad' with concavity=2.27: its prox needs gamma < concavity - 1 = 1.27;"),
    (FederatedLogisticRegression(penalty="scad", concavity=2.29, gamma=2.29 - 1),
     "gamma=1.29 is too large for penalty='scad' with concavity=2.29: its prox needs gamma < concavity - 1 = 1.29;"),
    (FederatedLogisticRegression(penalty="scad", algorithm="fedmid", lr_local=1.0),  # the method's own prox step
     "lr_server * lr_local * local_steps (FedMiD's server prox step)=10 is too large for penalty='scad' with "
     "concavity=3.7: the prox of a 0.37037-weakly convex regularizer needs"),
])
def test_a_prox_parameter_too_large_for_the_penalty_is_named_in_the_estimators_terms(estimator, message):
    X, y, _ = classification(n=60, d=3)
    with pytest.raises(ValueError, match=re.escape(message)) as caught:
        estimator.fit(X, y if isinstance(estimator, FederatedLogisticRegression) else y.astype(float))
    assert "step=" not in str(caught.value) and "Masked" not in str(caught.value)


@pytest.mark.parametrize("partition", ["dirichlet", "shards"])
def test_label_partitions_are_refused_for_regressors_and_name_n_clients_for_classifiers(partition):
    X, y, _ = classification(n=60, d=3)
    for regressor in (FederatedLasso(), FederatedMLPRegressor()):
        with pytest.raises(ValueError, match=f"partition='{partition}' splits the samples by class label.*"
                                             f"{type(regressor).__name__} takes partition='iid' or 'sorted'"):
            regressor.set_params(partition=partition).fit(X, y.astype(float))
    with pytest.raises(ValueError, match=f"partition='{partition}' .*n_clients=50.* use .*partition='iid'") as caught:
        FederatedLogisticRegression(partition=partition, n_clients=50).fit(X, y)
    assert "shards_per_client" not in str(caught.value) and "alpha" not in str(caught.value)


@pytest.mark.parametrize("partition", ["dirichlet", "shards"])
def test_a_regressor_given_clients_fits_whatever_its_partition_as_the_message_offers(partition):
    X, y, clients = regression()
    given = FederatedLasso(0.1, partition=partition, random_state=0).fit(X, y, clients=clients)
    iid = FederatedLasso(0.1, random_state=0).fit(X, y, clients=clients)
    np.testing.assert_array_equal(given.coef_, iid.coef_)  # the clients are the federation: no partition is made


def test_estimators_module_loads_lazily():
    assert fedopt.estimators.FederatedLasso is FederatedLasso
    assert "estimators" in dir(fedopt)
