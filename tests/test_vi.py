"""Federated variational inequalities: the problems, the gap measures, the methods, their reductions and parity."""

import math
import re
import warnings

import numpy as np
import pytest
from scipy.optimize import minimize

import fedopt
from fedopt.algorithms.vi import metrics
from fedopt.problems import LeastSquares
from fedopt.problems.vi import VI_PROBLEMS, BilinearGame, L1BilinearGame, QuadraticGame, RobustLeastSquares, SmoothGame
from fedopt.regularizers import L1, MCP, ElasticNet, Zero
from fedopt.run import DivergenceError

SMALL = {"bilinear_game": dict(dim=6), "quadratic_game": dict(dim=6), "smooth_game": dict(dim=5, n_samples=30),
         "robust_least_squares": dict(n_samples=8, n_features=4), "l1_bilinear_game": dict(n_x=8, n_y=4)}
LOCAL = ["local-extra-sgd", "lippax", "slippax", "local-dual-extrapolation", "local-sgda"]
METHODS = [*LOCAL, "minibatch-extragradient"]
HYPERPARAMETERS = {k for m in METHODS for k in fedopt.algorithms.hyperparameters(m)}


def small(name, **options):
    return VI_PROBLEMS[name](backend="numpy", **{**SMALL[name], **options})


def run(method, problem, regularizer=None, **kw):
    """``fedopt.run`` with the hyperparameters among ``kw`` that ``method`` has (the others are dropped)."""
    kw.setdefault("rounds", 5)
    kw.setdefault("lr_local", 0.2)
    own = fedopt.algorithms.hyperparameters(method)
    kw = {k: v for k, v in kw.items() if k in own or k not in HYPERPARAMETERS}
    return fedopt.run(method, problem, regularizer, x0=np.zeros(problem.n_params), **kw)


# ------------------------------------------------------------------------------------------- problems
@pytest.mark.parametrize("name", sorted(VI_PROBLEMS))
def test_problems_are_monotone_and_know_their_solution(name, rng):
    problem = small(name)
    Z = rng.normal(size=(50, problem.n_params)) * 3
    W = rng.normal(size=(50, problem.n_params)) * 3
    inner = np.einsum("ij,ij->i", problem.host_operator(Z) - problem.host_operator(W), Z - W)
    assert inner.min() >= -1e-12
    ratio = np.linalg.norm(problem.host_operator(Z) - problem.host_operator(W), axis=1) / np.linalg.norm(Z - W, axis=1)
    assert ratio.max() <= problem.lipschitz * (1 + 1e-12)
    z = problem.solution()
    reg = problem.regularizer or Zero()
    residual = z - reg.prox(z - 0.5 * problem.host_operator(z), 0.5, backend="numpy")
    assert np.linalg.norm(residual) < 1e-9
    assert problem.radius == pytest.approx(max(1.0, np.linalg.norm(z)))


@pytest.mark.parametrize("name", ["bilinear_game", "quadratic_game", "smooth_game", "robust_least_squares"])
def test_games_operator_is_the_saddle_gradient(name, rng):
    problem, n = small(name), small(name).n_x
    z, eps = rng.normal(size=problem.n_params), 1e-6
    f = lambda w: problem.saddle_value(w[:n], w[n:])  # noqa: E731
    grad = np.array([(f(z + eps * e) - f(z - eps * e)) / (2 * eps) for e in np.eye(problem.n_params)])
    np.testing.assert_allclose(problem.host_operator(z), np.concatenate([grad[:n], -grad[n:]]), atol=1e-7)


def test_robust_least_squares_solution_is_the_least_squares_fit():
    problem = small("robust_least_squares", lam=2.0)
    a = problem.host
    A, y0 = -a["A"].T * problem.n_samples, -a["c"] * problem.n_samples / problem.lam
    w = np.linalg.lstsq(A, y0, rcond=None)[0]
    np.testing.assert_allclose(problem.solution(), np.concatenate([w, y0 + (y0 - A @ w) / (2.0 - 1)]), atol=1e-10)


