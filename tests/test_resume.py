"""``fedopt.run(..., resume=state)``: a resumed run goes on as one uninterrupted run would, with the
hyperparameters of its own call, and the refusal's advice starts another method from the model."""

import numpy as np
import pytest

import fedopt
from fedopt.datasets import partition
from fedopt.problems import LeastSquares
from fedopt.regularizers import L1


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 6))
    y = X @ rng.normal(size=6) + 0.1 * rng.normal(size=120)
    return LeastSquares(partition(X, y, 4, "sorted", seed=0), backend="numpy")


NORMAL_MAP = {  # a converged run's hyperparameters, and a new prox parameter of its pre-prox point z
    "fednmap": ({"local_steps": 2, "lr_local": 0.05, "gamma": 1.0}, {"gamma": 0.1}),
    "zhang": ({"local_steps": 2, "lr_local": 0.05}, {"lr_server": 0.5}),
}


@pytest.fixture(scope="module")
def converged(problem):
    """FedNMap at its solution (stationarity ~1e-30) with gamma=1 and the l1 weight 0.5."""
    return fedopt.run("fednmap", problem, L1(0.5), rounds=400, eval_every=100, batch_size=None, local_steps=2,
                      lr_local=0.05, gamma=1.0)


@pytest.mark.parametrize("method", NORMAL_MAP)
def test_a_new_prox_parameter_keeps_the_model_and_the_subgradient_its_pre_prox_point_holds(problem, method):
    """z was kept as it was: read with another gamma it placed the model elsewhere, and a converged FedNMap
    run resumed with gamma=0.1 left its solution (stationarity 1.8e-30 -> 1.8e-4)."""
    hyper, change = NORMAL_MAP[method]
    kw = {"batch_size": None, "metric_gamma": 1.0, **hyper}
    first = fedopt.run(method, problem, L1(0.5), rounds=400, eval_every=100, **kw)
    assert first.history["stationarity"][-1] < 1e-25 and first.history["normal_map"][-1] < 1e-25
    resumed = fedopt.run(method, problem, L1(0.5), rounds=3, resume=first.state, **{**kw, **change})
    assert resumed.history["stationarity"].max() < 1e-25 and resumed.history["normal_map"].max() < 1e-25
    g = resumed.algorithm.pre_prox_gamma
    assert g != first.algorithm.pre_prox_gamma and resumed.state.pre_prox_gamma == g
    np.testing.assert_allclose(resumed.x, first.x, atol=1e-14)
    np.testing.assert_allclose((resumed.z - resumed.x) / g, (first.z - first.x) / first.algorithm.pre_prox_gamma,
                               atol=1e-12)


def test_the_same_prox_parameter_resumes_as_one_run(problem):
    kw = {"batch_size": None, "local_steps": 2, "lr_local": 0.05, "gamma": 1.0}
    first = fedopt.run("fednmap", problem, L1(0.5), rounds=3, **kw)
    resumed = fedopt.run("fednmap", problem, L1(0.5), rounds=3, resume=first.state, **kw)
    whole = fedopt.run("fednmap", problem, L1(0.5), rounds=6, **kw)
    np.testing.assert_array_equal(resumed.z, whole.z)
    np.testing.assert_array_equal(resumed.x, whole.x)


def test_a_resumed_run_evaluates_where_one_run_would(problem, capsys):
    """Rows used to count from the call: 7 rounds, then 7 more with eval_every=5, at 0 5 7 12 14, not 10."""
    kw = {"batch_size": None, "local_steps": 2, "lr_local": 0.05, "gamma": 1.0, "eval_every": 5}
    first = fedopt.run("fednmap", problem, L1(0.01), rounds=7, **kw)
    resumed = fedopt.run("fednmap", problem, L1(0.01), rounds=7, resume=first.state, progress=True, **kw)
    assert "round 14/14" in capsys.readouterr().err  # the progress counts on too
    whole = fedopt.run("fednmap", problem, L1(0.01), rounds=14, **kw)
    assert list(first.history["round"]) == [0, 5, 7] and list(resumed.history["round"]) == [7, 10, 14]
    assert list(whole.history["round"]) == [0, 5, 10, 14]
    np.testing.assert_array_equal(resumed.history["grad_evals"][1:], whole.history["grad_evals"][2:])


def test_the_advice_of_the_refusal_starts_the_other_method_from_the_model(problem, converged):
    """The advice was x0=result.x, from which a run reports prox(result.x): with this l1 weight, 0.234 for 0.734."""
    with pytest.raises(ValueError, match=r"start fedcanon from its model with x0=result\.start") as refusal:
        fedopt.run("fedcanon", problem, L1(0.5), rounds=1, resume=converged.state)
    assert "x0=result.x" not in str(refusal.value)
    assert np.abs(converged.x).max() > 0.5  # prox(x) != x
    for method, hyper in [("fedcanon", {}), ("fedmid", {}), ("feddr", {"gamma": 0.3}), ("zhang", {"lr_local": 0.02})]:
        started = fedopt.run(method, problem, L1(0.5), rounds=0, x0=converged.start, **hyper)
        np.testing.assert_allclose(started.x, converged.x, atol=1e-14, err_msg=method)
        assert started.history["stationarity"][0] < 1e-25


def test_a_batch_runs_state_resumes_as_a_single_runs_does(problem):
    """run_batch's states carry the prox parameter of their z and the training time so far, as fedopt.run's."""
    kw = {"batch_size": None, "local_steps": 2, "lr_local": 0.05, "gamma": 1.0, "metric_gamma": 1.0}
    batch = fedopt.run_batch("fednmap", problem, L1(0.5), seeds=[0, 1], rounds=400, eval_every=100, **kw)
    for result in batch:
        assert result.state.pre_prox_gamma == 1.0
        assert result.state.seconds == result.history["seconds"][-1] > 0
        resumed = fedopt.run("fednmap", problem, L1(0.5), rounds=3, resume=result.state, **{**kw, "gamma": 0.1})
        assert resumed.history["stationarity"].max() < 1e-25
        assert result.state.seconds <= resumed.history["seconds"][0] < result.state.seconds + 0.05  # goes on
