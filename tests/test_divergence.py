"""The divergence rule of ``fedopt.run``: it stops a blowing-up run early, keeps its history, leaves healthy
runs alone, can be tuned or switched off, and the NaN/inf check stays."""

import pickle
import re
import types

import numpy as np
import pytest

import fedopt
from fedopt.cli import main
from fedopt.datasets import load_digits, partition
from fedopt.problems import LeastSquares, Softmax
from fedopt.problems.vi import BilinearGame
from fedopt.regularizers import ElasticNet, Zero
from fedopt.run import Divergence, DivergenceError, History, divergence_error, objective_rose


@pytest.fixture(scope="module")
def digits():
    """The problem of `fedopt run`'s default run: softmax on the digits, 10 clients, sorted partition."""
    return Softmax(load_digits(n_clients=10, partition="sorted", seed=0), backend="numpy")


def default_run(problem, lr_local, **kw):
    """FedNMap with `fedopt run`'s defaults (elastic net, 10 local steps, evaluated every 10 rounds)."""
    kw = {"rounds": 20, "eval_every": 10, "progress": False, **kw}
    return fedopt.run("fednmap", problem, ElasticNet(1e-3, 2e-2), lr_local=lr_local, local_steps=10, gamma=4.0,
                      **kw)


def test_a_huge_step_stops_at_its_first_evaluation_with_the_history_kept(digits):
    # `fedopt run --set algorithm.lr_local=1e6 --rounds 20` used to finish "done" at objective 4.5e209
    with pytest.raises(DivergenceError) as info:
        default_run(digits, 1e6)
    error = info.value
    history = error.result.history
    assert error.rule == "objective"
    np.testing.assert_array_equal(history["round"], [0, 10])  # the row that fired is kept
    assert np.isfinite(history["objective"]).all() and history["objective"][-1] > 1e3 * history["objective"][0]
    assert error.result.state.round == 10
    message = str(error)
    assert "at round 10" in message and "objective_factor 1000" in message and "2.303" in message
    assert "divergence=None" in message and "[run] divergence = false" in message


def test_a_divergence_pickles_with_its_result(digits):
    """So that a run that diverged in a worker process (multiprocessing, joblib) comes back as itself."""
    with pytest.raises(DivergenceError) as info:
        default_run(digits, 1e6)
    back = pickle.loads(pickle.dumps(info.value))
    assert (str(back), back.rule) == (str(info.value), "objective")
    np.testing.assert_array_equal(back.result.history["objective"], info.value.result.history["objective"])


def test_the_rule_can_be_loosened_tightened_and_switched_off(digits):
    with pytest.raises(DivergenceError) as info:  # 2e104 at round 10 passes, 4.5e209 at round 20 does not
        default_run(digits, 1e6, divergence={"objective_factor": 1e200})
    assert info.value.result.history["round"][-1] == 20
    unchecked = default_run(digits, 1e6, divergence=None)  # what the run did before the rule
    assert unchecked.history["objective"][-1] > 1e200 and not unchecked.converged
    assert default_run(digits, 1e6, divergence=False).history["round"][-1] == 20
    assert default_run(digits, 1e6, divergence="off").history["round"][-1] == 20
    growth = Divergence(objective_factor=None, stationarity_factor=10.0, patience=3)
    with pytest.raises(DivergenceError) as info:
        default_run(digits, 1e6, eval_every=1, divergence=growth)
    assert info.value.rule == "stationarity" and info.value.result.history["round"][-1] == 3
    assert "grew over 3 evaluations in a row" in str(info.value)


def test_a_healthy_run_is_untouched(digits):
    checked = default_run(digits, 0.1, eval_every=2)
    unchecked = default_run(digits, 0.1, eval_every=2, divergence=None)
    np.testing.assert_array_equal(checked.history["objective"], unchecked.history["objective"])
    growth = default_run(digits, 0.1, eval_every=2, divergence=Divergence(stationarity_factor=10.0))
    assert growth.history["round"][-1] == 20


