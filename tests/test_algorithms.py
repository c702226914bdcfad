"""Server-client methods: exact special cases, backend parity, known answers, speedup and errors."""

import numpy as np
import pytest
from sklearn.linear_model import Lasso, LogisticRegression

import fedopt
from fedopt import algorithms
from fedopt import regularizers as R
from fedopt.algorithms import Start
from fedopt.datasets import partition
from fedopt.problems import LeastSquares, Logistic
from fedopt.regularizers import L1, MCP, ElasticNet, Zero
from fedopt.run import DivergenceError

METHODS = ["fednmap", "zhang", "fedcanon", "fedcanon2", "fedavg"]


def regression(n_clients=6, n_samples=240, d=12, scheme="sorted", seed=0, weights="samples", backend="numba",
               noise=0.5):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_samples, d))
    coef = np.where(np.arange(d) < 4, rng.normal(size=d) * 2, 0.0)
    y = X @ coef + noise * rng.normal(size=n_samples)
    ds = partition(X, y, n_clients, scheme, seed=seed)
    return LeastSquares(ds, weights=weights, backend=backend)


def classification(n_clients=5, backend="numba", weights="samples"):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 8))
    y = (X @ rng.normal(size=8) + 0.5 * rng.normal(size=300) > 0).astype(int)
    return Logistic(partition(X, y, n_clients, "sorted"), weights=weights, backend=backend)


