"""Partial participation (an extension beyond the papers): cohorts drawn per round, unsampled clients'
state kept, SCAFFOLD's control-variate rule, unbiased aggregates, cohort-sized rounds."""

import copy
import re
import warnings
from dataclasses import replace

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV
from sklearn.preprocessing import StandardScaler

import fedopt
from fedopt import regularizers as R
from fedopt.algorithms.base import cohort_size
from fedopt.datasets import partition
from fedopt.estimators import FederatedLasso
from fedopt.problems import LeastSquares, Logistic

COHORT_METHODS = ["fednmap", "fedcanon", "fedcanon2", "zhang", "scaffold", "fedavg", "fedmid", "fedda", "feddr",
                  "fedadmm"]


def problem(backend="numba", weights="samples", n_clients=12):
    X, y = load_breast_cancer(return_X_y=True)
    data = partition(StandardScaler().fit_transform(X), y, n_clients, "dirichlet", seed=0)
    return Logistic(data, weights=weights, backend=backend)


def regularizer(name):
    return None if name == "scaffold" else R.L1(1e-3)


def options(name, **extra):
    return {"lr_local": 0.05, "local_steps": 3, "batch_size": 8,
            **({"gamma": 0.5} if name in ("fednmap", "feddr", "fedadmm") else {}), **extra}