def test_a_run_that_ends_above_its_start_is_done_and_named(digits, tmp_path, capsys):
    high = default_run(digits, 5.0, rounds=100)  # too large a step, below the rule's 1000x: done, above 2.3
    first, last = objective_rose(high.history)
    assert first == high.history["objective"][0] and last == high.history["objective"][-1] > first
    assert objective_rose(default_run(digits, 0.1).history) is None
    assert objective_rose({"objective": [1.0, float("nan"), 2.0]}) == (1.0, 2.0)  # NaN rows are skipped
    assert objective_rose({"objective": [1.0, 2.0], "gap": [1.0, 2.0]}) is None  # a VI gap bound may grow
    assert main(["run", "--set", "algorithm.lr_local=5", "--out", str(tmp_path / "h.csv")]) == 0
    rose = re.search(r"the objective rose from 2\.30259 to (\d+\.\d+): the steps may be too large",
                     capsys.readouterr().out)
    assert rose and float(rose.group(1)) > 2.30259  # where it ends is chaotic: the CPU the kernels compile for moves it


def test_the_command_reports_a_run_that_diverged_at_its_first_evaluation(tmp_path, capsys):
    """Targets of 1e200 overflow the loss at round 0: the history is empty, which the summary once indexed."""
    from sklearn.datasets import dump_svmlight_file

    rng = np.random.default_rng(0)
    dump_svmlight_file(rng.normal(size=(40, 3)), 1e200 * (1 + rng.random(40)), str(tmp_path / "huge.svm"))
    config = tmp_path / "huge.toml"
    config.write_text(f'[run]\nrounds = 3\n[run.dataset]\nname = "svmlight"\npath = "{tmp_path / "huge.svm"}"\n'
                      'n_clients = 2\n[run.problem]\nname = "least_squares"\n[run.regularizer]\nname = "zero"\n'
                      '[run.algorithm]\nname = "fedavg"\n')
    assert main(["run", str(config), "--out", str(tmp_path / "h.csv")]) == 1
    out, err = capsys.readouterr()
    assert "status diverged" in out and "objective is inf" in err and "at round 0" in err
    assert (tmp_path / "h.csv").read_text().startswith("round,")


def test_a_run_that_oscillates_without_converging_stops_as_stalled_with_its_whole_history(digits):
    stall = {"stall_factor": 0.1}
    with pytest.raises(DivergenceError) as info:  # a step too large to settle, not large enough to blow up
        default_run(digits, 2.0, rounds=40, eval_every=2, divergence=stall)
    error, history = info.value, info.value.result.history
    assert error.rule == "stalled" and history["round"][-1] == 40
    assert history["stationarity"][-1] > 0.1 * history["stationarity"][0]
    assert "fednmap did not converge: ||F_nat||^2" in str(error) and "above stall_factor 0.1" in str(error)
    assert "its objective fell at only" in str(error) and "run more rounds" in str(error)
    # a small step crawls: above the factor, but its objective falls at every evaluation, so it is slow, not stalled
    slow = default_run(digits, 1e-2, rounds=40, eval_every=2, divergence=stall)
    assert slow.history["stationarity"][-1] > 0.1 * slow.history["stationarity"][0]
    assert (np.diff(slow.history["objective"]) < 0).all()
    with pytest.raises(DivergenceError, match="fell at only 0 of the last 10"):  # one too small never moves x
        default_run(digits, 1e-4, rounds=40, eval_every=2, divergence=stall)
    healthy = default_run(digits, 0.1, divergence=stall)
    assert healthy.history["stationarity"][-1] < 0.1 * healthy.history["stationarity"][0]
    start = default_run(digits, 2.0, rounds=0).history["stationarity"][0]
    stopped = default_run(digits, 2.0, divergence=stall, tol=start)  # converged by tol at round 0: not checked
    assert stopped.converged


