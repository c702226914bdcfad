"""How results read: a one-line ``repr(Result)``, a history that behaves like a table of named
columns, and no history column that is NaN by construction (``normal_map`` without a pre-prox point)."""

import numpy as np
import pytest

import fedopt
from fedopt import DivergenceError
from fedopt.datasets import partition
from fedopt.problems import LeastSquares, Logistic
from fedopt.regularizers import L1

DECENTRALIZED = ["depositum", "depositum-no-tracking", "prox-dsgt", "deepstorm"]


def classification(n_clients=6):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(180, 8))
    y = (X @ rng.normal(size=8) + 0.5 * rng.normal(size=180) > 0).astype(int)
    return Logistic(partition(X, y, n_clients, "sorted"), backend="numpy")


def regression():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 6))
    y = X @ rng.normal(size=6) + 0.5 * rng.normal(size=120)
    return LeastSquares(partition(X, y, 4, "sorted", seed=0), backend="numpy")


@pytest.fixture(scope="module")
def result():
    return fedopt.run("fednmap", classification(), L1(0.01), rounds=6, local_steps=2, lr_local=0.1, gamma=1.0,
                      batch_size=8, eval_every=2)


def test_repr_of_a_run_is_one_short_line(result):
    text = repr(result)
    assert "\n" not in text and len(text) < 300
    assert text.startswith("Result(algorithm='fednmap', rounds=6, x=array(shape=(8,), float64), final={")
    assert f"'stationarity': {result.history['stationarity'][-1]:.4g}" in text
    assert "'test_accuracy'" in text and text.endswith("converged=False, error=None)")
    assert "'test_accuracy'" not in repr(fedopt.run("fedavg", regression(), rounds=2))  # NaN for a regression


def test_repr_of_a_diverged_run_names_its_error():
    with pytest.raises(DivergenceError) as info:
        fedopt.run("fedavg", regression(), L1(0.01), rounds=200, lr_local=5.0, local_steps=5)
    diverged = info.value.result
    assert diverged.error is info.value
    text = repr(diverged)
    assert "\n" not in text and len(text) < 300
    assert text.endswith(f"error=DivergenceError(rule={info.value.rule!r}))")
    assert f"rounds={diverged.state.round}," in text


def test_history_is_a_table_of_named_columns(result):
    history = result.history
    assert "stationarity" in history and "normal_map" in history and "no such column" not in history
    assert history.keys() == history.columns == tuple(history) and next(iter(history)) == "round"
    assert len(history) == 4  # rows, as for a DataFrame
    assert set(dict(history)) == set(history.as_dict())
    np.testing.assert_array_equal(history["round"], [0, 2, 4, 6])


def test_to_pandas_has_the_history_columns_and_values(result):
    pytest.importorskip("pandas")
    frame = result.history.to_pandas()
    assert list(frame.columns) == list(result.history)
    assert len(frame) == len(result.history)
    for column in result.history:
        np.testing.assert_array_equal(frame[column].to_numpy(), result.history[column], err_msg=column)


@pytest.mark.parametrize("method", DECENTRALIZED)
def test_decentralized_histories_have_no_column_of_nan(method):
    """No pre-prox server point, so no normal_map column; every other column is defined."""
    run = fedopt.run(method, classification(), L1(0.01), rounds=4, lr=0.05, batch_size=8, topology="ring")
    history = run.history
    assert "normal_map" not in history and "consensus" in history
    for column in history:
        assert not np.isnan(history[column].astype(float)).all(), column
    assert "normal_map" not in repr(run)


def test_normal_map_only_for_methods_with_a_pre_prox_point():
    problem = classification()
    for method, has_z in [("fednmap", True), ("feddr", True), ("fedavg", False), ("scaffold", False)]:
        run = fedopt.run(method, problem, rounds=2, batch_size=8)
        assert ("normal_map" in run.history) is has_z, method
        assert (run.z is not None) is has_z, method
        if has_z:
            assert np.isfinite(run.history["normal_map"]).all()
    batched = fedopt.run_batch("depositum", problem, L1(0.01), seeds=[0, 1], rounds=2, batch_size=8)
    assert all("normal_map" not in r.history for r in batched)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_problems_and_results_pickle_for_other_processes(backend):
    """A problem goes to a worker process (joblib, multiprocessing) and a result comes back: both pickle,
    the backend by its name (its modules do not pickle), and the state resumes on the unpickled problem."""
    import pickle

    from fedopt.problems.vi import BilinearGame

    problem = classification().on(backend)
    result = fedopt.run("fednmap", problem, L1(0.01), rounds=3, seed=0)
    again = pickle.loads(pickle.dumps(result))
    np.testing.assert_array_equal(again.x, result.x)
    np.testing.assert_array_equal(again.history["objective"], result.history["objective"])
    assert again.state.env.problem.backend is problem.backend and again.z.shape == result.z.shape
    copy = pickle.loads(pickle.dumps(problem))
    resumed = fedopt.run("fednmap", copy, L1(0.01), rounds=2, seed=3, resume=again.state)
    straight = fedopt.run("fednmap", problem, L1(0.01), rounds=2, seed=3, resume=result.state)
    np.testing.assert_array_equal(resumed.x, straight.x)
    game = pickle.loads(pickle.dumps(BilinearGame(dim=4, n_clients=2, backend=backend)))
    assert game.backend.name == backend and fedopt.run("lippax", game, rounds=2).state.round == 2
