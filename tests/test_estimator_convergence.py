"""The estimators' stopping rule: duality gaps that bound the suboptimality, defaults at scikit-learn's accuracy."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.special import logsumexp
from sklearn.datasets import load_breast_cancer, load_diabetes, load_digits, load_iris
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import Lasso, LogisticRegression
from sklearn.preprocessing import StandardScaler

import fedopt
from fedopt.datasets.partition import _dirichlet
from fedopt.estimators import (
    FederatedLasso,
    FederatedLogisticRegression,
    FederatedMLPClassifier,
    FederatedSparseRegressor,
    _gap,
)
from fedopt.estimators._gap import _balanced_probabilities, least_squares_gap, least_squares_scale, logistic_gap

# ---- data and objectives -------------------------------------------------------------------------


def dirichlet_clients(labels, n_clients=4, seed=0):
    """Client ids of a Dirichlet(0.5) label-skew split of ``labels`` (class codes)."""
    parts = _dirichlet(labels, labels.max() + 1, n_clients, 0.5, None, np.random.default_rng(seed))
    ids = np.empty(len(labels), dtype=int)
    for client, rows in enumerate(parts):
        ids[rows] = client
    return ids


def split(name, labels):
    """The estimator's keyword arguments and ``fit``'s ``clients`` of a 4-client split."""
    if name == "sorted":
        return {"n_clients": 4, "partition": "sorted"}, None
    return {}, dirichlet_clients(labels)


def lasso_objective(X, y, coef, intercept, alpha):
    return 0.5 * np.mean((y - X @ coef - intercept) ** 2) + alpha * np.abs(coef).sum()


def logistic_objective(X, codes, coef, intercept, l1, l2=0.0):
    """Mean log-loss (binary: ``coef`` of one row, class 1's margin) + ``l1 ||W||_1 + l2 / 2 ||W||^2``."""
    M = X @ coef.T + intercept
    Z = np.column_stack([np.zeros(len(M)), M]) if coef.shape[0] == 1 else M
    loss = logsumexp(Z, axis=1) - Z[np.arange(len(Z)), codes]
    return loss.mean() + l1 * np.abs(coef).sum() + 0.5 * l2 * np.sum(coef**2)


def standardized(loader):
    X, y = loader(return_X_y=True)
    return StandardScaler().fit_transform(X), y


# ---- the Lasso on the diabetes data (issue example) ----------------------------------------------


@pytest.mark.parametrize("partition", ["sorted", "dirichlet"])
def test_lasso_defaults_match_scikit_learn_on_diabetes(partition):
    X, y = load_diabetes(return_X_y=True)
    exact = Lasso(alpha=0.1, tol=1e-14, max_iter=1_000_000).fit(X, y)
    default = Lasso(alpha=0.1).fit(X, y)
    options, clients = split(partition, np.digitize(y, np.quantile(y, [0.25, 0.5, 0.75])))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est = FederatedLasso(alpha=0.1, random_state=0, **options).fit(X, y, clients=clients)
    # measured: about 2200 rounds, coefficients 0.006 from the exact ones (scikit-learn's: 0.03)
    assert est.n_rounds_ < est.max_rounds
    assert np.abs(est.coef_ - exact.coef_).max() <= np.abs(default.coef_ - exact.coef_).max()
    np.testing.assert_allclose(est.coef_, default.coef_, atol=0.05)
    best = lasso_objective(X, y, exact.coef_, exact.intercept_, 0.1)
    ours = lasso_objective(X, y, est.coef_, est.intercept_, 0.1)
    assert 0 <= ours - best <= est.dual_gap_ <= est.tol * np.var(y)


# ---- gaps bound the suboptimality ----------------------------------------------------------------


@pytest.mark.parametrize("sparse", [False, True])
def test_lasso_gap_bounds_the_suboptimality_along_the_run(sparse):
    X, y = load_diabetes(return_X_y=True)
    exact = Lasso(alpha=0.1, tol=1e-14, max_iter=1_000_000).fit(X, y)
    best = lasso_objective(X, y, exact.coef_, exact.intercept_, 0.1)
    uniform = np.full(len(y), 1 / len(y))
    assert least_squares_gap(X, y, exact.coef_, exact.intercept_, 0.1, 0.0, True, uniform) <= 1e-9
    assert least_squares_scale(y, True, uniform) == pytest.approx(np.var(y))
    Xfit = sp.csr_matrix(X) if sparse else X
    for rounds in (10, 30, 100):  # the gap reaches 0.0 at about 190 rounds (sparse X is centered too)
        with pytest.warns(ConvergenceWarning, match="duality gap"):
            est = FederatedLasso(alpha=0.1, tol=0, max_rounds=rounds, n_clients=4, random_state=0).fit(Xfit, y)
        gap = least_squares_gap(X, y, est.coef_, est.intercept_, 0.1, 0.0, True, uniform)
        assert gap == pytest.approx(est.dual_gap_, rel=1e-6, abs=1e-9)
        assert -1e-12 * best <= lasso_objective(X, y, est.coef_, est.intercept_, 0.1) - best <= gap + 1e-12 * best


@pytest.mark.parametrize("loader", [load_breast_cancer, load_iris])
@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("l1_ratio", [1.0, 0.5, 0.0])
def test_logistic_gap_is_zero_at_the_optimum_and_bounds_the_suboptimality(loader, fit_intercept, l1_ratio):
    X, y = standardized(loader)
    codes = np.unique(y, return_inverse=True)[1]
    alpha, n = 0.01, len(y)
    l1, l2 = alpha * l1_ratio, alpha * (1 - l1_ratio)
    exact = LogisticRegression(C=1 / (alpha * n), l1_ratio=l1_ratio, solver="saga", tol=1e-12, max_iter=100_000,
                               fit_intercept=fit_intercept).fit(X, y)
    best = logistic_objective(X, codes, exact.coef_, exact.intercept_, l1, l2)
    uniform = np.full(n, 1 / n)
    assert abs(logistic_gap(X, codes, exact.coef_, exact.intercept_, l1, l2, fit_intercept, uniform)) <= 1e-8
    rng = np.random.default_rng(0)
    for size in (1e-3, 1e-1, 1.0):
        coef = exact.coef_ + size * rng.normal(size=exact.coef_.shape)
        intercept = exact.intercept_ + (size * rng.normal(size=exact.intercept_.shape) if fit_intercept else 0)
        gap = logistic_gap(X, codes, coef, intercept, l1, l2, fit_intercept, uniform)
        assert 0 <= logistic_objective(X, codes, coef, intercept, l1, l2) - best <= gap


@pytest.mark.parametrize("dtype", [np.float32, np.uint8])
def test_gaps_of_float32_and_uint8_features_are_those_of_their_float64_copy(dtype, monkeypatch):
    """The products convert float32 and uint8 rows to float64 a chunk at a time (7 rows here: chunks
    of 7 and a last one of 1), with the same result as on a float64 copy of the features."""
    monkeypatch.setattr(_gap, "CHUNK_ROWS", 7)
    rng = np.random.default_rng(0)
    X = rng.integers(0, 256, (50, 6)).astype(dtype)
    labels, target = rng.integers(0, 3, 50), rng.standard_normal(50)
    coef, shares = 0.01 * rng.standard_normal((3, 6)), rng.uniform(0.5, 1.5, 50) / 50
    for gap, arguments in ((_gap.logistic_gap, (labels, coef, np.zeros(3), 1e-3, 1e-2, True, shares)),
                           (_gap.least_squares_gap, (target, coef[0], 0.1, 1e-3, 0.0, True, shares))):
        assert gap(X, *arguments) == pytest.approx(gap(X.astype(np.float64), *arguments), rel=1e-12)


@pytest.mark.parametrize("seed", [0, 16])  # logits on which a rounding-blind line search stalled near 2e-10
def test_rebalanced_intercepts_meet_the_class_totals(seed):
    """The logistic gap's dual point needs probabilities whose weighted class totals are the
    labels' (its intercept shift): met to the 1e-12 the Newton iteration aims at."""
    rng = np.random.default_rng(seed)
    n, k = 1797, 10
    logits, labels = 3 * rng.standard_normal((n, k)), rng.integers(0, k, n)
    shares, onehot = np.full(n, 1 / n), np.eye(k)[labels]
    probabilities = _balanced_probabilities(logits, shares, shares @ onehot)
    assert np.abs(shares @ probabilities - shares @ onehot).max() <= 1e-12


# ---- the logistic defaults reach scikit-learn's objective -----------------------------------------


def check_logistic_defaults(X, y, partition, penalty="l1", l1_ratio=1.0, alpha=0.01):
    """The defaults end without warning at an objective at most scikit-learn's (at its defaults) + 1e-6."""
    codes = np.unique(y, return_inverse=True)[1]
    C, l1, l2 = 1 / (alpha * len(y)), alpha * l1_ratio, alpha * (1 - l1_ratio)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # saga's 100 epochs
        default = LogisticRegression(C=C, l1_ratio=l1_ratio, solver="saga" if l1_ratio else "lbfgs").fit(X, y)
    options, clients = split(partition, codes)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est = FederatedLogisticRegression(alpha, penalty=penalty, l1_ratio=l1_ratio, random_state=0,
                                          **options).fit(X, y, clients=clients)
    ours = logistic_objective(X, codes, est.coef_, est.intercept_, l1, l2)
    theirs = logistic_objective(X, codes, default.coef_, default.intercept_, l1, l2)
    assert ours <= theirs + 1e-6 * theirs
    assert est.dual_gap_ <= est.tol * np.log(len(est.classes_))  # the class entropy is at most log K
    return est


@pytest.mark.parametrize("partition", ["sorted", "dirichlet"])
def test_logistic_defaults_reach_scikit_learn_on_iris(partition):
    check_logistic_defaults(*standardized(load_iris), partition)


@pytest.mark.slow
@pytest.mark.parametrize("partition", ["sorted", "dirichlet"])
@pytest.mark.parametrize("penalty, l1_ratio", [("l1", 1.0), ("l2", 0.0), ("elasticnet", 0.5)])
def test_logistic_defaults_reach_scikit_learn_on_breast_cancer(partition, penalty, l1_ratio):
    check_logistic_defaults(*standardized(load_breast_cancer), partition, penalty, l1_ratio)


@pytest.mark.slow
def test_logistic_defaults_reach_scikit_learn_on_digits():
    # l2: a few hundred rounds (the l1 penalty takes thousands of rounds on 10 classes, 74 s here)
    check_logistic_defaults(*standardized(load_digits), "dirichlet", "l2", 0.0)


# ---- relative stationarity at rounding level ------------------------------------------------------


def test_a_fit_that_starts_at_rounding_level_stops_and_a_nearly_constant_target_still_fits():
    """A constant ``y`` centers to rounding noise and its exact fit is 0: the relative rule alone
    chased ``tol`` times that noise for ``max_rounds``. A target that is nearly constant (signal
    ``1e-6`` of its mean) is still fitted to the rule's accuracy."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3)) + 2
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        constant = FederatedLasso(0.0, max_rounds=200).fit(X, np.full(200, 5.0))
        assert constant.n_iter_ == 0 and np.abs(constant.coef_).max() < 1e-20
        y = 5.0 + 1e-6 * (X @ [1.0, -2.0, 0.5])
        nearly = FederatedLasso(0.0, max_rounds=2000).fit(X, y)
    np.testing.assert_allclose(nearly.coef_, [1e-6, -2e-6, 0.5e-6], rtol=1e-3)


# ---- the warning -----------------------------------------------------------------------------------


def test_a_warm_fit_where_zero_is_stationary_is_measured_from_its_own_start():
    """The zero start of an MCP fit at 1.5 alpha_max is stationary: its residual 0 made the rule tol * 0,
    which the warm start could not reach, and the warning read 'relative stationarity is inf'."""
    X, y = load_diabetes(return_X_y=True)
    alpha_max = np.abs(X.T @ (y - y.mean())).max() / len(y)
    est = FederatedSparseRegressor(alpha=0.1 * alpha_max, warm_start=True, max_rounds=30, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.set_params(alpha=1.5 * alpha_max).fit(X, y)
    messages = [str(w.message) for w in caught]
    assert [w.category for w in caught] == [ConvergenceWarning], messages
    ratio = float(messages[0].split("relative stationarity is ")[1].split(" ")[0])
    assert 0 < ratio < 1  # measured from the warm start's own residual, and below it


def test_a_float32_warning_names_the_tol_it_was_held_to_and_the_users():
    X, _ = standardized(load_iris)
    with pytest.warns(ConvergenceWarning, match=r"duality gap is \S+ > tol=1e-05 \(from 1e-07, for float32\) \* "):
        FederatedLasso(0.1, tol=1e-7, max_rounds=3, random_state=0).fit(X.astype(np.float32), X[:, 0] - X[:, 1])



@pytest.mark.parametrize("estimator, rule", [
    (FederatedLasso(0.1), "duality gap"),
    (FederatedLogisticRegression(), "duality gap"),
    (FederatedLogisticRegression(penalty="mcp"), "relative stationarity"),
    (FederatedLogisticRegression(alpha=0.0), "relative stationarity"),
    (FederatedMLPClassifier(), "relative stationarity"),
])
def test_max_rounds_before_tol_warns(estimator, rule):
    X, y = standardized(load_iris)
    if isinstance(estimator, FederatedLasso):
        y = X[:, 0] - X[:, 1] + 0.1 * np.sin(np.arange(len(y)))
    with pytest.warns(ConvergenceWarning, match=f"did not converge in max_rounds=3 rounds: the {rule}"):
        estimator.set_params(max_rounds=3, random_state=0).fit(X, y)
    assert estimator.n_rounds_ == 3 and estimator.history_["round"][-1] == 3
    assert np.isnan(getattr(estimator, "dual_gap_", np.nan)) == (rule != "duality gap")


def test_the_warning_names_the_conditioning_and_features_far_from_a_common_scale():
    """On the digits' pixels (standard deviations 0.02 to 6.5) ``FederatedLogisticRegression(0.01)``
    did not converge in 10 000 rounds, and took 4 280 standardized: the warning says what sets the
    rounds, and points at the features' scales where they spread over more than 10x."""
    X, y = load_digits(return_X_y=True)
    fits = {"raw": X, "standardized": StandardScaler().fit_transform(X),
            "standardized, times 100": 100 * StandardScaler().fit_transform(X)}  # a common scale, not 1
    for name, features in fits.items():
        for estimator, measure in ((FederatedLogisticRegression(), r"the smoothness L = [\d.]+"),
                                   (FederatedLogisticRegression(penalty="l2", alpha=0.01),
                                    r"the condition number L / l2 = [\d.e+]+")):
            with pytest.warns(ConvergenceWarning, match=f"The rounds grow with {measure}") as caught:
                estimator.set_params(max_rounds=3, random_state=0).fit(features, y)
            hint = "which features on a common scale (StandardScaler) usually lower: these have standard deviations"
            assert (hint in str(caught[0].message)) == (name == "raw"), caught[0].message


# ---- fedopt.run's stop hook ------------------------------------------------------------------------


def test_run_and_run_batch_stop_when_the_stop_criterion_holds():
    from fedopt.datasets import partition
    from fedopt.problems import LeastSquares

    X, y = load_diabetes(return_X_y=True)
    problem = LeastSquares(partition(X, y, 4, seed=0), weights="samples", fit_intercept=True, backend="numba")
    seen = []

    def stop(state, row):
        seen.append(state.x.shape)
        return row["round"] >= 20

    result = fedopt.run("fednmap", problem, fedopt.regularizers.L1(0.1), rounds=100, eval_every=5, stop=stop,
                        lr_local=0.1, gamma=1.0, local_steps=2)
    assert result.converged and result.state.round == 20 and set(seen) == {(problem.n_params,)}
    results = fedopt.run_batch("fednmap", problem, fedopt.regularizers.L1(0.1), rounds=100, seeds=[0, 1],
                               eval_every=5, stop=stop, lr_local=0.1, gamma=1.0, local_steps=2)
    assert all(r.converged and r.state.round == 20 for r in results)
    assert set(seen) == {(problem.n_params,)}