def test_a_run_of_no_rounds_is_not_judged_stalled():
    """Its one row used to read as a run that fell at 0 of its last 0 evaluations: stalled."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 6))
    problem = LeastSquares(partition(X, X @ rng.normal(size=6), 4, "sorted", seed=0), backend="numpy")
    result = fedopt.run("fedavg", problem, rounds=0, divergence={"stall_factor": 1e-2}, progress=False)
    assert result.error is None and list(result.history["round"]) == [0]
    assert Divergence(stall_factor=1e-2).check_end(result.history) is None


def test_a_run_that_starts_at_its_solution_is_not_stopped_by_rounding():
    # objective 0 at round 0: without the floor any rounding error would be "1000 times the start"
    rng = np.random.default_rng(0)
    X, coef = rng.normal(size=(120, 5)), rng.normal(size=5)
    problem = LeastSquares(partition(X, X @ coef, 4, "iid", seed=0), backend="numpy")
    result = fedopt.run("fedavg", problem, Zero(), rounds=5, x0=coef, lr_local=0.05, local_steps=3, progress=False)
    assert result.history["objective"][0] < 1e-20 and result.history["round"][-1] == 5


def test_a_diverging_game_is_stopped_by_its_gap_before_it_overflows():
    game = BilinearGame(dim=6, backend="numpy")
    with pytest.raises(DivergenceError) as info:
        fedopt.run("local-sgda", game, rounds=3000, eval_every=10, local_steps=5, lr_local=0.5,
                   x0=np.zeros(game.n_params), progress=False)
    history = info.value.result.history  # the gap: 16 at round 0, 2e6 at round 30, ||F_nat||^2 inf at round 650
    assert info.value.rule == "objective" and history["round"][-1] == 30 and np.isfinite(history["objective"]).all()


def advised_steps(error):
    """The hyperparameters that a divergence's advice tells to reduce."""
    return re.search(r"reduce the step sizes \(([^)]*)\)", str(error)).group(1).split(", ")


@pytest.mark.parametrize("name", fedopt.algorithms.available())
def test_the_advice_names_only_step_sizes_the_method_has(name):
    error = divergence_error(name, "objective 1e9 at round 10", "objective", types.SimpleNamespace(error=None))
    steps = advised_steps(error)
    assert steps and set(steps) <= set(fedopt.algorithms.hyperparameters(name))
    assert all(step.startswith("lr") for step in steps)


def test_the_advice_of_a_run_names_its_method_own_step_sizes(digits):
    data = fedopt.datasets.make_sparse_regression(n_samples=400, n_features=12, n_clients=8, seed=0)
    with pytest.raises(DivergenceError) as decentralized:
        fedopt.run("prox-dsgt", LeastSquares(data, backend="numpy"), Zero(), rounds=100, lr=5.0, progress=False)
    assert advised_steps(decentralized.value) == ["lr"]
    game = BilinearGame(dim=6, backend="numpy")
    with pytest.raises(DivergenceError) as vi:
        fedopt.run("local-sgda", game, rounds=100, eval_every=10, local_steps=5, lr_local=0.5,
                   x0=np.zeros(game.n_params), progress=False)
    assert advised_steps(vi.value) == ["lr_local"]
    with pytest.raises(DivergenceError) as server:
        default_run(digits, 1e6)
    assert advised_steps(server.value) == ["lr_local", "lr_server"]


def test_nan_and_inf_still_stop_the_run_with_the_last_finite_history():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(200, 8)) * 10
    problem = LeastSquares(partition(X, X @ rng.normal(size=8), 4, "iid", seed=0), backend="numpy")
    with pytest.raises(DivergenceError, match="NaN or inf entries after round 20") as info:
        fedopt.run("fedavg", problem, Zero(), rounds=400, eval_every=400, lr_local=10.0, local_steps=5,
                   divergence=None, progress=False)
    assert info.value.rule == "nonfinite"
    np.testing.assert_array_equal(info.value.result.history["round"], [0])  # no evaluation before the overflow
    assert info.value.result.state.round == 19 and np.isfinite(info.value.result.x).all()


@pytest.mark.parametrize("value, message", [
    ({"objective_factr": 10.0}, "no field 'objective_factr'; its fields are objective_factor"),
    ({"objective_factor": 0.5}, "objective_factor must be a finite number > 1 or None"),
    ({"objective_floor": 0}, "objective_floor must be a finite number > 0"),
    ({"patience": 0}, "patience must be an integer >= 1"),
    ({"stall_factor": 1.0}, r"stall_factor must be a number in \(0, 1\)"),
    ("loose", "True or 'default' .* or None, False or 'off'"),
])
def test_bad_rules_are_refused_naming_the_field(value, message):
    with pytest.raises(ValueError, match=message):
        Divergence.parse(value)


def test_the_accepted_forms():
    assert Divergence.parse(True) == Divergence.parse("default") == Divergence() == Divergence.parse({})
    assert Divergence.parse(None) is Divergence.parse(False) is Divergence.parse("off") is None
    assert Divergence.parse({"objective_factor": 1e6}) == Divergence(objective_factor=1e6)
    assert Divergence.parse({"objective_factor": False, "stationarity_factor": 1e6, "patience": 5}) == \
        Divergence(objective_factor=None, stationarity_factor=1e6, patience=5)  # a [run.divergence] table
    assert Divergence().objective_factor == 1e3 and Divergence().stationarity_factor is None