def first_round(method, prob, seed=3):
    """The state after one round, and the cohort that round drew (from a copy of the run's generator)."""
    rng = np.random.default_rng(seed)
    state = method.init(prob, regularizer(method.name) or R.Zero(), rng, None)
    state = method.next_round(state)  # a first round: corrections become nonzero
    size = method.cohort_size(prob.n_clients)
    clients, _ = prob.draw_cohort(copy.deepcopy(state.env.rng), size, method.sampling)
    return state, clients


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("name", COHORT_METHODS)
def test_a_cohort_of_everyone_is_full_participation(name, backend):
    prob = problem(backend)
    full = fedopt.run(name, prob, regularizer(name), rounds=4, seed=1, **options(name))
    everyone = fedopt.run(name, prob, regularizer(name), rounds=4, seed=1, **options(name, clients_per_round=12))
    fraction = fedopt.run(name, prob, regularizer(name), rounds=4, seed=1, **options(name, clients_per_round=1.0))
    np.testing.assert_array_equal(everyone.x, full.x)
    np.testing.assert_array_equal(fraction.x, full.x)
    # those take the full round directly; the cohort machinery on everyone gives that round too
    method = fedopt.algorithms.make(name, **options(name))
    state = method.round(method.init(prob, regularizer(name) or R.Zero(), np.random.default_rng(2), None))
    view = prob.cohort(np.arange(prob.n_clients), prob.weights)
    whole, on_view = (method.round(replace(state, env=replace(state.env, problem=on, rng=copy.deepcopy(state.env.rng)),
                                           vars={k: np.copy(v) for k, v in state.vars.items()}))
                      for on in (prob, view))
    np.testing.assert_allclose(on_view.x, whole.x, rtol=1e-12, atol=1e-14)
    if whole.z is not None:  # the pre-prox point, for the methods that keep one
        np.testing.assert_allclose(on_view.z, whole.z, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("sampling", ["uniform", "weighted"])
@pytest.mark.parametrize("name", ["fednmap", "fedcanon", "scaffold"])
def test_clients_outside_the_cohort_keep_their_state(name, sampling):
    prob = problem()
    method = fedopt.algorithms.make(name, **options(name, clients_per_round=4, sampling=sampling))
    state, clients = first_round(method, prob)
    key = "c_clients" if name == "scaffold" else "c"
    before = state.vars[key].copy()
    after = method.next_round(state)
    others = np.setdiff1d(np.arange(prob.n_clients), clients)
    np.testing.assert_array_equal(after.vars[key][others], before[others])
    assert not np.allclose(after.vars[key][clients], before[clients])
    assert after.costs.grad_evals - state.costs.grad_evals == len(clients) * method.local_steps


@pytest.mark.parametrize("sampling", ["uniform", "weighted"])
def test_scaffold_server_control_variate_stays_the_weighted_sum(sampling):
    prob = problem()
    result = fedopt.run("scaffold", prob, rounds=30, seed=2, eval_every=10,
                        **options("scaffold", clients_per_round=3, sampling=sampling))
    c, c_clients = result.state.vars["c"], result.state.vars["c_clients"]
    np.testing.assert_allclose(c, prob.weights @ c_clients, atol=1e-14)
    assert np.abs(c).max() > 1e-3


@pytest.mark.parametrize("weights", ["uniform", "samples"])
@pytest.mark.parametrize("name", ["fednmap", "zhang", "fedcanon"])
def test_weighted_cohorts_keep_the_corrections_summing_to_zero(name, weights):
    """``c_i = c_i + ybar - y_i`` keeps ``sum_i w_i c_i = 0`` only when ``ybar`` is the cohort's
    weighted mean; a weighted draw's ``1/S`` average is not (and a client drawn twice keeps one
    update). Without the re-centring the sum drifted to 4e-3 and, from the exact solution with
    exact gradients, the model moved away from it (7e-3 to 0.14 here, growing with the rounds);
    with it the model comes back (to 1e-4 at 1 000 rounds, closer with more)."""
    X, y = load_breast_cancer(return_X_y=True)
    prob = LeastSquares(partition(StandardScaler().fit_transform(X)[:, :6], y - y.mean(), 8, "dirichlet", seed=0,
                                  task="classification"),
                        weights=weights, backend="numpy")
    p = prob.n_params
    g0 = prob.grad(np.zeros(p))  # the gradient is affine: x* = -H^{-1} g(0), H column by column
    x_star = -np.linalg.solve(np.column_stack([prob.grad(e) - g0 for e in np.eye(p)]), g0)
    result = fedopt.run(name, prob, rounds=1000, seed=1, x0=x_star, eval_every=1000, clients_per_round=3,
                        sampling="weighted", local_steps=3, lr_local=0.05, batch_size=None,
                        **({"gamma": 0.05} if name == "fednmap" else {}))
    c = result.state.vars["c"]
    assert np.abs(c).max() > 1e-2  # the corrections are far from 0, their weighted sum is not
    np.testing.assert_allclose(prob.weights @ c, 0, atol=1e-13)
    assert np.abs(result.x - x_star).max() < 1e-3


@pytest.mark.parametrize("sampling", ["uniform", "weighted"])
@pytest.mark.parametrize("name", ["feddr", "fedadmm"])
def test_feddr_and_fedadmm_keep_the_server_sum_over_all_clients(name, sampling):
    """Their papers' partial participation: the server's pre-prox point moves by the sampled
    clients' increments, so it stays ``sum_i w_i xhat_i`` over every client."""
    prob = problem()
    result = fedopt.run(name, prob, R.L1(1e-3), rounds=30, seed=2, eval_every=10,
                        **options(name, clients_per_round=3, sampling=sampling))
    state = result.state
    x_hat = 2 * state.vars["x_clients"] - state.vars["y"] if name == "feddr" else state.vars["xhat"]
    np.testing.assert_allclose(state.z, prob.weights @ x_hat, atol=1e-13)
    assert result.history["objective"][-1] < result.history["objective"][0]


@pytest.mark.parametrize("sampling", ["uniform", "weighted"])
def test_resuming_leaves_the_state_resumed_from_as_it_was(sampling):
    """A cohort round updates its rows of the client arrays in place: on the run's own copy, so that
    two continuations of one checkpoint are the same run."""
    prob = problem()
    hyper = options("fednmap", clients_per_round=3, sampling=sampling)
    first = fedopt.run("fednmap", prob, regularizer("fednmap"), rounds=4, seed=0, **hyper)
    kept = first.state.vars["c"].copy()
    a, b = (fedopt.run("fednmap", prob, regularizer("fednmap"), rounds=4, seed=1, resume=first.state, **hyper)
            for _ in range(2))
    np.testing.assert_array_equal(first.state.vars["c"], kept)
    np.testing.assert_array_equal(a.x, b.x)
    assert not np.array_equal(a.state.vars["c"], kept)


def test_only_the_cohorts_rows_are_read():
    """NaN in every client outside the cohort leaves the round finite: their rows are never read."""
    prob = problem(n_clients=12)
    method = fedopt.algorithms.make("fednmap", **options("fednmap", clients_per_round=4))
    state, clients = first_round(method, prob)
    others = np.setdiff1d(np.arange(prob.n_clients), clients)
    for i in others:
        prob._X[prob.dataset.offsets[i]:prob.dataset.offsets[i + 1]] = np.nan
    assert np.isfinite(method.next_round(state).x).all()


def test_aggregates_are_unbiased():
    prob = problem(n_clients=12)  # sample-count weights: unequal
    values = np.random.default_rng(0).normal(size=(12, 3))
    exact = prob.weights @ values
    rng = np.random.default_rng(1)

    def aggregate(prob, sampling):
        clients, weights = prob.draw_cohort(rng, 4, sampling)
        return prob.cohort(clients, weights).average(values[clients])

    weighted = np.mean([aggregate(prob, "weighted") for _ in range(20_000)], axis=0)
    np.testing.assert_allclose(weighted, exact, atol=0.02)
    equal = problem(weights="uniform", n_clients=12)
    uniform = np.mean([aggregate(equal, "uniform") for _ in range(20_000)], axis=0)
    np.testing.assert_allclose(uniform, equal.weights @ values, atol=0.02)


def test_weighted_sampling_follows_the_client_weights():
    prob = problem(n_clients=12)
    rng = np.random.default_rng(0)
    draws = np.concatenate([prob.draw_cohort(rng, 5, "weighted")[0] for _ in range(20_000)])
    np.testing.assert_allclose(np.bincount(draws, minlength=12) / len(draws), prob.weights, atol=0.005)
    clients, _ = prob.draw_cohort(rng, 12, "uniform")
    np.testing.assert_array_equal(clients, np.arange(12))


def test_a_repeated_client_counts_once_in_the_population_sum():
    prob = problem(n_clients=12)
    view = prob.cohort(np.array([2, 2, 5]), np.full(3, 1 / 3))
    values = np.arange(9.0).reshape(3, 3)
    np.testing.assert_allclose(view.population_sum(values), prob.weights[2] * values[1] + prob.weights[5] * values[2])
    assert view.n_clients == 3 and view.client_zeros().shape == (3, prob.n_params)


@pytest.mark.parametrize("name", ["fednmap", "fedcanon", "scaffold"])
def test_partial_participation_still_converges(name):
    X, y = load_breast_cancer(return_X_y=True)
    prob = LeastSquares(partition(StandardScaler().fit_transform(X), y.astype(float), 20, "iid", seed=0),
                        weights="uniform")
    reg = regularizer(name)
    steps = {"lr_local": 0.02, "local_steps": 5, "batch_size": None, **({"gamma": 0.1} if name == "fednmap" else {})}
    full = fedopt.run(name, prob, reg, rounds=400, seed=0, eval_every=400, **steps)
    half = fedopt.run(name, prob, reg, rounds=800, seed=0, eval_every=800, clients_per_round=10, **steps)
    assert half.history["stationarity"][-1] < 1e-3 * half.history["stationarity"][0]
    assert half.history["objective"][-1] == pytest.approx(full.history["objective"][-1], rel=1e-2)


def test_bad_cohorts_are_refused_with_the_fix():
    prob = problem()
    for bad in (0, -3, 1.5, True, "10"):
        with pytest.raises(ValueError, match="clients_per_round"):
            fedopt.algorithms.make("fedavg", clients_per_round=bad)
    with pytest.raises(ValueError, match="more than the 12 clients"):
        fedopt.run("fedavg", prob, rounds=1, clients_per_round=13)
    with pytest.raises(ValueError, match="sampling"):
        fedopt.algorithms.make("fedavg", sampling="stratified")
    with pytest.raises(ValueError, match="scaffnew has no hyperparameter 'clients_per_round'"):
        fedopt.algorithms.make("scaffnew", clients_per_round=3)
    with pytest.raises(ValueError, match="one at a time"):
        fedopt.run_batch("fedavg", prob, rounds=1, seeds=[0, 1], clients_per_round=3)
    weights = np.r_[np.full(3, 1 / 3), np.zeros(9)]  # a cohort of clients of weight 0 alone averaged 0 / 0: NaN
    weightless = problem(weights=weights)
    for name, options_ in (("clients_per_round", options("fednmap", clients_per_round=4)), ("eval_clients", {})):
        with pytest.raises(ValueError, match=f"{name}=4 asks for more distinct clients than the 3 of positive weight"):
            fedopt.run("fednmap", weightless, regularizer("fednmap"), rounds=1, **options_,
                       **({"eval_clients": 4} if name == "eval_clients" else {}))
    for name in ("clients_per_round", "eval_clients"):  # a fraction is named as given, with the count it means
        with pytest.raises(ValueError, match=rf"{name}=0.5 \(6 of 12 clients\) asks for more distinct clients"):
            fedopt.run("fednmap", weightless, regularizer("fednmap"), rounds=1,
                       **{**options("fednmap", clients_per_round=3), name: 0.5})
    for seed in range(10):  # cohorts and evaluation samples of 3 are the 3 clients of positive weight
        run = fedopt.run("fednmap", weightless, regularizer("fednmap"), rounds=3, seed=seed, eval_clients=3,
                         **options("fednmap", clients_per_round=3))
        assert np.isfinite(run.history["objective"]).all()
        exact = weightless.loss(run.x) + regularizer("fednmap").value(run.x)  # the sample is every weighted client
        np.testing.assert_allclose(run.history["objective"][-1], exact)


@pytest.mark.parametrize("name", ["fednmap", "zhang", "fedcanon", "fedcanon2"])
def test_cohorts_of_one_client_are_refused_where_corrections_would_stay_zero(name):
    """c_i + ybar - y_i with the one client's own y_i as ybar: the run used to go on uncorrected and settle
    off the solution (||F_nat||^2 2e-2 after 3000 rounds, where SCAFFOLD's reached 1e-30)."""
    prob = problem()
    for cohort in (1, 0.05):  # a count, and a fraction that means one of the 12 clients
        for sampling in ("uniform", "weighted"):
            with pytest.raises(ValueError, match=r"cohorts of one client.*clients_per_round >= 2, or scaffold"):
                fedopt.run(name, prob, regularizer(name), rounds=1,
                           **options(name, clients_per_round=cohort, sampling=sampling))
    fedopt.run("scaffold", prob, rounds=1, **options("scaffold", clients_per_round=1))  # a server-held mean


def test_numpy_counts_and_fractions_of_clients_are_taken():
    # what GridSearchCV passes from np.arange or np.linspace: ints and floats, so that cohort_size reads them
    for value, taken, size in ((np.int64(4), 4, 4), (np.int32(4), 4, 4), (np.float32(0.5), 0.5, 6),
                               (np.float64(4.0), 4, 4), (np.float32(4.0), 4, 4)):
        method = fedopt.algorithms.make("fednmap", clients_per_round=value)
        assert method.clients_per_round == taken and type(method.clients_per_round) is type(taken)
        assert method.cohort_size(12) == size
    # the nearest count, halves up whatever the population's parity; a few clients at least one
    assert [cohort_size(0.5, n, "clients_per_round") for n in (3, 5, 7, 9, 11)] == [2, 3, 4, 5, 6]
    assert cohort_size(0.29, 100, "clients_per_round") == 29 and cohort_size(0.01, 10, "clients_per_round") == 1
    for bad in (np.int64(0), np.float32(1.5), np.bool_(True), np.float64(np.inf), np.float32(np.nan)):
        with pytest.raises(ValueError, match=re.escape("clients_per_round must be a count >= 1, a fraction in "
                                                       f"(0, 1] or None (every client), got {bad!r}")):
            fedopt.algorithms.make("fednmap", clients_per_round=bad)
    X, y = load_breast_cancer(return_X_y=True)
    X, y = StandardScaler().fit_transform(X), y.astype(float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        search = GridSearchCV(FederatedLasso(0.01, n_clients=8, max_rounds=20, random_state=0),
                              {"clients_per_round": np.arange(2, 5)}, cv=2, error_score="raise").fit(X, y)
        est = FederatedLasso(0.01, n_clients=8, clients_per_round=np.int64(2), max_rounds=20, random_state=0).fit(X, y)
    assert search.best_params_["clients_per_round"] in (2, 3, 4)
    assert est.history_["grad_evals"][-1] == 2 * est.local_steps * est.n_iter_  # 2 clients a round


def test_an_estimator_checks_cohorts_and_refuses_them_for_a_method_without():
    X, y = load_breast_cancer(return_X_y=True)
    X, y = StandardScaler().fit_transform(X), y.astype(float)
    for algorithm in ("fednmap", "scaffnew"):  # checked whatever the method
        with pytest.raises(ValueError, match=re.escape("clients_per_round must be a count >= 1, a fraction in (0, 1] "
                                                       "or None (every client), got -5")):
            FederatedLasso(0.0, algorithm=algorithm, clients_per_round=-5).fit(X, y)
        with pytest.raises(ValueError, match="sampling must be one of 'uniform', 'weighted', got 'nonsense'"):
            FederatedLasso(0.0, algorithm=algorithm, sampling="nonsense").fit(X, y)
    for name, value, default in (("clients_per_round", 3, None), ("clients_per_round", 1.0, None),
                                 ("sampling", "weighted", "uniform")):
        with pytest.raises(ValueError, match=re.escape(
                f"algorithm='scaffnew' draws no cohorts (every client takes part in every round), so it cannot take "
                f"{name}={value!r}: leave {name}={default!r}, or use a method that samples clients: fednmap, zhang, "
                "fedcanon, fedcanon2, scaffold, fedavg, fedmid, fedda, feddr, fedadmm")):
            FederatedLasso(0.0, algorithm="scaffnew", **{name: value}).fit(X, y)


def test_estimators_take_cohorts():
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    est = FederatedLasso(0.01, n_clients=20, clients_per_round=0.5, sampling="weighted", max_rounds=300, tol=0,
                         random_state=0)
    with pytest.warns(ConvergenceWarning):  # tol = 0
        est.fit(X, y.astype(float))
    assert est.history_["grad_evals"][1] == 10 * est.local_steps * est.history_["round"][1]
    assert est.score(X, y) > 0.6


def test_evaluation_on_a_fixed_sample_of_clients_is_stated_and_leaves_training_alone():
    X, y = load_breast_cancer(return_X_y=True)
    prob = Logistic(partition(StandardScaler().fit_transform(X), y, 12, "dirichlet", seed=0, test_size=0.2),
                    weights="samples")
    steps = options("fednmap", clients_per_round=4)
    exact = fedopt.run("fednmap", prob, R.L1(1e-3), rounds=20, seed=5, eval_every=10, **steps)
    sampled = fedopt.run("fednmap", prob, R.L1(1e-3), rounds=20, seed=5, eval_every=10, eval_clients=6, **steps)
    np.testing.assert_array_equal(sampled.x, exact.x)  # the sample comes from a stream of its own
    assert sampled.history.estimated == {c: "6 of 12 clients" for c in ("stationarity", "normal_map", "objective")}
    assert exact.history.estimated == {} and "on 6 of 12 clients" in repr(sampled.history)
    assert not np.allclose(sampled.history["objective"], exact.history["objective"])
    np.testing.assert_allclose(sampled.history["objective"], exact.history["objective"], rtol=0.5)
    np.testing.assert_array_equal(sampled.history["test_accuracy"], exact.history["test_accuracy"])  # exact
    everyone = fedopt.run("fednmap", prob, R.L1(1e-3), rounds=20, seed=5, eval_every=10, eval_clients=12, **steps)
    np.testing.assert_allclose(everyone.history["objective"], exact.history["objective"], rtol=1e-12)
    no_test = fedopt.run("fednmap", problem(n_clients=12), R.L1(1e-3), rounds=2, seed=5, eval_clients=6, **steps)
    assert no_test.history.estimated["test_accuracy"] == "6 of 12 clients"  # scored on the sample's rows
    with pytest.raises(ValueError, match="eval_clients"):
        fedopt.run("fednmap", prob, R.L1(1e-3), rounds=1, eval_clients=0, **steps)
    with pytest.raises(ValueError, match="per-node"):
        fedopt.run("depositum", prob, rounds=1, eval_clients=4, batch_size=8)


@pytest.mark.parametrize("seed", [lambda: 5, lambda: [5, 1], lambda: np.random.SeedSequence(5),
                                  lambda: np.random.default_rng(5)],
                         ids=["int", "sequence", "SeedSequence", "Generator"])
def test_the_evaluation_sample_comes_from_any_seed_the_run_takes(seed):
    prob, steps = problem(n_clients=12), options("fednmap", clients_per_round=4)
    first, again = (fedopt.run("fednmap", prob, R.L1(1e-3), rounds=2, seed=seed(), eval_clients=6, **steps)
                    for _ in range(2))
    np.testing.assert_array_equal(first.history["objective"], again.history["objective"])
    exact = fedopt.run("fednmap", prob, R.L1(1e-3), rounds=2, seed=seed(), **steps)
    np.testing.assert_array_equal(first.x, exact.x)  # the sample leaves the training draws alone


def test_the_readmes_million_client_run_with_two_thousand_clients():
    from test_readme import BLOCKS, NOT_RUN

    (block,) = [b for b in BLOCKS if b.startswith(NOT_RUN) and "1_000_000" in b]
    namespace = {}
    smaller = block.replace("1_000_000", "2_000").replace("eval_clients=1000", "eval_clients=500")
    exec(compile(smaller.replace("rounds=1000", "rounds=300"), "README.md million-client example", "exec"), namespace)
    res = namespace["res"]
    assert res.history["objective"][-1] < 0.6 * res.history["objective"][0]
    assert res.history.estimated["objective"] == "500 of 2000 clients"
    assert res.history["grad_evals"][-1] == 300 * 100 * 10  # the cohort's clients only


def state_arrays(state):
    """Copies of a state's model, pre-prox point and array entries."""
    arrays = {"x": state.x, "z": state.z, **{k: v for k, v in state.vars.items() if isinstance(v, np.ndarray)}}
    return {k: np.array(v, copy=True) for k, v in arrays.items() if v is not None}


@pytest.mark.parametrize("sampling", ["uniform", "weighted"])
@pytest.mark.parametrize("name", COHORT_METHODS)
def test_a_rejected_cohort_round_can_be_undone(name, sampling):
    """A cohort round writes its rows into the arrays of the state before it (no n x p copy per round), and keeps
    the rows it overwrote: undo_round gives that state back as it was, for fedopt.run to report on NaN/inf."""
    from fedopt.algorithms.base import undo_round

    method = fedopt.algorithms.make(name, **options(name, clients_per_round=4, sampling=sampling))
    state, _ = first_round(method, problem())
    kept = state_arrays(state)
    after = method.next_round(state)
    assert after.undo is not None and all(len(rows) == len(old) <= 4 for _, rows, old in after.undo)  # cohort rows
    undo_round(after)
    for key, value in state_arrays(state).items():
        np.testing.assert_array_equal(value, kept[key], err_msg=key)
    full = fedopt.algorithms.make(name, **options(name))  # a full round writes nothing in place
    assert full.next_round(after).undo is None


def test_the_state_of_a_run_stopped_on_inf_is_its_last_finite_round_and_resumes_as_it():
    """DivergenceError.result.state used to carry the cohort rows of the round that overflowed."""
    from fedopt.datasets import from_client_ids

    rng = np.random.default_rng(0)
    X, clients = rng.standard_normal((40, 4)), np.repeat(np.arange(4), 10)
    prob = LeastSquares(from_client_ids(X, X @ rng.standard_normal(4) + clients, clients, task="regression"))
    hyper = {"local_steps": 3, "lr_local": 3.0, "batch_size": None, "clients_per_round": 2, "divergence": None,
             "progress": False}
    copies = {}  # the callback's states share their arrays with later rounds: copies, as its docstring says

    def keep(state, row):
        copies[state.round] = replace(state, x=state.x.copy(), z=state.z.copy(),
                                      vars={k: v.copy() for k, v in state.vars.items()})

    with pytest.raises(fedopt.DivergenceError) as info:
        fedopt.run("fednmap", prob, R.L1(0.05), rounds=500, callback=keep, **hyper)
    stopped = info.value.result.state
    assert info.value.rule == "nonfinite" and stopped.round == max(copies)
    for key, value in state_arrays(stopped).items():
        np.testing.assert_array_equal(value, state_arrays(copies[stopped.round])[key], err_msg=key)

    def resume(state):  # rounds more, to their own overflow (the very next round, from 1e150)
        with pytest.raises(fedopt.DivergenceError) as again:
            fedopt.run("fednmap", prob, R.L1(0.05), rounds=50, seed=5, resume=state, **hyper)
        return again.value

    resumed, from_copy = resume(stopped), resume(copies[stopped.round])
    assert str(resumed) == str(from_copy)  # the objective of the first round resumed (inf or a number) included
    np.testing.assert_array_equal(resumed.result.history["objective"], from_copy.result.history["objective"])
    np.testing.assert_array_equal(resumed.result.state.vars["c"], from_copy.result.state.vars["c"])


def test_resume_refuses_a_state_of_another_dtype():
    """A float64 state resumed on a float32 problem used to run (and return) float64, silently."""
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    p64, p32 = (Logistic(partition(X, y, 4, "iid", seed=0, dtype=dtype)) for dtype in (np.float64, np.float32))
    hyper = {"rounds": 2, "local_steps": 2, "lr_local": 0.05, "progress": False}
    wide, narrow = (fedopt.run("fednmap", p, R.L1(1e-3), **hyper) for p in (p64, p32))
    mismatches = ((wide.state, p32, "float64", "float32"), (narrow.state, p64, "float32", "float64"))
    for state, prob, held, wanted in mismatches:
        with pytest.raises(ValueError, match=f"resume holds a {held} state, the problem is {wanted}: resume on a "
                                             f"{held} problem .* or start a {wanted} run from the model with x0="):
            fedopt.run("fednmap", prob, R.L1(1e-3), resume=state, **hyper)
    assert fedopt.run("fednmap", p32, R.L1(1e-3), resume=narrow.state, **hyper).x.dtype == np.float32


@pytest.mark.parametrize("sampling", ["uniform", "weighted"])
def test_a_cohort_round_sends_the_model_to_clients_that_keep_their_own_copy(sampling):
    """FedCanon II's and ZA1's downlink omits the model, which every client updates itself; a sampled client
    may have sat out the rounds that changed it, so a cohort round sends it too. The same iterates as
    FedCanon's then cost the same downlink, and a full round keeps its one vector."""
    prob, size = problem(), 4
    per_round = {}
    for name in ("fedcanon", "fedcanon2", "zhang"):
        for cohort in (None, size):
            history = fedopt.run(name, prob, regularizer(name), rounds=3, seed=1,
                                 **options(name, clients_per_round=cohort, sampling=sampling)).history
            per_round[name, cohort] = set(np.diff(history["floats_down"]) // prob.n_params)
    assert per_round["fedcanon", None] == {2 * 12} and per_round["fedcanon", size] == {2 * size}
    assert per_round["fedcanon2", None] == {12} and per_round["fedcanon2", size] == {2 * size}
    assert per_round["zhang", None] == {12} and per_round["zhang", size] == {2 * size}