@pytest.mark.parametrize("n_clients", [1, 2, 5])
def test_heterogeneity_shifts_have_norm_zeta_and_cancel(n_clients, rng):
    problem = small("quadratic_game", n_clients=n_clients, heterogeneity=0.7)
    W = rng.normal(size=problem.n_params)
    shifts = problem.client_operator(W) - problem.host_operator(W)
    expected = 0.0 if n_clients == 1 else 0.7
    np.testing.assert_allclose(np.linalg.norm(shifts, axis=1), expected, atol=1e-12)
    np.testing.assert_allclose(shifts.mean(axis=0), 0, atol=1e-12)


def test_noise_has_total_variance_sigma_squared_and_comes_from_the_run_generator():
    problem = small("bilinear_game", n_clients=3, sigma=0.5)
    noise = problem.sample_noise(np.random.default_rng(0), 4000)
    assert noise.shape == (4000, 3, problem.n_params)
    assert np.sum(noise**2, axis=2).mean() == pytest.approx(0.25, rel=0.03)
    assert np.sum(problem.sample_noise(np.random.default_rng(0), 4000, batch=5) ** 2, axis=2).mean() == \
        pytest.approx(0.05, rel=0.03)
    np.testing.assert_array_equal(noise, problem.sample_noise(np.random.default_rng(0), 4000))
    assert small("bilinear_game").sample_noise(np.random.default_rng(0), 3) is None


