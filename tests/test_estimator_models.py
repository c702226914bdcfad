"""The elastic net, the MCP/SCAD regressor and the MLP regressor: each at its centralized answer."""

import warnings

import numpy as np
import pytest
from scipy.special import expit
from sklearn.datasets import load_diabetes
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import ElasticNet
from sklearn.neural_network import MLPRegressor
from sklearn.preprocessing import StandardScaler

from fedopt.estimators import FederatedElasticNet, FederatedMLPRegressor, FederatedSparseRegressor


def diabetes():
    X, y = load_diabetes(return_X_y=True)
    clients = np.argsort(np.argsort(y)) * 4 // len(y)  # 4 clients holding sorted targets
    return X, y, clients


def elastic_net_objective(X, y, coef, intercept, alpha, l1_ratio):
    """scikit-learn's ElasticNet objective, written out."""
    residual = y - X @ coef - intercept
    return (0.5 * np.mean(residual**2) + alpha * l1_ratio * np.abs(coef).sum()
            + 0.5 * alpha * (1 - l1_ratio) * np.sum(coef**2))


def mcp_value(w, lam, gamma):
    """skglm's MCPenalty: ``lam |w| - w^2 / (2 gamma)`` up to ``gamma lam``, then ``gamma lam^2 / 2``."""
    a = np.abs(w)
    return np.where(a <= gamma * lam, lam * a - a * a / (2 * gamma), 0.5 * gamma * lam * lam).sum()


def scad_value(w, lam, a):
    t = np.abs(w)
    middle = (2 * a * lam * t - t * t - lam * lam) / (2 * (a - 1))
    return np.where(t <= lam, lam * t, np.where(t <= a * lam, middle, 0.5 * (a + 1) * lam * lam)).sum()


def firm(z, lam, gamma):
    """The minimiser of ``(w - z)^2 / 2 + MCP(w)`` (gamma > 1): firm thresholding."""
    a = np.abs(z)
    return np.where(a <= lam, 0.0, np.where(a <= gamma * lam, np.sign(z) * (a - lam) / (1 - 1 / gamma), z))


def scad_threshold(z, lam, a):
    """The minimiser of ``(w - z)^2 / 2 + SCAD(w)`` (a > 2)."""
    t = np.abs(z)
    soft = np.sign(z) * np.maximum(t - lam, 0.0)
    middle = np.sign(z) * ((a - 1) * t - a * lam) / (a - 2)
    return np.where(t <= 2 * lam, soft, np.where(t <= a * lam, middle, z))


