"""fedopt.run_batch: run r of a batch equals fedopt.run with the r-th seed and values."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import make_classification

import fedopt
from fedopt import batch
from fedopt.algorithms import Start
from fedopt.datasets import partition
from fedopt.problems import MLP, LeastSquares, Logistic
from fedopt.regularizers import L1, MCP, GroupLasso, Zero

METRICS = ("stationarity", "normal_map", "objective", "test_accuracy", "nnz", "grad_evals", "floats_up")


def make_data(dtype=None):
    """Five clients of unequal sizes (Dirichlet label skew), some odd and some even."""
    X, y = make_classification(240, 11, n_informative=6, random_state=0)
    return partition(X, y, n_clients=5, scheme="dirichlet", seed=0, dtype=dtype)


@pytest.fixture(scope="module")
def data():
    return make_data()


def logistic(data, backend="numba"):
    return Logistic(data, backend=backend)


def assert_same_run(single, batched, rtol=0.0):
    """The batched run's model and history equal the single run's: bit for bit on the CPU backends
    (each client row does the same arithmetic in the same order), or to ``rtol``."""
    assert batched.error is None
    assert len(single.history) == len(batched.history)
    np.testing.assert_allclose(batched.x, single.x, rtol=rtol, atol=0)
    assert batched.history.columns == single.history.columns
    for column in (c for c in METRICS if c in single.history):  # normal_map: methods with a pre-prox point
        np.testing.assert_allclose(batched.history[column], single.history[column], rtol=rtol, atol=0)
    np.testing.assert_array_equal(batched.history["round"], single.history["round"])


CASES = [
    ("fednmap", L1(0.02), {"gamma": 2.0}),
    ("fedavg", L1(0.02), {}),
    ("scaffold", Zero(), {}),
    ("fedmid", MCP(0.02, 4.0), {}),
    ("fedda", L1(0.02), {}),
    ("fedcanon", L1(0.02), {}),
    ("fedcanon2", GroupLasso(0.02, groups=np.arange(11) % 3), {}),
    ("zhang", L1(0.02), {}),
    ("feddr", L1(0.02), {"gamma": 1.0}),
    ("fedadmm", L1(0.02), {"gamma": 1.0}),
    ("scaffnew", Zero(), {"random_steps": False, "comm_prob": 0.25}),
]


@pytest.mark.parametrize("backend", ["numba", "numpy"])
@pytest.mark.parametrize(("method", "reg", "extra"), CASES, ids=[c[0] for c in CASES])
def test_batch_equals_single_runs(data, backend, method, reg, extra):
    problem = logistic(data, backend)
    seeds, lrs = [3, 0, 7], [0.05, 0.1, 0.05]
    common = {"rounds": 9, "eval_every": 4, "batch_size": 6, **extra}
    if method not in ("scaffnew",):
        common["local_steps"] = 3
    results = fedopt.run_batch(method, problem, reg, seeds=seeds, lr_local=lrs, **common)
    for seed, lr, result in zip(seeds, lrs, results, strict=True):
        single = fedopt.run(method, problem, reg, seed=seed, lr_local=lr, **common)
        assert_same_run(single, result)
        assert result.seed == seed and result.algorithm.lr_local == lr


@pytest.mark.parametrize(("method", "reg", "extra"), CASES, ids=[c[0] for c in CASES])
def test_one_client_runs_give_the_single_run_state_and_resume_from_it(method, reg, extra):
    """With one client a ``(R, 1, p)`` array may be a server vector or the client's rows: each run's
    state has the shapes of fedopt.run's, and a run resumed from it goes on as from the single run's."""
    X, y = make_classification(240, 11, n_informative=6, random_state=0)
    problem = Logistic(partition(X, y, n_clients=1, scheme="iid", seed=0))
    common = {"rounds": 3, "batch_size": 4, "lr_local": 0.1, **extra}
    if method != "scaffnew":
        common["local_steps"] = 2
    batched = fedopt.run_batch(method, problem, reg, seeds=[0, 1], **common)[0]
    single = fedopt.run(method, problem, reg, seed=0, **common)
    assert_same_run(single, batched)
    assert batched.state.vars.keys() == single.state.vars.keys()
    for name, value in single.state.vars.items():
        assert np.shape(batched.state.vars[name]) == np.shape(value), name
    resumed = fedopt.run(method, problem, reg, seed=0, resume=batched.state, **common)
    np.testing.assert_array_equal(resumed.x, fedopt.run(method, problem, reg, seed=0, resume=single.state, **common).x)


def test_regularization_path_and_full_gradients(data):
    """A list of regularizers (a lambda path) and full local gradients batch too."""
    problem = logistic(data)
    regs = [L1(0.001), L1(0.01), L1(0.05)]
    results = fedopt.run_batch("fednmap", problem, regs, seeds=[1, 1, 1], rounds=8, batch_size=None, local_steps=2,
                               lr_local=0.1, gamma=[1.0, 2.0, 1.0])
    for reg, gamma, result in zip(regs, [1.0, 2.0, 1.0], results, strict=True):
        single = fedopt.run("fednmap", problem, reg, seed=1, rounds=8, batch_size=None, local_steps=2, lr_local=0.1,
                            gamma=gamma)
        assert_same_run(single, result)
    assert results[0].history["nnz"][-1] > results[2].history["nnz"][-1]  # the path: stronger l1, sparser


@pytest.mark.parametrize("method", ["fednmap", "fedmid"])
def test_runs_with_other_kinds_of_prox_batch_apart(data, method):
    """Runs whose proxes differ in kind (l1, MCP, row-wise, none) each take fedopt.run's fused kernels,
    so the batch still equals the single runs bit for bit, in the order given."""
    problem = logistic(data)
    regs = [L1(0.02), MCP(0.02, 5.0), L1(0.01), GroupLasso(0.02, groups=np.arange(11) % 3), Zero()]
    common = {"rounds": 4, "local_steps": 3, "batch_size": 6, "lr_local": 0.05}
    results = fedopt.run_batch(method, problem, regs, seeds=[0, 1, 2, 3, 4], **common)
    for seed, (reg, result) in enumerate(zip(regs, results, strict=True)):
        assert_same_run(fedopt.run(method, problem, reg, seed=seed, **common), result)
    assert [len(group) for group in batch._prox_groups(regs, problem)] == [2, 1, 1, 1]


@pytest.mark.parametrize("scheme", ["iid", "dirichlet"], ids=["equal-sizes", "unequal-sizes"])
def test_runs_on_other_partitions_batch(scheme):
    """One problem per run (partition seeds 0, 1, 0): their data sets are stacked once each."""
    X, y = make_classification(240, 11, n_informative=6, random_state=0)
    problems = [Logistic(partition(X, y, n_clients=5, scheme=scheme, seed=s)) for s in (0, 1)]
    per_run = [problems[0], problems[1], problems[0]]
    results = fedopt.run_batch("fedcanon", per_run, L1(0.01), seeds=[0, 1, 2], rounds=6, local_steps=2, batch_size=4,
                               eval_every=3, lr_local=0.1)
    for seed, problem, result in zip([0, 1, 2], per_run, results, strict=True):
        assert_same_run(fedopt.run("fedcanon", problem, L1(0.01), seed=seed, rounds=6, local_steps=2, batch_size=4,
                                   eval_every=3, lr_local=0.1), result)
    assert not np.array_equal(results[0].x, results[1].x)


WEIGHTED = [(method, reg, {**extra, "lr_local": 0.1, **({} if method == "scaffnew" else {"local_steps": 2})})
            for method, reg, extra in CASES] + [
    ("depositum", L1(0.01), {"comm_period": 2, "lr": 0.1, "topology": "ring"}),
    ("prox-dsgt", L1(0.01), {"lr": 0.1, "topology": "ring"}),
]


@pytest.mark.parametrize("backend", ["numba", "numpy"])
@pytest.mark.parametrize(("method", "reg", "extra"), WEIGHTED, ids=[c[0] for c in WEIGHTED])
def test_runs_with_their_own_client_weights_batch(backend, method, reg, extra):
    """Partitions of other client sizes with ``weights="samples"``: each run averages (and, in the
    decentralized methods, scales its nodes' gradients) with its own weights, bit for bit."""
    X, y = make_classification(240, 11, n_informative=6, random_state=0)
    problems = [Logistic(partition(X, y, n_clients=5, scheme="dirichlet", seed=s), weights="samples", backend=backend)
                for s in (0, 1)]
    assert not np.allclose(problems[0].weights, problems[1].weights)
    per_run = [problems[0], problems[1], problems[1]]
    common = {"rounds": 5, "eval_every": 2, "batch_size": 4, **extra}
    results = fedopt.run_batch(method, per_run, reg, seeds=[0, 1, 2], **common)
    for seed, problem, result in zip([0, 1, 2], per_run, results, strict=True):
        assert_same_run(fedopt.run(method, problem, reg, seed=seed, **common), result)


@pytest.mark.parametrize("method", ["fedcanon", "fedcanon2", "fedavg", "scaffold"])
def test_runs_off_the_fused_kernel_batch_with_one_step_size(method):
    """Sample weights take the unfused local loop (an oracle per step, then the update in one pass):
    with one lr for all runs that pass once got the batch's (R, n, p) arrays and failed to compile."""
    X, y = make_classification(240, 11, n_informative=6, random_state=0)
    weights = np.random.default_rng(0).random(len(y)) + 0.5
    problem = Logistic(partition(X, y, n_clients=5, seed=0, sample_weight=weights), weights="samples")
    reg = Zero() if method == "scaffold" else L1(0.01)
    common = {"rounds": 4, "eval_every": 2, "batch_size": 4, "local_steps": 2, "lr_local": 0.1}
    results = fedopt.run_batch(method, problem, reg, seeds=[0, 1], **common)
    for seed, result in zip([0, 1], results, strict=True):
        assert_same_run(fedopt.run(method, problem, reg, seed=seed, **common), result)


def test_problems_that_cannot_share_a_batch(data):
    X, y = make_classification(240, 11, n_informative=6, random_state=0)
    other_n = Logistic(partition(X, y, n_clients=4, seed=0))
    with pytest.raises(ValueError, match="must have one n_clients, got 5 and 4"):
        fedopt.run_batch("fedavg", [logistic(data), other_n], seeds=[0, 1], rounds=1)


def test_centered_sparse_problems_batch_with_one_center():
    """Two partitions of CSR rows centered on the pooled mean run as one batch (the fused kernel
    over both) as they run alone; each data set's own mean is refused: the view has one center."""
    import scipy.sparse as sp

    X, y = make_classification(240, 11, n_informative=6, random_state=0)
    X = sp.csr_matrix(np.where(X > 0.5, X, 0.0))
    mu = np.asarray(X.mean(axis=0)).ravel()
    parts = [partition(X, y, n_clients=5, scheme="dirichlet", seed=s) for s in (0, 1)]
    problems = [Logistic(part, fit_intercept=True, center=mu, backend="numba") for part in parts]
    common = {"rounds": 4, "local_steps": 3, "batch_size": 6, "lr_local": 0.3}
    for seed, problem, result in zip([0, 1], problems, fedopt.run_batch("fednmap", problems, L1(1e-3), seeds=[0, 1],
                                                                          **common), strict=True):
        assert_same_run(fedopt.run("fednmap", problem, L1(1e-3), seed=seed, **common), result)
    own_mean = np.asarray(parts[0].X.mean(axis=0)).ravel()  # the first partition's rows only
    own = [Logistic(parts[0], fit_intercept=True, center=own_mean, backend="numba"), problems[1]]
    with pytest.raises(ValueError, match="must share their center: those of runs 0 and 1 differ"):
        fedopt.run_batch("fednmap", own, L1(1e-3), seeds=[0, 1], **common)


def test_mlp_batch(data):
    problem = MLP(data, hidden=4, backend="numba")
    results = fedopt.run_batch("fedcanon", problem, L1(1e-3), seeds=[0, 1], rounds=4, local_steps=2, batch_size=5,
                               lr_local=[0.05, 0.1])
    for seed, lr, result in zip([0, 1], [0.05, 0.1], results, strict=True):
        single = fedopt.run("fedcanon", problem, L1(1e-3), seed=seed, rounds=4, local_steps=2, batch_size=5,
                            lr_local=lr)
        assert_same_run(single, result)


def test_float32_batch(data):
    problem = logistic(make_data(np.float32))
    results = fedopt.run_batch("fednmap", problem, L1(0.02), seeds=[0, 1], rounds=6, local_steps=3, batch_size=4,
                               lr_local=[0.05, 0.1])
    for seed, lr, result in zip([0, 1], [0.05, 0.1], results, strict=True):
        single = fedopt.run("fednmap", problem, L1(0.02), seed=seed, rounds=6, local_steps=3, batch_size=4, lr_local=lr)
        assert result.x.dtype == np.float32
        np.testing.assert_allclose(result.x, single.x, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("problem_class", "huge", "divergence", "rule"), [
    (Logistic, 1e4, True, "objective"),
    (LeastSquares, 1e3, None, "nonfinite"),
])
def test_diverging_run_stops_alone(data, problem_class, huge, divergence, rule):
    """A run whose step is far too large stops with its history and error; the others finish unchanged."""
    problem = problem_class(data, backend="numba")
    lrs = [0.1, huge, 0.05]
    kwargs = {"rounds": 40, "local_steps": 3, "batch_size": 6, "divergence": divergence}
    results = fedopt.run_batch("fedavg", problem, L1(0.01), seeds=[0, 1, 2], lr_local=lrs, **kwargs)
    failed = results[1]
    assert isinstance(failed.error, fedopt.DivergenceError) and "fedavg diverged" in str(failed.error)
    with pytest.raises(fedopt.DivergenceError) as single:
        fedopt.run("fedavg", problem, L1(0.01), seed=1, lr_local=huge, **kwargs)
    assert failed.error.rule == single.value.rule == rule
    assert str(failed.error) == str(single.value)
    failed.error = None
    assert_same_run(single.value.result, failed)
    for seed in (0, 2):
        assert_same_run(fedopt.run("fedavg", problem, L1(0.01), seed=seed, lr_local=lrs[seed], **kwargs),
                        results[seed])


def test_tol_stops_each_run_on_its_own(data):
    problem = logistic(data)
    results = fedopt.run_batch("fednmap", problem, L1(0.02), seeds=[0, 0], rounds=200, batch_size=None,
                               local_steps=2, lr_local=[0.2, 0.02], tol=1e-4, eval_every=5)
    assert results[0].converged and results[0].history["round"][-1] < results[1].history["round"][-1]
    for lr, result in zip([0.2, 0.02], results, strict=True):
        single = fedopt.run("fednmap", problem, L1(0.02), seed=0, rounds=200, batch_size=None, local_steps=2,
                            lr_local=lr, tol=1e-4, eval_every=5)
        assert single.converged == result.converged
        assert_same_run(single, result)


@pytest.mark.parametrize(("method", "per_run", "own"), [
    ("fednmap", {"gamma": [0.5, 2.0, 0.5], "lr_local": [0.3, 0.05, 0.05], "tol": 4e-3}, [0.5, 2.0, 0.5]),
    ("feddr", {"gamma": 0.5, "lr_local": [0.3, 0.1, 0.05], "tol": 6e-3}, [0.5] * 3),
    ("zhang", {"lr_local": [0.05, 0.1, 0.2], "tol": 4e-3}, [0.15, 0.3, 0.6]),
], ids=["fednmap", "feddr", "zhang"])
def test_normal_map_takes_each_runs_own_prox_parameter_of_z(data, method, per_run, own):
    """Per-run prox parameters of ``z`` (a gamma or Zhang's eta_hat, given per run or for all) set
    each run's ``normal_map`` as in fedopt.run, with metric_gamma another value; a run that
    reaches ``tol`` leaves the batch before the others, which keep theirs."""
    problem, reg = logistic(data), L1(0.02)
    common = {"rounds": 12, "eval_every": 3, "local_steps": 3, "batch_size": None, "metric_gamma": 1.0}
    results = fedopt.run_batch(method, problem, reg, seeds=[0, 1, 2], **{**common, **per_run})
    assert 1 <= sum(result.converged for result in results) < 3
    for r, (g, result) in enumerate(zip(own, results, strict=True)):
        values = {name: v[r] if isinstance(v, list) else v for name, v in per_run.items()}
        assert_same_run(fedopt.run(method, problem, reg, seed=r, **{**common, **values}), result)
        x, z = result.x, result.z
        by_hand = np.sum((problem.grad(x) + (z - x) / g) ** 2)
        np.testing.assert_allclose(result.history["normal_map"][-1], by_hand, rtol=1e-10)


def test_tol_given_as_a_numeric_string_is_taken_as_its_number(data):
    problem = logistic(data)
    kw = {"seeds": [0, 0], "rounds": 200, "batch_size": None, "local_steps": 2, "lr_local": [0.2, 0.02],
          "eval_every": 5}
    as_string = fedopt.run_batch("fednmap", problem, L1(0.02), tol="1e-4", **kw)
    as_number = fedopt.run_batch("fednmap", problem, L1(0.02), tol=1e-4, **kw)
    assert as_string[0].converged
    for a, b in zip(as_string, as_number, strict=True):
        assert a.converged == b.converged
        np.testing.assert_array_equal(a.history["round"], b.history["round"])


def test_runs_stopped_at_round_0_keep_their_verdict(data):
    """With rounds=0 the round-0 record alone decides, as in fedopt.run: converged by tol, or stopped on NaN."""
    problem = logistic(data)
    reached = fedopt.run_batch("fednmap", problem, seeds=[0, 1], rounds=0, tol=1e9)
    assert [r.converged for r in reached] == [True, True]
    assert reached[0].converged == fedopt.run("fednmap", problem, rounds=0, tol=1e9).converged
    huge = np.full(problem.n_params, 1e307)  # a NaN objective at round 0
    nan_run, fine = fedopt.run_batch("fednmap", problem, L1(1e-3), rounds=0, seeds=[0, 0], divergence=False,
                                     x0=[huge, np.zeros(problem.n_params)])
    assert nan_run.error is not None and nan_run.error.rule == "nonfinite" and len(nan_run.history) == 0
    assert fine.error is None and len(fine.history) == 1


@pytest.mark.parametrize("method", ["fednmap", "fedcanon"])
def test_runs_start_from_a_start_as_single_runs_do(data, method):
    """x0=result.start, fedopt.run's warm start at a model, raised TypeError in a batch (one Start, or one per run)."""
    problem, common = logistic(data), {"rounds": 3, "batch_size": 6, "local_steps": 2, "lr_local": 0.05}
    first = fedopt.run(method, problem, L1(0.02), seed=0, **common)
    start = first.start
    starts = [start, Start(first.x)]  # with and without a subgradient
    for x0 in (start, starts):
        results = fedopt.run_batch(method, problem, L1(0.02), seeds=[1, 2], x0=x0, **common)
        for r, result in enumerate(results):
            single = fedopt.run(method, problem, L1(0.02), seed=r + 1, x0=x0 if x0 is start else starts[r], **common)
            assert_same_run(single, result)
            np.testing.assert_array_equal(result.history["objective"][0], single.history["objective"][0])


def test_callback_follows_every_evaluation(data):
    seen = []
    fedopt.run_batch("fedavg", logistic(data), seeds=[0, 1], rounds=4, eval_every=2, local_steps=2, batch_size=4,
                     callback=lambda state, rows: seen.append((state.round, len(rows), state.x.shape)))
    assert seen == [(0, 2, (2, 1, 11)), (2, 2, (2, 1, 11)), (4, 2, (2, 1, 11))]


def test_split_batches_give_the_same_runs(data, monkeypatch):
    problem = logistic(data)
    kwargs = {"rounds": 5, "local_steps": 2, "batch_size": 4, "lr_local": [0.05, 0.1, 0.2]}
    whole = fedopt.run_batch("fednmap", problem, L1(0.02), seeds=[0, 1, 2], **kwargs)
    capped = fedopt.run_batch("fednmap", problem, L1(0.02), seeds=[0, 1, 2], max_batch=2, **kwargs)
    monkeypatch.setattr(batch, "_free_memory", lambda backend: 1000)
    with pytest.warns(batch.BatchSplitWarning, match="batches of 1"):
        split = fedopt.run_batch("fednmap", problem, L1(0.02), seeds=[0, 1, 2], **kwargs)
    for a, b, c in zip(whole, capped, split, strict=True):
        assert np.array_equal(a.x, b.x) and np.array_equal(a.x, c.x)


DECENTRALIZED = [
    ("depositum", {"comm_period": 3, "momentum": 0.5}),
    ("depositum", {"comm_period": 3, "momentum_type": "nesterov", "rescaled_prox": True, "tracking_rate": 0.5}),
    ("depositum-no-tracking", {"comm_period": 2}),
    ("prox-dsgt", {}),
    ("deepstorm", {"init_batch_size": 10}),
]


@pytest.mark.parametrize("n_clients", [5, 16], ids=["dense-gossip", "sparse-gossip"])
@pytest.mark.parametrize(("method", "extra"), DECENTRALIZED, ids=[f"{m}-{i}" for i, (m, _) in enumerate(DECENTRALIZED)])
def test_decentralized_batch_equals_single_runs(method, extra, n_clients):
    """Gossip per run (a dense W, or block-diagonal neighbour lists for a sparse ring), the fused
    tracking kernel with per-run steps, and the methods' own history columns."""
    X, y = make_classification(240, 11, n_informative=6, random_state=0)
    problem = Logistic(partition(X, y, n_clients=n_clients, scheme="dirichlet", seed=0), backend="numba")
    seeds, lrs = [2, 0, 2], [0.05, 0.1, 0.1]
    common = {"rounds": 5, "eval_every": 2, "batch_size": 4, "topology": "ring", **extra}
    results = fedopt.run_batch(method, problem, L1(0.01), seeds=seeds, lr=lrs, **common)
    for seed, lr, result in zip(seeds, lrs, results, strict=True):
        single = fedopt.run(method, problem, L1(0.01), seed=seed, lr=lr, **common)
        assert_same_run(single, result)
        for column in ("consensus", "objective_spread", "floats_per_node"):
            np.testing.assert_array_equal(result.history[column], single.history[column])


def test_decentralized_runs_on_one_mixing_matrix_or_topology_batch():
    """A topology given as a mixing matrix, or as equal Topology objects, is one value of the batch."""
    X, y = make_classification(120, 6, random_state=0)
    problem = Logistic(partition(X, y, n_clients=6, scheme="iid", seed=0), backend="numba")
    ring = fedopt.algorithms.decentralized.topology.make("ring", 6)
    common = {"rounds": 3, "batch_size": 4}
    for topology in (ring.mixing, [ring, fedopt.algorithms.decentralized.topology.make("ring", 6)]):
        results = fedopt.run_batch("depositum", problem, L1(0.01), seeds=[0, 1], topology=topology, **common)
        for seed, result in zip([0, 1], results, strict=True):
            assert_same_run(fedopt.run("depositum", problem, L1(0.01), seed=seed, topology=ring.mixing, **common),
                            result)
    with pytest.raises(ValueError, match="only with one value of topology, got 'ring', 'star'"):
        fedopt.run_batch("depositum", problem, L1(0.01), seeds=[0, 1], topology=["ring", "star"], **common)
    with pytest.raises(ValueError, match=r"only with one value of edge_prob, got 0\.4, 0\.6; run them in separate"):
        fedopt.run_batch("depositum", problem, L1(0.01), seeds=[0, 1], topology="erdos_renyi", edge_prob=[0.4, 0.6],
                         **common)


@pytest.mark.parametrize(("method", "extra", "match"), [
    ("scaffnew", {"random_steps": True}, "scaffnew cannot run batched: with random_steps=True"),
    ("fednmap", {"clients_per_round": 2}, r"fednmap with clients_per_round draws a cohort .* runs them one at a time"),
])
def test_methods_that_cannot_batch_say_so(data, method, extra, match):
    with pytest.raises(ValueError, match=match):
        fedopt.run_batch(method, logistic(data), seeds=[0, 1], rounds=2, **extra)


def test_bad_batch_arguments(data):
    problem = logistic(data)
    with pytest.raises(ValueError, match="lr_local lists 2 values for 3 seeds"):
        fedopt.run_batch("fednmap", problem, seeds=[0, 1, 2], lr_local=[0.1, 0.2])
    with pytest.raises(ValueError, match="seeds must list at least one seed"):
        fedopt.run_batch("fednmap", problem, seeds=[])
    with pytest.raises(ValueError, match=r"seeds must be a list of seeds.*got 3"):
        fedopt.run_batch("fednmap", problem, seeds=3)
    with pytest.raises(TypeError, match=r"run_batch takes no eval_clients=.*fedopt\.run"):
        fedopt.run_batch("fednmap", problem, seeds=[0], eval_clients=2)
    with pytest.raises(ValueError, match=r"seed must be an integer >= 0.*got 'a'"):
        fedopt.run_batch("fednmap", problem, seeds=[0, "a"])
    with pytest.raises(ValueError, match="only with one value of local_steps"):
        fedopt.run_batch("fednmap", problem, seeds=[0, 1], local_steps=[2, 3])
    with pytest.raises(ValueError, match="gamma"):
        fedopt.run_batch("fednmap", problem, MCP(0.1, 2.0), seeds=[0, 1], gamma=[1.0, 3.0])
    finite = np.zeros(problem.n_params)
    with pytest.raises(ValueError, match="x0 has NaN or inf"):
        fedopt.run_batch("fednmap", problem, seeds=[0, 1], x0=[finite, np.full_like(finite, np.inf)])


@pytest.mark.parametrize(("eval_every", "what"), [
    (1000, "the pre-prox point z has NaN or inf entries after round 270"),
    (1, r"\|\|F_nor\(z\)\|\|\^2 inf at round 135"),
])
def test_a_run_whose_pre_prox_point_went_inf_stops_alone(eval_every, what):
    """Behind a Box, x = prox(z) stays finite while z runs to inf: that run stops as fedopt.run stops it."""
    from test_divergence import BOX_RUN, box_problem

    from fedopt.regularizers import Box

    problem, box = box_problem(), Box(-1.0, 1.0)
    hyper = {**BOX_RUN, "lr_local": [5.0, 0.05], "eval_every": eval_every}
    blown, healthy = fedopt.run_batch("fednmap", problem, box, seeds=[0, 1], **hyper)
    with pytest.raises(fedopt.DivergenceError, match=what) as single:
        fedopt.run("fednmap", problem, box, seed=0, **{**hyper, "lr_local": 5.0})
    assert blown.error.rule == "nonfinite" and str(blown.error) == str(single.value)
    assert np.isfinite(blown.z).all() and blown.state.round == single.value.result.state.round
    assert healthy.error is None and healthy.state.round == 270


def test_a_stationary_start_that_stalls_stops_alone():
    """The stall rule on a run started at a stationary point (||F_nat||^2 = 0 at round 0) in a batch."""
    from test_divergence import STATIONARY_RUN, stationary_start

    problem, l1 = stationary_start()
    hyper = {k: v for k, v in STATIONARY_RUN.items() if k != "seed"}
    heavy = L1(100 * l1.lam)  # no minibatch gradient gets past it: the run stays at 0
    left, stays = fedopt.run_batch("fedavg", problem, [l1, heavy], seeds=[0, 0], batch_size=1, **hyper)
    with pytest.raises(fedopt.DivergenceError) as single:
        fedopt.run("fedavg", problem, l1, batch_size=1, **STATIONARY_RUN)
    assert left.error.rule == "stalled" and str(left.error) == str(single.value)
    assert stays.error is None and (stays.history["stationarity"] == 0).all()


@pytest.mark.parametrize(("eval_every", "leaves_at", "lr", "rounds"), [
    (1, 0, 1e300, 3),  # the model is inf after round 1
    (2, 2, 1e30, 3),  # the objective is inf at round 3, the last one (evaluated)
], ids=["round-0-record", "later-evaluation"])
def test_a_run_that_diverges_right_after_another_left_keeps_its_own_last_state(data, eval_every, leaves_at, lr,
                                                                                rounds):
    """Run 0 stops at an evaluation and leaves the batch; run 2 goes to NaN or inf in the next round.
    Run 2's result is its own last finite round (model, generator, one run's arrays), as in fedopt.run,
    and a run resumed from it goes on as from the single run's."""
    problem = LeastSquares(data, backend="numba")
    generators = [np.random.default_rng(seed) for seed in range(3)]
    common = {"local_steps": 2, "batch_size": 6, "divergence": None, "eval_every": eval_every, "rounds": rounds}
    x0 = [np.full(problem.n_params, v) for v in (1.0, 2.0, 3.0)]

    def stop(state, row):
        return state.env.rng is generators[0] and row["round"] == leaves_at

    left, going, blown = fedopt.run_batch("scaffold", problem, seeds=generators, x0=x0, lr_local=[0.01, 0.01, lr],
                                          stop=stop, **common)
    assert left.converged and left.state.round == leaves_at
    assert_same_run(fedopt.run("scaffold", problem, seed=1, x0=x0[1], lr_local=0.01, **common), going)
    with pytest.raises(fedopt.DivergenceError) as single:
        fedopt.run("scaffold", problem, seed=2, x0=x0[2], lr_local=lr, **common)
    alone = single.value.result
    assert blown.error.rule == "nonfinite" and str(blown.error) == str(single.value)
    assert blown.state.round == alone.state.round
    np.testing.assert_array_equal(blown.x, alone.x)
    assert blown.state.env.rng is generators[2]
    assert blown.state.env.rng.bit_generator.state == alone.state.env.rng.bit_generator.state
    assert blown.state.vars.keys() == alone.state.vars.keys()
    for name, value in alone.state.vars.items():
        np.testing.assert_array_equal(blown.state.vars[name], value, err_msg=name)
    blown.error = None
    assert_same_run(alone, blown)
    resume = {**common, "lr_local": 0.01, "rounds": 2}
    np.testing.assert_array_equal(fedopt.run("scaffold", problem, seed=2, resume=blown.state, **resume).x,
                                  fedopt.run("scaffold", problem, seed=2, resume=alone.state, **resume).x)