@pytest.mark.parametrize("make, message", [
    (lambda: BilinearGame(sigma=-1), "sigma"),
    (lambda: BilinearGame(n_clients=0), "n_clients"),
    (lambda: RobustLeastSquares(lam=1.0), "lam"),
    (lambda: RobustLeastSquares(n_samples=3, n_features=5), "n_samples"),
    (lambda: QuadraticGame(mu=0, coupling=0), "mu"),
    (lambda: L1BilinearGame(lam=0), "lam"),
    (lambda: L1BilinearGame(n_x=4, n_y=12), r"n_y must be <= n_x .* got n_x=4, n_y=12"),
    (lambda: BilinearGame(min_singular=2.0), r"min_singular must be in \(0, 1\]"),
    (lambda: QuadraticGame(min_singular=1.5), r"min_singular must be in \(0, 1\]"),
    (lambda: SmoothGame(min_singular=100.0), r"min_singular must be in \(0, 1\]"),
    (lambda: BilinearGame(min_singular=0), "min_singular"),
])
def test_bad_problem_options_are_refused_by_name(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_l1_bilinear_game_without_a_solution_is_refused(monkeypatch):
    """Two equal rows of A with other entries of c: A x = c has no solution, and the least-squares point is none."""
    game = L1BilinearGame(n_x=4, n_y=3)
    M, h = game.affine_parts()
    M = M.copy()
    M[5] = M[4]
    monkeypatch.setattr(game, "affine_parts", lambda: (M, h))
    with pytest.raises(ValueError, match=r"A x = c has no solution"):
        game.solution(Zero())


@pytest.mark.parametrize("name", sorted(VI_PROBLEMS))
def test_dtype_is_float64_or_float32_and_nothing_else(name):
    assert small(name, dtype="float32").dtype == np.float32
    assert small(name, dtype=np.float64).dtype == np.float64
    for dtype in ("float16", "int32", np.uint8, "complex128", None, "not-a-dtype"):
        with pytest.raises(ValueError, match=r"dtype must be 'float64' or 'float32', got"):
            small(name, dtype=dtype)


def test_oracles_check_shapes():
    problem = small("bilinear_game", n_clients=3)
    with pytest.raises(ValueError, match=r"W must have shape"):
        problem.client_operator(np.zeros((2, problem.n_params)))
    assert problem.client_operator(np.zeros(problem.n_params)).shape == (3, problem.n_params)


# -------------------------------------------------------------------------------------------- metrics
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_trust_region_maximum_matches_a_numerical_solver(seed):
    rng = np.random.default_rng(seed)
    p = 5
    B = rng.normal(size=(p, 2))
    S = B @ B.T  # PSD and singular: the hard directions are there
    g, radius = rng.normal(size=p), 0.8
    lam, Q = np.linalg.eigh(S)
    exact = metrics.max_concave_quadratic(g, lam, Q, radius)
    best = max(-minimize(lambda w: -(g @ w - w @ S @ w), rng.normal(size=p) * 0.1, method="SLSQP",
                         constraints=[{"type": "ineq", "fun": lambda w: radius**2 - w @ w}]).fun for _ in range(5))
    assert exact == pytest.approx(best, rel=1e-6, abs=1e-9)
    assert metrics.max_concave_quadratic(g, np.zeros(p), np.eye(p), radius) == pytest.approx(radius * np.linalg.norm(g))
    inside = np.linalg.eigh(S + 10 * np.eye(p))  # unconstrained maximiser g^T S^-1 g / 4 inside the ball
    assert metrics.max_concave_quadratic(0.1 * g, *inside, 10.0) == \
        pytest.approx(0.01 * g @ np.linalg.solve(S + 10 * np.eye(p), g) / 4)


@pytest.mark.parametrize("name", ["bilinear_game", "quadratic_game", "robust_least_squares"])
def test_restricted_gap_is_the_supremum_over_the_ball(name, rng):
    problem = small(name)
    x, center, radius = rng.normal(size=problem.n_params), np.zeros(problem.n_params), 1.5
    gap = metrics.restricted_gap(problem, x, center, radius)
    directions = rng.normal(size=(20000, problem.n_params))
    Z = center + radius * directions / np.linalg.norm(directions, axis=1, keepdims=True) * rng.uniform(size=(20000, 1))
    sampled = np.einsum("ij,ij->i", problem.host_operator(Z), x - Z)
    assert sampled.max() <= gap + 1e-10
    assert sampled.max() >= gap - 0.2 * abs(gap)  # the samples come close to the supremum
    assert gap <= metrics.gap_bound(problem, None, x, center, radius) + 1e-10
    assert gap <= metrics.duality_gap(problem, x, center, radius) + 1e-10
    z = problem.solution()
    assert metrics.restricted_gap(problem, z, center, problem.radius) == pytest.approx(0, abs=1e-9)


def test_duality_gap_of_the_smooth_game_vanishes_at_the_solution_only(rng):
    problem = small("smooth_game")
    z, center = problem.solution(), np.zeros(problem.n_params)
    assert abs(metrics.duality_gap(problem, z, center, problem.radius)) < 1e-8
    assert metrics.duality_gap(problem, z + 0.3 * rng.normal(size=z.size), center, problem.radius) > 1e-3


def test_duality_gap_of_the_smooth_game_without_softplus_terms_is_that_of_the_bilinear_game(rng):
    smooth, bilinear = small("smooth_game", scale=0.0), small("bilinear_game", dim=5)
    assert smooth.block_curvature == 0
    for x in [rng.normal(size=smooth.n_params), np.zeros(smooth.n_params), smooth.solution()]:
        center = rng.normal(size=smooth.n_params)
        expected = metrics.duality_gap(bilinear, x, center, 1.5)
        assert metrics.duality_gap(smooth, x, center, 1.5) == pytest.approx(expected)


def test_gap_bound_uses_the_least_norm_subgradient_of_phi():
    problem = small("l1_bilinear_game")
    reg, z = problem.regularizer, problem.solution()
    assert np.linalg.norm(metrics.least_norm_residual(problem, reg, z)) < 1e-6  # 0 in V(z*) + dphi(z*)
    assert metrics.gap_bound(problem, reg, z, np.zeros(z.size), problem.radius) < 1e-5
    assert np.linalg.norm(metrics.least_norm_residual(problem, None, z)) > 1e-2  # V(z*) alone is not 0


# -------------------------------------------------------------------------------------------- methods
@pytest.mark.parametrize("method", METHODS)
def test_methods_reach_the_solution_of_a_strongly_monotone_game(method):
    problem = small("quadratic_game", mu=0.5, n_clients=3)
    result = run(method, problem, rounds=150, eval_every=150, local_steps=3, lr_local=0.3, batch_size=3)
    assert result.history["distance_last"][-1] < 1e-12
    assert result.history["distance"][-1] < 1e-2 * result.history["distance"][0]  # the ergodic average, O(1/T)
    assert result.history["gap"][-1] < 1e-2 * result.history["gap"][0]


def test_local_dual_extrapolation_reaches_the_composite_solution():
    problem = small("quadratic_game", mu=0.5, n_clients=3)
    reg = L1(0.2)
    solution = problem.solution(reg)
    assert 0 < np.count_nonzero(solution) < problem.n_params  # the l1 term is active
    result = run("local-dual-extrapolation", problem, reg, rounds=150, eval_every=150, local_steps=3, lr_local=0.3)
    assert result.history["distance_last"][-1] < 1e-12
    assert result.history["distance"][-1] < 1e-3 * result.history["distance"][0]
    assert np.isnan(result.history["gap"][-1]) and np.isfinite(result.history["gap_bound"]).all()


def test_a_game_posed_with_its_own_regularizer_runs_with_it_by_default():
    problem = small("l1_bilinear_game", n_clients=2)
    default = run("local-dual-extrapolation", problem, rounds=3, seed=1)
    own = run("local-dual-extrapolation", problem, problem.regularizer, rounds=3, seed=1)
    batched, = fedopt.run_batch("local-dual-extrapolation", problem, rounds=3, seeds=[1], lr_local=0.2,
                                x0=np.zeros(problem.n_params))
    assert default.state.env.regularizer == batched.state.env.regularizer == L1(problem.lam)
    np.testing.assert_array_equal(default.x, own.x)
    np.testing.assert_array_equal(batched.x, own.x)
    smooth = run("local-dual-extrapolation", problem, Zero(), rounds=3, seed=1)
    assert not np.array_equal(smooth.x, own.x)
    with pytest.raises(ValueError, match=r"L1BilinearGame's own, used when none is given: pass .*Zero\(\)"):
        run("lippax", problem)
    assert run("lippax", problem, Zero(), rounds=1).state.env.regularizer == Zero()


def test_local_sgda_diverges_on_a_bilinear_game_where_extragradient_converges():
    problem = small("bilinear_game", n_clients=2, min_singular=0.5)
    sgda = run("local-sgda", problem, rounds=60, eval_every=60, local_steps=2, lr_local=0.5, divergence=None)
    eg = run("local-extra-sgd", problem, rounds=60, eval_every=60, local_steps=2, lr_local=0.5)
    assert sgda.history["distance_last"][-1] > sgda.history["distance_last"][0]
    assert eg.history["distance_last"][-1] < 0.1 * eg.history["distance_last"][0]


def test_one_local_step_of_local_extra_sgd_is_minibatch_extragradient():
    problem = small("bilinear_game", n_clients=4, sigma=0.3, heterogeneity=0.2)
    a = run("local-extra-sgd", problem, local_steps=1, seed=3)
    b = run("minibatch-extragradient", problem, batch_size=1, seed=3)
    np.testing.assert_allclose(a.x, b.x, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(a.state.vars["z"], b.state.vars["z"], rtol=1e-12, atol=1e-14)
    assert a.history["grad_evals"][-1] == b.history["grad_evals"][-1] == 5 * 2 * 4


def test_one_client_local_extra_sgd_is_serial_stochastic_extragradient():
    problem, eta, K, R = small("smooth_game", n_clients=1, sigma=0.2), 0.3, 3, 4
    result = run("local-extra-sgd", problem, local_steps=K, rounds=R, lr_local=eta, seed=7)
    rng, z, total = np.random.default_rng(7), np.zeros(problem.n_params), 0
    for _ in range(R):
        noise = problem.sample_noise(rng, 2 * K)[:, 0]
        for k in range(K):
            x = z - eta * (problem.host_operator(z) + noise[2 * k])
            z = z - eta * (problem.host_operator(x) + noise[2 * k + 1])
            total = total + x
    np.testing.assert_allclose(result.state.vars["z"], z, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(result.x, total / (K * R), rtol=1e-12, atol=1e-14)


def test_lippax_with_many_inner_steps_is_the_proximal_point_method_with_an_extra_step():
    problem, eta = small("bilinear_game", n_clients=1), 0.5
    result = run("lippax", problem, local_steps=1, rounds=3, lr_local=eta, inner_steps=400)
    M, h = problem.affine_parts()
    z = np.zeros(problem.n_params)
    for _ in range(3):
        x = np.linalg.solve(np.eye(problem.n_params) + eta * M, z - eta * h)  # (I + eta V)^{-1} z
        z = z - eta * (M @ x + h)
    np.testing.assert_allclose(result.state.vars["z"], z, rtol=1e-10, atol=1e-12)


def test_dual_extrapolation_without_a_regularizer_is_local_extra_sgd():
    problem = small("quadratic_game", n_clients=3, sigma=0.2, heterogeneity=0.3)
    x0 = np.linspace(-1, 1, problem.n_params)
    kw = dict(local_steps=3, rounds=4, lr_local=0.2, seed=1, x0=x0)
    a = fedopt.run("local-dual-extrapolation", problem, Zero(), **kw)
    b = fedopt.run("local-extra-sgd", problem, **kw)
    np.testing.assert_allclose(a.x, b.x, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(a.state.vars["z"], b.state.vars["z"], rtol=1e-12, atol=1e-13)


def test_slippax_without_noise_is_lippax_and_with_noise_smooths():
    quiet = small("smooth_game", n_clients=2)
    a = run("slippax", quiet, local_steps=2, inner_steps=3)
    b = run("lippax", quiet, local_steps=2, inner_steps=3)
    np.testing.assert_array_equal(a.x, b.x)
    noisy = small("smooth_game", n_clients=2, sigma=0.5)
    assert fedopt.algorithms.make("slippax", lr_local=0.2).smoothing(noisy) == pytest.approx(0.2 * 0.5 / 10**0.25)
    c = run("slippax", noisy, local_steps=2, inner_steps=3)
    d = run("lippax", noisy, local_steps=2, inner_steps=3)
    assert not np.allclose(c.x, d.x)


def test_averaging_only_z_changes_local_extra_sgd_and_halves_its_round_trips():
    problem = small("smooth_game", n_clients=3, sigma=0.2)  # for an affine V both variants coincide
    a = run("local-extra-sgd", problem, local_steps=3)
    b = run("local-extra-sgd", problem, local_steps=3, average_extrapolation=False)
    assert not np.allclose(a.x, b.x)
    assert a.history["round_trips"][-1] == 10 and b.history["round_trips"][-1] == 5
    assert a.history["floats_up"][-1] == 2 * b.history["floats_up"][-1]


@pytest.mark.parametrize("method, calls, trips, proxes", [
    ("local-extra-sgd", 2 * 4, 2, 0), ("lippax", 4 * 6, 1, 0), ("slippax", 4 * 6, 1, 0),
    ("local-dual-extrapolation", 2 * 4, 2, 2 * 4), ("local-sgda", 4, 1, 0), ("minibatch-extragradient", 2 * 7, 2, 0)])
def test_costs_per_round(method, calls, trips, proxes):
    problem, rounds = small("quadratic_game", n_clients=3), 5
    result = run(method, problem, rounds=rounds, local_steps=4, inner_steps=5, batch_size=7)
    h, n, p = result.history, 3, problem.n_params
    assert h["grad_evals"][-1] == rounds * calls * n
    assert h["round_trips"][-1] == rounds * trips
    assert h["floats_up"][-1] == h["floats_down"][-1] == rounds * trips * n * p
    assert h["prox_evals"][-1] == max(0, rounds * proxes * n - n)


def test_drift_vanishes_for_identical_clients_and_grows_with_heterogeneity():
    for zeta, check in ((0.0, lambda d: d == 0), (0.5, lambda d: d > 1e-3)):
        problem = small("bilinear_game", n_clients=4, heterogeneity=zeta)
        for method in ("local-extra-sgd", "lippax"):
            drift = run(method, problem, local_steps=4).history["drift"]
            assert np.isnan(drift[0]) and all(check(d) for d in drift[1:]), (method, zeta, drift)


def test_history_has_the_vi_columns_and_finite_merit_values():
    result = run("lippax", small("smooth_game", sigma=0.1), rounds=3)
    h = result.history
    for column in ("gap", "gap_bound", "duality_gap", "distance", "distance_last", "drift", "round_trips"):
        assert column in h.columns
    assert np.isnan(h["gap"]).all()  # not affine: only the bound
    np.testing.assert_array_equal(h["objective"], h["gap_bound"])
    assert np.isfinite(h["stationarity"]).all() and np.isfinite(h["duality_gap"]).all()


# ----------------------------------------------------------------------------------------------- errors
def test_lippax_takes_any_number_of_inner_steps_and_refuses_others():
    for H in (1, 2):  # Algorithm 1 takes any H
        assert fedopt.algorithms.make("lippax", inner_steps=H).inner_steps == H
    for H in (0, 1.5, True):
        with pytest.raises(ValueError, match=r"inner_steps \(H\) must be an integer >= 1"):
            fedopt.algorithms.make("lippax", inner_steps=H)
    with pytest.raises(ValueError, match="lr_inner"):
        fedopt.algorithms.make("lippax", lr_inner=-1.0)


def test_minibatch_extragradient_refuses_a_batch_of_none():
    """Its batch_size is K, the samples a half step averages: None once passed and crashed in the round."""
    for value, shown in ((None, "None"), (0, "0")):
        with pytest.raises(ValueError, match=rf"batch_size must be an integer >= 1, got {shown}$"):
            fedopt.algorithms.make("minibatch-extragradient", batch_size=value)
    assert fedopt.algorithms.make("fednmap", batch_size=None).batch_size is None  # full local gradients


def test_lippax_warns_when_its_step_expands_and_names_the_largest_stable_step():
    """H = 2 at eta = 1/L on a bilinear game: the noise-free step z_{t-1} -> z_t has spectral radius
    1.0933 > 1, which the iterates' growth shows; the largest stable step it names is stable."""
    game = small("bilinear_game", n_clients=1)
    method = fedopt.algorithms.make("lippax", inner_steps=2, lr_local=1.0 / game.lipschitz, local_steps=1)

    def rate(method):  # ||z_t - z*|| grows by this factor per round, from round 150 to 300
        ends = [fedopt.run(method, game, rounds=r, eval_every=r, divergence=None).state.vars["z"] - game.solution()
                for r in (150, 300)]
        return (np.linalg.norm(ends[1]) / np.linalg.norm(ends[0])) ** (1 / 150)

    with pytest.warns(UserWarning, match=r"spectral radius 1\.0933\d* > 1") as caught:
        expanding = rate(method)
    assert expanding == pytest.approx(method.growth(game, method.lr_local), rel=1e-6)
    stable = float(re.search(r"largest stable lr_local is (\S+)", str(caught[0].message)).group(1))
    assert method.growth(game, stable) <= 1 + 1e-6 < method.growth(game, 1.01 * stable)  # printed to 6 digits
    assert 0.78 < stable * game.lipschitz < 0.80  # H = 2 is stable up to about 0.79 / L
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert rate(method.replace(lr_local=stable)) <= 1


def test_wrong_problems_and_regularizers_are_refused():
    from fedopt.datasets import partition

    rng = np.random.default_rng(0)
    data = LeastSquares(partition(rng.normal(size=(20, 3)), rng.normal(size=20), 2, "iid"), backend="numpy")
    with pytest.raises(TypeError, match=r"fedopt\.problems\.vi"):
        fedopt.run("lippax", data, rounds=1)
    game = small("bilinear_game")
    for method in ("fednmap", "depositum"):  # and the other way round
        with pytest.raises(TypeError, match="games need a VI method"):
            fedopt.run(method, game, rounds=1)
    with pytest.raises(TypeError, match="games need a VI method"):
        fedopt.run_batch("fedcanon", game, rounds=1, seeds=[0, 1])
    with pytest.raises(ValueError, match="local-dual-extrapolation"):
        run("local-extra-sgd", game, L1(0.1))
    with pytest.raises(ValueError, match="convex regularizer"):
        run("local-dual-extrapolation", game, MCP(lam=0.1, gamma=3.0))


def test_diverging_runs_raise_with_the_history_so_far():
    with pytest.raises(DivergenceError) as info:
        run("local-sgda", small("bilinear_game"), rounds=3000, eval_every=100, local_steps=5, lr_local=2.0)
    assert info.value.result.history["round"][0] == 0


# ------------------------------------------------------------------------------------------------ parity
@pytest.mark.parametrize("method", METHODS)
def test_backends_follow_the_same_trajectory(method):
    problem = small("smooth_game", n_clients=3, sigma=0.2, heterogeneity=0.1)
    kw = dict(local_steps=2, inner_steps=3, batch_size=2, rounds=3, seed=4)
    reg = ElasticNet(0.05, 0.1) if method == "local-dual-extrapolation" else None
    a = run(method, problem, reg, backend="numpy", **kw)
    b = run(method, problem, reg, backend="numba", **kw)
    np.testing.assert_allclose(a.x, b.x, rtol=1e-10, atol=1e-12)
    single = VI_PROBLEMS["smooth_game"](backend="numpy", dtype="float32", n_clients=3, sigma=0.2, heterogeneity=0.1,
                                        **SMALL["smooth_game"])
    c = run(method, single, reg, **kw)
    assert c.x.dtype == np.float32
    np.testing.assert_allclose(c.x, a.x, rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("method", METHODS)
def test_gpu_follows_the_cpu_trajectory(method):
    problem = small("smooth_game", n_clients=3, sigma=0.2, heterogeneity=0.1)
    kw = dict(local_steps=2, inner_steps=3, batch_size=2, rounds=3, seed=4)
    reg = ElasticNet(0.05, 0.1) if method == "local-dual-extrapolation" else None
    a = run(method, problem, reg, backend="numpy", **kw)
    b = run(method, problem, reg, backend="gpu", **kw)
    np.testing.assert_allclose(a.x, b.x, rtol=1e-10, atol=1e-12)
    for column in ("gap_bound", "distance", "drift"):
        np.testing.assert_allclose(a.history[column], b.history[column], rtol=1e-8)


def test_same_seed_same_run_bit_for_bit():
    problem = small("quadratic_game", sigma=0.3)
    a, b = run("slippax", problem, seed=11), run("slippax", problem, seed=11)
    np.testing.assert_array_equal(a.x, b.x)
    assert not np.array_equal(a.x, run("slippax", problem, seed=12).x)
    assert math.isfinite(a.history["gap"][-1])