def box_problem():
    """Least squares whose FedNMap run with lr_local=5 under Box(-1, 1) blows up behind the box: x = prox(z)
    stays finite (clipped) while z and the corrections reach inf (||F_nor(z)||^2 at round 135, z at 270)."""
    from fedopt.datasets import from_client_ids

    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 4))
    clients = np.repeat(np.arange(4), 10)
    return LeastSquares(from_client_ids(X, X @ rng.standard_normal(4) + clients, clients, task="regression"))


BOX_RUN = {"rounds": 270, "local_steps": 3, "lr_local": 5.0, "gamma": 1.0, "batch_size": None, "progress": False}


@pytest.mark.parametrize(("eval_every", "what", "last"), [
    (1000, "the pre-prox point z has NaN or inf entries after round 270", 269),  # checked every round
    (1, r"\|\|F_nor\(z\)\|\|\^2 inf at round 135", 134),  # at an evaluation, before z itself overflows
])
def test_a_pre_prox_point_gone_inf_behind_a_constraint_stops_the_run(eval_every, what, last):
    from fedopt.regularizers import Box

    with pytest.raises(DivergenceError, match=what) as info:  # used to finish "done" with z and c inf
        fedopt.run("fednmap", box_problem(), Box(-1.0, 1.0), eval_every=eval_every, **BOX_RUN)
    result = info.value.result
    assert info.value.rule == "nonfinite" and result.state.round == last
    assert np.isfinite(result.z).all() and np.isfinite(result.history["normal_map"]).all()


def stationary_start():
    """Least squares and an l1 weight above ||grad f(0)||_inf: x0 = 0 is a stationary point (||F_nat||^2 = 0)."""
    from fedopt.datasets import from_client_ids
    from fedopt.regularizers import L1

    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 4))
    clients = np.repeat(np.arange(4), 10)
    y = X @ rng.standard_normal(4) + 0.5 * rng.standard_normal(40) + clients
    problem = LeastSquares(from_client_ids(X, y, clients, task="regression"))
    return problem, L1(1.01 * np.abs(problem.grad(np.zeros(4))).max())


STATIONARY_RUN = {"rounds": 20, "local_steps": 3, "lr_local": 0.3, "x0": np.zeros(4), "seed": 0,
                  "divergence": {"stall_factor": 0.01}, "progress": False}


def test_a_run_that_leaves_its_stationary_start_uphill_stalls_and_one_that_stays_is_done():
    problem, l1 = stationary_start()
    with pytest.raises(DivergenceError) as info:  # minibatches of one push it off x0 = 0: it used to divide by 0
        fedopt.run("fedavg", problem, l1, batch_size=1, **STATIONARY_RUN)
    history = info.value.result.history
    assert info.value.rule == "stalled" and history["stationarity"][0] == 0 and history["round"][-1] == 20
    assert "left the stationary point it started from at round 0" in str(info.value)
    assert "uphill, from objective 2.22399 to 2.55949" in str(info.value)
    stays = fedopt.run("fedavg", problem, l1, batch_size=None, **STATIONARY_RUN)  # full gradients: it stays at 0
    assert stays.error is None and (stays.history["stationarity"] == 0).all()


def test_the_stall_rule_leaves_a_stationary_start_that_stays_at_rounding_level_done():
    def history(stationarity, objective):
        h = History(("round", "stationarity", "objective"))
        for t, (s, f) in enumerate(zip(stationarity, objective, strict=True)):
            h.append({"round": t, "stationarity": s, "objective": f})
        return h

    rule = Divergence(stall_factor=0.01)
    rounding = [0.0] + [1e-32, 3e-33] * 5
    assert rule.check_end(history(rounding, [1.5] + [1.5 + 1e-16, 1.5] * 5)) is None  # rounding: done
    assert rule.check_end(history(rounding, [1.5] + [1.5 - 1e-3, 1.5] * 5)) is None  # downhill (a saddle): done
    left = rule.check_end(history([0.0] + [0.2, 0.3] * 5, [1.5] + [1.7, 1.6] * 5))
    assert "left the stationary point" in left and "uphill, from objective 1.5 to 1.6" in left
    assert "fell at only 3 of the last 5" in left
    assert "above stall_factor 0.01" in rule.check_end(history([1.0] + [0.5, 0.6] * 5, [1.5] + [1.4, 1.45] * 5))