def orthogonal_design(n=200, d=8, seed=0):
    """Centered features with ``X^T X / n = I``: penalized least squares separates per coordinate."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(np.column_stack([np.ones(n), rng.normal(size=(n, d))]))
    X = np.sqrt(n) * Q[:, 1:]  # orthogonal to the ones column: centered
    coef = np.array([3.0, -2.5, 1.2, -0.8, 0.4, 0.0, 0.0, 0.1])[:d]
    y = X @ coef + 5.0 + 0.3 * rng.normal(size=n)
    return X, y, rng.integers(0, 5, size=n)


@pytest.mark.parametrize("l1_ratio", [0.5, 0.1])
def test_elastic_net_reaches_scikit_learns_objective(l1_ratio):
    X, y, clients = diabetes()
    alpha = 0.01
    exact = ElasticNet(alpha=alpha, l1_ratio=l1_ratio, tol=1e-14, max_iter=1_000_000).fit(X, y)
    est = FederatedElasticNet(alpha, l1_ratio=l1_ratio, random_state=0).fit(X, y, clients=clients)
    best = elastic_net_objective(X, y, exact.coef_, exact.intercept_, alpha, l1_ratio)
    ours = elastic_net_objective(X, y, est.coef_, est.intercept_, alpha, l1_ratio)
    assert est.n_iter_ < est.max_rounds
    assert 0 <= ours - best <= est.dual_gap_ <= est.tol * np.var(y)
    assert ours - best <= 1e-6 * best
    assert np.count_nonzero(est.coef_) == np.count_nonzero(exact.coef_)


@pytest.mark.parametrize("penalty", ["mcp", "scad"])
def test_sparse_regressor_reaches_the_closed_form_on_an_orthogonal_design(penalty):
    X, y, clients = orthogonal_design()
    lam, concavity = 0.5, 3.0 if penalty == "mcp" else 3.7
    z = X.T @ (y - y.mean()) / len(y)
    expected = firm(z, lam, concavity) if penalty == "mcp" else scad_threshold(z, lam, concavity)
    est = FederatedSparseRegressor(lam, penalty=penalty, tol=1e-14, random_state=0).fit(X, y, clients=clients)
    value = mcp_value if penalty == "mcp" else scad_value

    def objective(coef, intercept):
        return 0.5 * np.mean((y - X @ coef - intercept) ** 2) + value(coef, lam, concavity)

    assert abs(objective(est.coef_, est.intercept_) - objective(expected, y.mean())) <= 1e-6 * objective(
        expected, y.mean())
    np.testing.assert_allclose(est.coef_, expected, atol=1e-6)
    np.testing.assert_allclose(est.intercept_, y.mean(), atol=1e-6)
    # the large coefficients are not shrunk (the Lasso would shrink each by lam)
    assert np.abs(expected).max() == pytest.approx(3.0, abs=0.2) and est.coef_[0] == pytest.approx(z[0], abs=1e-6)
    assert np.count_nonzero(est.coef_) < X.shape[1]


def test_sparse_regressor_reaches_a_centralized_solution_on_a_strongly_convex_design():
    """A well-conditioned design (``X^T X / n`` above ``1 / gamma``) makes the MCP objective strongly
    convex: its one minimiser comes from centralized proximal gradient steps written out here."""
    rng = np.random.default_rng(3)
    n, d, lam, gamma = 400, 10, 0.3, 3.0
    X = rng.normal(size=(n, d))
    X -= X.mean(axis=0)
    y = X @ np.r_[2.0, -1.0, 0.5, np.zeros(d - 3)] + 0.5 * rng.normal(size=n)
    assert np.linalg.eigvalsh(X.T @ X / n).min() > 1 / gamma
    L = np.linalg.eigvalsh(X.T @ X / n).max()
    w = np.zeros(d)
    for _ in range(20_000):
        w = firm(w - X.T @ (X @ w - (y - y.mean())) / (n * L), lam / L, gamma * L)
    est = FederatedSparseRegressor(lam, penalty="mcp", concavity=gamma, tol=1e-14, random_state=0).fit(
        X, y, clients=rng.integers(0, 4, size=n))

    def objective(coef, intercept):
        return 0.5 * np.mean((y - X @ coef - intercept) ** 2) + mcp_value(coef, lam, gamma)

    assert abs(objective(est.coef_, est.intercept_) - objective(w, y.mean())) <= 1e-6 * objective(w, y.mean())
    np.testing.assert_allclose(est.coef_, w, atol=1e-6)


def sine_data(n=400, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, 3))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] * X[:, 2] + 0.05 * rng.normal(size=n)
    return X, y, np.argsort(np.argsort(y)) * 5 // n


def test_mlp_regressor_fits_a_smooth_function_and_is_scikit_learns_network():
    X, y, clients = sine_data()
    est = FederatedMLPRegressor(hidden_layer_size=32, random_state=0, max_rounds=3000).fit(X, y, clients=clients)
    assert est.coefs_[0].shape == (3, 32) and est.coefs_[1].shape == (32, 1)
    assert est.score(X, y) > 0.9
    # the same network as scikit-learn's MLPRegressor with logistic hidden units
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = MLPRegressor(hidden_layer_sizes=(32,), activation="logistic", max_iter=1).fit(X[:10], y[:10])
    ref.coefs_ = [c.copy() for c in est.coefs_]
    ref.intercepts_ = [b.copy() for b in est.intercepts_]
    np.testing.assert_allclose(est.predict(X), ref.predict(X), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("random_state", [0, 1, 2])
def test_mlp_regressor_defaults_fit_past_the_plateau_of_the_linear_part(random_state):
    """``tol`` is relative to the start's residual, which an output offset (the targets' mean, the
    initial output weights) would inflate: the fit would stop where the network has fitted the
    linear part of the target only (R^2 about 0.58)."""
    X, y, clients = sine_data()
    est = FederatedMLPRegressor(random_state=random_state).fit(X, y + 3, clients=clients)
    assert est.score(X, y + 3) > 0.9 and est.n_iter_ < est.max_rounds


def test_mlp_regressor_objective_is_the_pooled_objective():
    X, y, clients = sine_data(n=150)
    est = FederatedMLPRegressor(hidden_layer_size=8, alpha=1e-3, max_rounds=10, tol=0, random_state=1)
    with pytest.warns(ConvergenceWarning):
        est.fit(X, y, clients=clients)
    params = np.concatenate([est.coefs_[0].T.ravel(), est.intercepts_[0], est.coefs_[1].T.ravel(),
                             est.intercepts_[1]])
    hidden = expit(X @ est.coefs_[0] + est.intercepts_[0])
    outputs = hidden @ est.coefs_[1][:, 0] + est.intercepts_[1][0]
    pooled = 0.5 * np.mean((outputs - y) ** 2) + 1e-3 * (0.5 * np.abs(params).sum() + 0.25 * params @ params)
    assert est.history_["objective"][-1] == pytest.approx(pooled, rel=1e-10)


def test_mlp_regressor_on_standardized_diabetes():
    X, y, clients = diabetes()
    X = StandardScaler().fit_transform(X)
    y = (y - y.mean()) / y.std()
    with warnings.catch_warnings():  # the network overfits these noisy targets up to max_rounds
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = FederatedMLPRegressor(hidden_layer_size=16, random_state=0).fit(X, y, clients=clients)
    assert est.score(X, y) > 0.45  # a linear model scores 0.52