def test_fednmap_without_regularizer_is_scaffold():
    problem = regression()
    kw = dict(rounds=8, local_steps=5, lr_local=0.05, lr_server=0.7, batch_size=4, seed=3)
    a = fedopt.run("fednmap", problem, Zero(), gamma=2.0, **kw)
    b = fedopt.run("scaffold", problem, Zero(), **kw)
    np.testing.assert_allclose(a.x, b.x, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(a.history["objective"], b.history["objective"], rtol=1e-12)
    assert a.history["floats_up"][-1] * 2 == b.history["floats_up"][-1]  # half of SCAFFOLD's uplink


def test_fedcanon_without_regularizer_is_scaffold_at_the_matching_server_step():
    problem = regression()
    kw = dict(rounds=8, local_steps=5, lr_local=0.05, lr_server=0.6, batch_size=4, seed=3)
    a = fedopt.run("fedcanon", problem, Zero(), **kw)
    b = fedopt.run("scaffold", problem, Zero(), **kw)
    np.testing.assert_allclose(a.x, b.x, rtol=1e-12, atol=1e-13)


def test_fedcanon_and_fedcanon2_give_the_same_iterates():
    problem = regression()
    kw = dict(rounds=6, local_steps=4, lr_local=0.05, batch_size=4, seed=1)
    a = fedopt.run("fedcanon", problem, L1(0.05), **kw)
    b = fedopt.run("fedcanon2", problem, L1(0.05), **kw)
    np.testing.assert_array_equal(a.x, b.x)
    n, p = problem.n_clients, problem.n_params
    assert a.history["prox_evals"][-1] == 6 and b.history["prox_evals"][-1] == 6 * n
    assert a.history["floats_down"][-1] == 6 * 2 * n * p and b.history["floats_down"][-1] == 6 * n * p


@pytest.mark.parametrize("method", METHODS)
def test_one_full_local_step_is_proximal_gradient_descent(method):
    problem, reg, step = regression(weights="uniform"), ElasticNet(0.1, 0.2), 0.05
    extra = {"gamma": step} if method == "fednmap" else {}
    result = fedopt.run(method, problem, reg, rounds=7, local_steps=1, lr_local=step, lr_server=1.0,
                        batch_size=None, x0=np.zeros(problem.n_params), **extra)
    x = np.zeros(problem.n_params)
    for _ in range(7):
        x = reg.prox(x - step * problem.grad(x), step)
    np.testing.assert_allclose(result.x, x, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("method", [*METHODS, "scaffold"])
def test_numpy_and_numba_backends_walk_the_same_trajectory(method):
    reg = Zero() if method == "scaffold" else L1(0.02)
    results = [fedopt.run(method, classification(backend=b), reg, rounds=5, local_steps=3, lr_local=0.3,
                          batch_size=8, seed=11) for b in ("numpy", "numba")]
    np.testing.assert_allclose(results[1].x, results[0].x, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(results[1].history["stationarity"], results[0].history["stationarity"], rtol=1e-8)


def test_fednmap_reaches_the_scikit_learn_lasso_on_a_heterogeneous_partition():
    problem = regression(scheme="sorted", weights="samples")
    alpha = 0.1
    X, y = problem.dataset.X, problem.dataset.y
    expected = Lasso(alpha=alpha, fit_intercept=False, tol=1e-12, max_iter=100_000).fit(X, y).coef_
    step = 1 / problem.smoothness().max()
    result = fedopt.run("fednmap", problem, L1(alpha), rounds=400, local_steps=5, lr_local=step / 5, gamma=step,
                        batch_size=None, eval_every=100)
    np.testing.assert_allclose(result.x, expected, atol=1e-8)
    assert result.history["stationarity"][-1] < 1e-16
    assert set(np.flatnonzero(result.x)) == set(np.flatnonzero(expected))


def test_fednmap_reaches_the_scikit_learn_l1_logistic_regression():
    problem = classification(weights="samples")
    C = 0.5
    X, y = problem.dataset.X, problem.dataset.y
    sk = LogisticRegression(l1_ratio=1.0, C=C, solver="saga", fit_intercept=False, tol=1e-12, max_iter=100_000)
    expected = sk.fit(X, y).coef_.ravel()
    lam = 1 / (C * len(y))  # C sum_j loss_j + ||w||_1  ==  N C (mean loss + ||w||_1 / (N C))
    result = fedopt.run("fednmap", problem, L1(lam), rounds=2000, local_steps=4, lr_local=0.5, gamma=2.0,
                        batch_size=None, eval_every=1000)
    np.testing.assert_allclose(result.x, expected, atol=1e-8)


START_REGULARIZERS = [R.L1(0.3), R.ElasticNet(0.3, 0.5), R.GroupLasso(0.4, groups=3), R.Box(-0.2, 0.3),
                      R.L2Ball(0.5), R.L1Ball(0.5), R.Simplex(), R.MCP(0.4, 3.0), R.SCAD(0.4, 3.7),
                      R.Nuclear(0.3, shape=(3, 4))]


@pytest.mark.parametrize("reg", START_REGULARIZERS, ids=lambda r: r.name)
def test_a_start_is_the_prox_of_its_pre_prox_point_for_every_prox_parameter(reg):
    w = np.random.default_rng(3).normal(size=12)
    start = Start.prox_of(reg, w, 0.5)
    problem = regression(d=12)
    for gamma in (0.1, 0.5, 1.5):  # all below 1 / rho = 2.7 (SCAD) and 3 (MCP)
        z = algorithms.FedNMap.start_pre_prox(problem, start, gamma)
        np.testing.assert_allclose(reg.prox(z, gamma), start.x, atol=1e-12)
    assert not np.allclose(start.x, w)  # the prox moved w: the check above is not about a fixed point


def test_every_method_reports_the_same_model_at_round_0():
    """Methods with their own prox parameters (FedNMap's gamma, Zhang's eta_hat, FedDR's and
    FedADMM's eta) report ``prox_{metric_gamma phi}(w_0)`` at round 0, as FedCanon and FedMiD do."""
    problem, reg = classification(), R.ElasticNet(0.2, 0.1)
    w0 = np.random.default_rng(0).normal(size=problem.n_params)
    rows = {}
    methods = [("fednmap", {"gamma": 3.0}), ("zhang", {}), ("fedcanon", {}), ("fedcanon2", {}), ("fedmid", {}),
               ("fedavg", {}), ("fedda", {}), ("feddr", {"gamma": 1.0}), ("fedadmm", {"gamma": 1.0})]
    for method, extra in methods:
        result = fedopt.run(method, problem, reg, rounds=1, x0=w0, local_steps=4, lr_local=0.1, metric_gamma=2.0,
                            **extra)
        rows[method] = {name: result.history[name][0] for name in ("stationarity", "objective", "nnz")}
    expected = reg.prox(w0, 2.0)
    assert rows["fedmid"]["nnz"] == np.count_nonzero(expected) < problem.n_params
    for method, row in rows.items():
        for name, value in row.items():
            assert value == pytest.approx(rows["fedmid"][name], rel=1e-12), (method, name)


@pytest.mark.parametrize("method", [*METHODS, "scaffold"])
def test_every_method_decreases_stationarity(method):
    reg = Zero() if method == "scaffold" else L1(0.01)
    result = fedopt.run(method, classification(), reg, rounds=30, local_steps=5, lr_local=0.2, batch_size=16,
                        metric_gamma=1.0, eval_every=10)
    s = result.history["stationarity"]
    assert s[-1] < 0.2 * s[0]


def test_fednmap_keeps_the_corrections_summing_to_zero():
    problem = regression(weights="samples")
    result = fedopt.run("fednmap", problem, L1(0.05), rounds=5, local_steps=3, lr_local=0.05, batch_size=4)
    c = result.state.vars["c"]
    np.testing.assert_allclose(problem.weights @ c, 0, atol=1e-12)


def test_linear_speedup_in_clients_and_local_steps():
    """With the effective step fixed, the noise floor of FedNMap falls as n and Q grow (Theorem 5)."""

    def floor(n_clients, local_steps, rounds=200):
        values = []
        for seed in range(3):
            problem = regression(n_clients=n_clients, n_samples=960, scheme="iid", weights="uniform", noise=1.0)
            result = fedopt.run("fednmap", problem, L1(0.05), rounds=rounds, local_steps=local_steps,
                                lr_local=0.2 / local_steps, lr_server=1.0, gamma=0.5, batch_size=1, seed=seed)
            values.append(result.history["stationarity"][rounds // 2 :].mean())
        return np.mean(values)

    for floors in ([floor(n, 2) for n in (2, 8, 32)], [floor(4, q) for q in (1, 4, 16)]):
        # 4x the clients (or local steps) at least halves the floor; linear speedup would divide it by 4
        assert floors[0] > 2.5 * floors[1] > 2.5**2 * floors[2]
        slope = np.polyfit(np.log([1, 4, 16]), np.log(floors), 1)[0]
        assert slope < -0.5


def test_invalid_hyperparameters_are_refused_before_any_work():
    problem = regression()
    with pytest.raises(ValueError, match="lr_local must be a finite number > 0"):
        fedopt.run("fednmap", problem, L1(0.1), lr_local=-1)
    with pytest.raises(ValueError, match="gamma"):
        fedopt.run("fednmap", problem, MCP(0.1, gamma=2.0), gamma=3.0)  # rho = 1/2: gamma * rho >= 1
    with pytest.raises(ValueError, match="algorithm 'fedprox2' is unknown"):
        fedopt.run("fedprox2", problem, L1(0.1))
    with pytest.raises(ValueError, match="fednmap has no hyperparameter 'momentum'"):
        fedopt.run("fednmap", problem, L1(0.1), momentum=0.9)
    with pytest.raises(ValueError, match="local_steps must be an integer >= 1"):
        fedopt.run("fedavg", problem, L1(0.1), local_steps=0)
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1"):
        fedopt.run("fedavg", problem, L1(0.1), batch_size=0)
    for wrong in ({"lr_local": [0.1, 0.5]}, {"lr_local": "fast"}, {"local_steps": [5, 10]}, {"batch_size": (8,)}):
        name, value = next(iter(wrong.items()))  # NumPy's float() or int() error named no argument
        with pytest.raises(ValueError, match=f"{name} must be") as error:
            fedopt.run("fednmap", problem, L1(0.1), **wrong)
        assert ("run_batch takes a list" in str(error.value)) == isinstance(value, list | tuple)
    with pytest.raises(ValueError, match="scaffold is for smooth problems"):
        fedopt.run("scaffold", problem, L1(0.1))
    with pytest.raises(ValueError, match="rounds must be an integer"):
        fedopt.run("fedavg", problem, L1(0.1), rounds=-1)
    for wrong in ({"metric_gamma": "wide"}, {"algorithm": "feddr", "relax": "half"}):  # float() named none
        algorithm = wrong.pop("algorithm", "fednmap")
        with pytest.raises(ValueError, match=f"{next(iter(wrong))} must be"):
            fedopt.run(algorithm, problem, L1(0.1), **wrong)
    for tol in (-1.0, "loose"):  # float("loose") named no argument
        with pytest.raises(ValueError, match=r"tol must be a finite number >= 0, got .* \(or None: no tolerance\)"):
            fedopt.run("fedavg", problem, L1(0.1), tol=tol)
    with pytest.raises(ValueError, match="Zhang's prox step"):
        fedopt.run("zhang", problem, MCP(0.1, gamma=2.0), lr_local=0.5, local_steps=10)
    with pytest.raises(ValueError, match=rf"x0 must have shape \({problem.n_params},\)"):
        fedopt.run("fednmap", problem, L1(0.1), x0=np.zeros(problem.n_params + 1))
    with pytest.raises(ValueError, match="x0 has NaN or inf"):  # bad input, not a divergence
        fedopt.run("fednmap", problem, L1(0.1), x0=np.full(problem.n_params, np.nan))
    for seed in ("a", -1, 1.5):
        with pytest.raises(ValueError, match=r"seed must be an integer >= 0"):
            fedopt.run("fednmap", problem, L1(0.1), seed=seed)



@pytest.mark.parametrize("run", [fedopt.run, lambda *args, **kw: fedopt.run_batch(*args, seeds=[0, 1], **kw)],
                         ids=["run", "run_batch"])
def test_what_is_not_a_problem_or_a_regularizer_is_refused_with_the_fix(run):
    problem = regression()
    data = partition(np.ones((20, 3)), np.arange(20.0), 4, "iid")
    with pytest.raises(TypeError, match=r"got a FederatedDataset; build one on the data"):
        run("fednmap", data, L1(0.1), backend="numba")
    with pytest.raises(TypeError, match=r"got 'l1': fedopt.regularizers.make\('l1', ...\)"):
        run("fednmap", problem, "l1")
    with pytest.raises(TypeError, match=r"pass an instance, L1\(...\)"):
        run("fednmap", problem, L1)


def test_divergence_stops_with_the_round_and_keeps_the_history():
    problem = regression()
    with pytest.raises(DivergenceError, match=r"(after|at) round \d+") as error:
        fedopt.run("fedavg", problem, L1(0.01), rounds=500, lr_local=5.0, local_steps=5)
    history = error.value.result.history
    assert len(history) >= 1 and np.isfinite(history["objective"]).all()
    assert error.value.result.state.round == history["round"][-1]


def test_history_columns_costs_and_progress(capsys):
    problem = regression()
    n, p = problem.n_clients, problem.n_params
    result = fedopt.run("fednmap", problem, L1(0.05), rounds=10, local_steps=3, lr_local=0.05, batch_size=4,
                        eval_every=4, progress=True)
    h = result.history
    np.testing.assert_array_equal(h["round"], [0, 4, 8, 10])
    np.testing.assert_array_equal(h["grad_evals"], h["round"] * n * 3)
    np.testing.assert_array_equal(h["floats_up"], h["round"] * n * p)
    np.testing.assert_array_equal(h["prox_evals"], h["round"] * (n * 3 + 1))
    assert np.isfinite(h["normal_map"]).all() and (np.diff(h["seconds"]) >= 0).all()
    assert np.isnan(h["test_accuracy"]).all()  # a regression has no accuracy
    assert "fednmap: round 10/10" in capsys.readouterr().err
    assert set(h.as_dict()) == set(h.columns)
    assert algorithms.make("fednmap", gamma=2.0).gamma == 2.0
    assert "fednmap" in fedopt.algorithms.available()


@pytest.mark.parametrize("method", [*METHODS, "scaffold"])
def test_the_fused_local_loop_equals_the_step_by_step_loop(method, monkeypatch):
    reg = Zero() if method == "scaffold" else ElasticNet(0.02, 0.1)
    kw = dict(rounds=4, local_steps=3, lr_local=0.3, batch_size=8, seed=5)
    fused = fedopt.run(method, classification(), reg, **kw)
    problem = classification()
    monkeypatch.setattr(problem, "fused_local_steps", lambda *args: False)
    stepwise = fedopt.run(method, problem, reg, **kw)
    np.testing.assert_allclose(fused.x, stepwise.x, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("method", ["fednmap", "fedcanon"])
@pytest.mark.parametrize("batch_size", [8, None], ids=["minibatch", "full"])
def test_the_fused_mlp_local_loop_equals_the_step_by_step_loop_and_the_reference(method, batch_size, monkeypatch):
    from fedopt.problems import MLP

    def problem(backend):
        rng = np.random.default_rng(2)
        X = rng.normal(size=(240, 9))
        return MLP(partition(X, (X[:, :3]).argmax(axis=1), 4, "sorted"), hidden=5, backend=backend)

    kw = dict(rounds=3, local_steps=3, lr_local=0.3, batch_size=batch_size, seed=4)
    fused_problem = problem("numba")
    calls = []
    kernel = fused_problem.fused_local_steps
    monkeypatch.setattr(fused_problem, "fused_local_steps", lambda *args: calls.append(kernel(*args)) or calls[-1])
    fused = fedopt.run(method, fused_problem, L1(0.01), **kw)
    assert calls and all(calls)  # every round took the fused kernel
    stepwise_problem = problem("numba")
    monkeypatch.setattr(stepwise_problem, "fused_local_steps", lambda *args: False)
    stepwise = fedopt.run(method, stepwise_problem, L1(0.01), **kw)
    reference = fedopt.run(method, problem("numpy"), L1(0.01), **kw)
    np.testing.assert_allclose(fused.x, stepwise.x, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(fused.x, reference.x, rtol=1e-10, atol=1e-12)


def test_row_wise_regularizers_take_the_step_by_step_loop_on_every_backend():
    from fedopt.regularizers import GroupLasso

    results = [fedopt.run("fednmap", classification(backend=b), GroupLasso(0.2, groups=2), rounds=4, local_steps=3,
                          lr_local=0.3, batch_size=8, seed=2) for b in ("numpy", "numba")]
    np.testing.assert_allclose(results[1].x, results[0].x, rtol=1e-10, atol=1e-12)
    assert np.count_nonzero(results[0].x) < results[0].x.size  # whole groups are zeroed


def test_tol_stops_at_the_first_evaluation_below_it():
    problem = regression()
    kw = dict(rounds=500, local_steps=2, lr_local=0.05, batch_size=None, eval_every=5)
    full = fedopt.run("fednmap", problem, L1(0.05), **kw)
    stopped = fedopt.run("fednmap", problem, L1(0.05), tol=1e-6, **kw)
    first = np.flatnonzero(full.history["stationarity"] <= 1e-6)[0]
    assert stopped.converged and len(stopped.history) == first + 1
    assert stopped.history["round"][-1] == full.history["round"][first] < 500
    np.testing.assert_array_equal(stopped.history["stationarity"], full.history["stationarity"][: first + 1])
    assert not fedopt.run("fednmap", problem, L1(0.05), tol=1e-30, rounds=3, lr_local=0.05).converged


#: Each normal-map method's own prox parameter of ``z`` (``x = prox_{g phi}(z)``) at lr_local 0.05, 3 local steps.
PRE_PROX = [("fednmap", {"gamma": 0.5}, 0.5), ("feddr", {"gamma": 0.5}, 0.5), ("fedadmm", {"gamma": 0.5}, 0.5),
            ("zhang", {"lr_server": 2.0}, 0.05 * 2.0 * 3)]


@pytest.mark.parametrize(("method", "extra", "g"), PRE_PROX, ids=[case[0] for case in PRE_PROX])
def test_normal_map_takes_the_methods_own_prox_parameter_of_z(method, extra, g):
    """``normal_map`` is ``||grad f(x) + (z - x) / g||^2`` with the ``g`` of ``x = prox_{g phi}(z)``,
    whatever ``metric_gamma`` (the prox parameter of ``stationarity``)."""
    problem, reg = regression(), L1(0.05)
    result = fedopt.run(method, problem, reg, rounds=4, local_steps=3, lr_local=0.05, batch_size=4, metric_gamma=2.0,
                        **extra)
    x, z = result.x, result.z
    np.testing.assert_allclose(reg.prox(z, g), x, rtol=1e-12, atol=1e-14)
    assert not np.allclose(reg.prox(z, 2.0), x)  # the metric's parameter would measure another map
    by_hand = np.sum((problem.grad(x) + (z - x) / g) ** 2)
    np.testing.assert_allclose(result.history["normal_map"][-1], by_hand, rtol=1e-10)
    assert result.algorithm.pre_prox_gamma == pytest.approx(g)


def test_zhangs_normal_map_vanishes_with_its_stationarity():
    """One client, one local step, full gradients: Zhang is proximal gradient descent with step
    eta_hat = 0.5, and both measures go to 0 with the default metric_gamma (1)."""
    problem = fedopt.problems.Softmax(fedopt.datasets.load_digits(n_clients=1, partition="iid", seed=0))
    result = fedopt.run("zhang", problem, L1(1e-2), rounds=1000, eval_every=500, local_steps=1, lr_local=0.5,
                        lr_server=1.0, batch_size=None)
    h = result.history
    assert result.metric_gamma == 1.0 and h["stationarity"][-1] < 1e-4
    assert h["normal_map"][-1] < 1e-4 < h["normal_map"][0]


def test_tol_given_as_a_numeric_string_is_taken_as_its_number():
    problem = regression()
    kw = dict(rounds=200, local_steps=2, lr_local=0.05, batch_size=None, eval_every=5)
    as_string = fedopt.run("fednmap", problem, L1(0.05), tol="1e-4", **kw)
    as_number = fedopt.run("fednmap", problem, L1(0.05), tol=1e-4, **kw)
    assert as_string.converged and as_number.converged
    np.testing.assert_array_equal(as_string.history["round"], as_number.history["round"])


def test_flags_are_refused_unless_true_or_false():
    """A flag passed as a string counted by its truth value: "False" ran the averaged extrapolation."""
    for method, flag in (("local-extra-sgd", "average_extrapolation"), ("depositum", "rescaled_prox"),
                         ("scaffnew", "random_steps")):
        for value in ("False", 0, None):
            with pytest.raises(ValueError, match=rf"^{flag} must be True or False, got {value!r}$"):
                fedopt.algorithms.make(method, **{flag: value})
        assert getattr(fedopt.algorithms.make(method, **{flag: np.False_}), flag) is False
