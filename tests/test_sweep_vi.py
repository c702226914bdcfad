"""Sweeps over variational inequalities: problems without a data set, a chosen metric, predicted slopes."""

import io
import math

import pytest

from fedopt import sweep
from fedopt.sweep.config import ConfigError

VI = """
[experiment]
name = "vi"
title = "a tiny VI sweep"
from_paper = ["nothing"]
defaults = ["everything"]

[run]
rounds = 4
eval_every = 2
seeds = [0, 1]

[run.params]
D = 2.0

[run.problem]
name = "bilinear_game"
dim = 4
n_clients = 2
sigma = 0.1

[run.algorithm]
name = "local-extra-sgd"
local_steps = 2
lr_local = "min(0.5, D * sqrt(n) / 10)"
inner_steps = 3

[[grid]]
name = "noise"
"algorithm.name" = ["local-extra-sgd", "lippax"]
"problem.sigma" = [0.1, 0.4, 1.6]
lines = "algorithm.name"
slope = "problem.sigma"
predicted_slope = 1.0
metric = "gap"
"""


def vi(text=VI, **overrides):
    exp = sweep.parse_experiment(text, source="vi.toml", name="vi")
    return exp.override(overrides) if overrides else exp


def test_vi_problems_need_no_dataset_and_n_is_their_client_count():
    specs = vi().expand()
    assert len(specs) == 12 and all(s.config["dataset"] is None for s in specs)
    config = specs[0].config
    assert config["problem"]["sigma"] == 0.1 and config["problem"]["heterogeneity"] == 0.0  # base options filled in
    assert config["algorithm"]["lr_local"] == pytest.approx(2.0 * math.sqrt(2) / 10)
    lippax = next(s for s in specs if s.config["algorithm"]["name"] == "lippax")
    assert lippax.config["algorithm"]["inner_steps"] == 3
    assert vi(**{"problem.n_clients": 8}).expand()[0].config["algorithm"]["lr_local"] == 0.5


def test_a_game_posed_with_its_own_regularizer_is_swept_with_it_unless_the_file_names_one():
    text = (VI.replace("inner_steps = 3\n", "")
            .replace('name = "bilinear_game"\ndim = 4', 'name = "l1_bilinear_game"\nlam = 0.3')
            .replace('["local-extra-sgd", "lippax"]', '["local-dual-extrapolation"]'))
    assert vi(text).expand()[0].config["regularizer"] == {"name": "l1", "lam": 0.3, "weights": None, "block": None}
    named = text.replace("[run.algorithm]", '[run.regularizer]\nname = "zero"\n\n[run.algorithm]')
    assert vi(named).expand()[0].config["regularizer"] == {"name": "zero", "block": None}
    assert vi().expand()[0].config["regularizer"]["name"] == "zero"


@pytest.mark.parametrize("edit, key, message", [
    (("[run.problem]", '[run.dataset]\nname = "digits"\n\n[run.problem]'), "run.dataset", "without a data set"),
    (('metric = "gap"', 'metric = "gapp"'), "metric", "names no history column"),
    (("predicted_slope = 1.0", 'predicted_slope = "one"'), "predicted_slope", "a number"),
    (("dim = 4", "dim = 4\nwidth = 3"), "run.problem.width", "has no option 'width'"),
])
def test_vi_config_errors_name_the_key(edit, key, message):
    text = VI.replace(*edit)
    assert text != VI
    with pytest.raises(ConfigError) as info:
        vi(text)
    assert info.value.key == key and message in str(info.value)


def test_a_minimization_method_on_a_game_is_refused_before_any_run():
    from fedopt.sweep.validate import validate

    text = VI.replace("inner_steps = 3\n", "").replace('["local-extra-sgd", "lippax"]', '["fednmap"]')
    with pytest.raises(ConfigError, match="games need a VI method") as info:
        validate(vi(text).expand())
    assert info.value.key == "algorithm.name" and "6 of 6 runs" in str(info.value)


def test_metric_defaults_to_stationarity_and_lists_the_vi_columns():
    exp = vi(VI.replace('metric = "gap"\n', ""))
    assert exp.grids[0].metric == "stationarity"
    with pytest.raises(ConfigError, match="distance_last"):
        vi(VI.replace('metric = "gap"', 'metric = "nothing"'))


def test_vi_sweep_stores_runs_and_reports_the_metric_with_the_predicted_slope(tmp_path, capsys):
    exp = vi()
    with sweep.Store(tmp_path / "vi.db") as store:
        summary = sweep.run_sweep(exp, store, executor="serial")
        assert summary.statuses == {"done": 12}
        run = store.run(exp.expand()[0].key)
        assert run["history"]["round"] == [0, 2, 4] and len(run["history"]["gap"]) == 3
        result = sweep.report(store, out=tmp_path / "out", plots=False)
    printed = capsys.readouterr().out
    assert "gap mean" in printed and "||F_nat||^2 mean" not in printed
    assert len(result["slopes"]) == 2  # one per method
    slope = result["slopes"][0]
    assert slope.metric == "gap" and slope.predicted == 1.0 and slope.points == 3
    assert "slope of log gap against log sigma" in printed and "predicted 1" in printed
    header = (tmp_path / "out" / "vi" / "summary.csv").read_text().splitlines()[0]
    assert "gap_mean" in header and "stationarity_mean" in header


def test_vi_report_draws_the_metric(tmp_path):
    pytest.importorskip("matplotlib", reason="the PNG figures need matplotlib (the plot extra)")
    with sweep.Store(tmp_path / "vi.db") as store:
        sweep.run_sweep(vi(seeds=[0]), store, executor="serial")
        result = sweep.report(store, out=tmp_path / "out", stream=io.StringIO())
    assert sorted(p.name for p in result["figures"]) == ["noise_curves.png", "noise_slope.png"]


@pytest.mark.parametrize("name", ["lippax_heterogeneity", "lippax_k", "lippax_m", "lippax_sigma"])
def test_lippax_experiments_run_shortened_and_fit_their_slopes(name, tmp_path):
    exp = sweep.load_experiment(name).shortened(rounds=2, seeds=1, values=2)
    assert exp.run["problem"]["name"] in ("bilinear_game", "quadratic_game", "smooth_game")
    assert any(g.predicted_slope is not None for g in exp.grids)
    with sweep.Store(tmp_path / "s.db") as store:
        sweep.run_sweep(exp, store, executor="serial")
        bad = [m for m in store.members(exp.name) if m["status"] != "done"]
        assert not bad, bad[0]["error"]
        result = sweep.report(store, out=tmp_path / "out", plots=False, stream=io.StringIO())
    assert result["slopes"] and all(s.predicted is not None for s in result["slopes"])
