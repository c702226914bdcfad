"""Sweeps: TOML validation, grid expansion, the SQLite store, resume, the executors, the report and the CLI."""

from __future__ import annotations

import importlib
import io
import json
import math
import re
import sqlite3
import time

import numpy as np
import pytest

from fedopt import sweep
from fedopt.cli import main
from fedopt.sweep.config import ConfigError, key_lines, parse_assignment

TINY = """
[experiment]
name = "tiny"
title = "a tiny sweep"
from_paper = ["nothing"]
defaults = ["everything"]

[run]
rounds = 4
eval_every = 2
seeds = [0, 1]
metric_gamma = 4.0

[run.dataset]
name = "digits"
partition = "sorted"
n_clients = 4
seed = 0

[run.problem]
name = "softmax"

[run.regularizer]
name = "elasticnet"
l1 = 1e-3
l2 = 2e-2

[run.algorithm]
name = "fednmap"
local_steps = 2
lr_local = "1/Q"
gamma = 4.0
batch_size = 16

[[grid]]
name = "speedup"
"dataset.n_clients" = [4, 8]
"algorithm.local_steps" = [1, 2]
slope = "dataset.n_clients"
"""


def tiny(text=TINY, **overrides):
    exp = sweep.parse_experiment(text, source="tiny.toml", name="tiny")
    return exp.override(overrides) if overrides else exp


def finals(store, name="tiny"):
    return {m["key"]: m["final"]["stationarity"] for m in store.members(name, with_history=False)}


# ------------------------------------------------------------------------------------------ config
def test_grid_expands_to_runs_with_resolved_expressions_and_labels():
    specs = tiny().expand()
    assert len(specs) == 8 and len({s.key for s in specs}) == 8
    by_labels = {(s.labels["dataset.n_clients"], s.labels["algorithm.local_steps"], s.labels["seed"]): s for s in specs}
    cfg = by_labels[(8, 2, 1)].config
    assert cfg["dataset"]["n_clients"] == 8 and cfg["seed"] == 1 and cfg["dataset"]["seed"] == 0
    assert cfg["algorithm"] == {"name": "fednmap", "local_steps": 2, "lr_local": 0.5, "lr_server": 1.0,
                                "batch_size": 16, "gamma": 4.0}
    assert cfg["dataset"]["test_size"] == 0.2  # defaults are filled in, so the key covers the full configuration


def test_key_ignores_the_backend_and_merges_identical_points():
    a, b = tiny().expand()[0], tiny(backend="numpy").expand()[0]
    assert a.key == b.key and a.config["backend"] != b.config["backend"]
    text = TINY.replace('"algorithm.local_steps" = [1, 2]', '"algorithm.lr_local" = [0.5, "1/Q"]')
    assert len({s.key for s in tiny(text).expand()}) == 4  # "1/Q" at Q = 2 is 0.5: one run


def test_options_added_later_are_recorded_only_when_set():
    """MLP's ``loss`` came after stores were written: its default leaves the run keys as they were."""
    mlp = tiny(TINY.replace('name = "softmax"', 'name = "mlp"')).expand()[0]
    assert "loss" not in mlp.config["problem"] and mlp.config["problem"]["hidden"] == 64
    squared = TINY.replace('name = "softmax"', 'name = "mlp"\nloss = "squared"')
    assert tiny(squared).expand()[0].config["problem"]["loss"] == "squared"
    synthetic = TINY.replace('name = "digits"\npartition = "sorted"', 'name = "fedprox_synthetic"')
    dataset = tiny(synthetic).expand()[0].config["dataset"]
    assert not {"samples_per_client", "dtype", "keep_models"} & set(dataset) and dataset["alpha"] == 1.0
    assert "dtype" in tiny().expand()[0].config["dataset"]  # digits recorded its dtype before: it stays
    assert "clients_per_round" not in tiny().expand()[0].config["algorithm"]
    assert "center" not in tiny().expand()[0].config["problem"]  # the linear models' center, likewise


def test_shared_hyperparameters_reach_only_the_methods_that_have_them():
    text = TINY.replace('"algorithm.local_steps" = [1, 2]', '"algorithm.name" = ["fednmap", "zhang"]')
    algos = {s.config["algorithm"]["name"]: s.config["algorithm"] for s in tiny(text).expand()}
    assert algos["fednmap"]["gamma"] == 4.0 and "gamma" not in algos["zhang"]
    bad = text.replace("gamma = 4.0\nbatch", "gamma = 4.0\nmomentum = 0.9\nbatch")
    with pytest.raises(ConfigError, match=r"tiny\.toml:\d+: key 'run\.algorithm\.momentum'.*none of the methods"):
        tiny(bad)


def test_per_method_tables_and_params_feed_expressions():
    text = TINY.replace('[[grid]]', '[run.params]\nalpha = 0.5\n\n[run.algorithm.zhang]\n'
                                    'lr_server = "alpha / (lr_local * Q)"\n\n[[grid]]')
    text = text.replace('"algorithm.local_steps" = [1, 2]',
                        '"algorithm.name" = ["fednmap", "zhang"]\n"params.alpha" = [0.25, 1.0]')
    specs = tiny(text).expand()
    zhang = [s for s in specs if s.config["algorithm"]["name"] == "zhang"]
    assert sorted({s.config["algorithm"]["lr_server"] for s in zhang}) == [0.25, 1.0]  # alpha / (0.5 * 2)
    assert {s.config["algorithm"]["lr_server"] for s in specs if s.config["algorithm"]["name"] == "fednmap"} == {1.0}


PER_METHOD = TINY.replace("[[grid]]", "[run.algorithm.fednmap]\nlocal_steps = 3\n\n[[grid]]")


def test_a_grid_axis_or_set_on_a_shared_hyperparameter_wins_over_per_method_tables():
    specs = tiny(PER_METHOD).expand()
    steps = {(s.labels["algorithm.local_steps"], s.config["algorithm"]["local_steps"]) for s in specs}
    assert steps == {(1, 1), (2, 2)} and len({s.key for s in specs}) == 8
    fixed = tiny(PER_METHOD, **{"algorithm.local_steps": 5}).expand()
    assert {s.config["algorithm"]["local_steps"] for s in fixed} == {5}
    one_method = PER_METHOD.replace('"algorithm.local_steps" = [1, 2]', '"algorithm.fednmap.local_steps" = [4]')
    assert {s.config["algorithm"]["local_steps"] for s in tiny(one_method).expand()} == {4}  # the axis for one method
    assert "algorithm.fednmap.local_steps" not in tiny(one_method, **{"algorithm.local_steps": 5}).grids[0].axes

    def gammas(**overrides):
        exp = sweep.load_experiment("depositum_baselines", overrides)
        return {s.config["algorithm"]["name"]: s.config["algorithm"].get("gamma") for s in exp.expand()
                if s.grid == "table3"}

    assert gammas() == {"depositum": None, "fedmid": None, "feddr": 1.0, "fedadmm": 1.0}
    assert gammas(**{"algorithm.gamma": 0.1}) == {"depositum": None, "fedmid": None, "feddr": 0.1, "fedadmm": 0.1}
    for overrides in ({"algorithm.gamma": 0.1, "algorithm.feddr.gamma": 0.5},
                      {"algorithm.feddr.gamma": 0.5, "algorithm.gamma": 0.1}):  # one method's --set wins, in any order
        assert gammas(**overrides)["feddr"] == 0.5 and gammas(**overrides)["fedadmm"] == 0.1


TWO_METHODS = TINY.replace('"dataset.n_clients" = [4, 8]', '"algorithm.name" = ["fednmap", "zhang"]').replace(
    'slope = "dataset.n_clients"', 'lines = "algorithm.name"')


def test_a_per_method_axis_beside_the_shared_axis_is_refused():
    """The per-method axis would win for its method, whose points the shared axis would label by values not run."""
    for value in ("[4]", "4"):
        both = TINY.replace('"algorithm.local_steps" = [1, 2]', '"algorithm.local_steps" = [1, 2]\n'
                            f'"algorithm.fednmap.local_steps" = {value}')
        with pytest.raises(ConfigError, match=r"key 'algorithm\.fednmap\.local_steps': varies local_steps of fednmap, "
                                              r"which overrides this grid's axis \"algorithm\.local_steps\""):
            tiny(both)
    two = TWO_METHODS.replace('"algorithm.local_steps" = [1, 2]', '"algorithm.local_steps" = [1, 2]\n'
                              '"algorithm.zhang.local_steps" = [4]')
    with pytest.raises(ConfigError, match=r"varies local_steps of zhang, which overrides this grid's axis"):
        tiny(two)


def test_set_on_one_method_drops_or_refuses_a_shared_axis():
    """``--set algorithm.METHOD.key`` wins over the axis "algorithm.key": it drops the axis when it fixes every
    method of the grid that has the key, and is refused when the axis would still label the others."""
    exp = tiny(**{"algorithm.fednmap.local_steps": 3})
    specs = exp.expand()
    assert "algorithm.local_steps" not in exp.grids[0].axes and exp.grids[0].varied == ["dataset.n_clients"]
    assert {s.config["algorithm"]["local_steps"] for s in specs} == {3} and len({s.key for s in specs}) == 4
    assert all("algorithm.local_steps" not in s.labels for s in specs)
    for fixed in ({"algorithm.fednmap.local_steps": 3}, {"algorithm.fednmap": {"local_steps": 3}}):
        with pytest.raises(ConfigError, match=r"^--set algorithm\.fednmap(\.local_steps)?: fixes local_steps of "
                                              r"fednmap, which grid 'speedup' varies \(\"algorithm\.local_steps\"\) "
                                              r"for zhang too: .*--set algorithm\.local_steps="):
            tiny(TWO_METHODS, **fixed)
    both = tiny(TWO_METHODS, **{"algorithm.fednmap.local_steps": 3, "algorithm.zhang.local_steps": 5})
    assert both.grids[0].varied == ["algorithm.name"]
    assert {(s.config["algorithm"]["name"], s.config["algorithm"]["local_steps"]) for s in both.expand()} == \
        {("fednmap", 3), ("zhang", 5)}
    other = tiny(TWO_METHODS, **{"algorithm.fednmap": {"lr_local": 0.1}})  # leaves local_steps to the axis
    assert other.grids[0].axes["algorithm.local_steps"] == [1, 2]


def test_hyperparameters_of_a_method_that_never_runs_are_refused():
    axis = TINY.replace('"algorithm.local_steps" = [1, 2]', '"algorithm.fedcanon.lr_server" = [0.5, 1.0]')
    with pytest.raises(ConfigError, match=r"key 'algorithm\.fedcanon\.lr_server': varies a hyperparameter of fedcanon, "
                                          r"which this grid never runs \(it runs fednmap\)"):
        tiny(axis)
    table = TINY.replace("[[grid]]", "[run.algorithm.fedcanon]\nlr_server = 0.5\n\n[[grid]]")
    with pytest.raises(ConfigError, match=r"key 'run\.algorithm\.fedcanon': .*never runs \(it runs fednmap\)"):
        tiny(table)
    with pytest.raises(ConfigError, match=r"^--set algorithm\.fedcanon\.lr_server: .*never runs"):
        tiny(**{"algorithm.fedcanon.lr_server": 0.5})
    # a method that only an "algorithm.name" axis runs is run: its table and axes are used
    both = table.replace('"algorithm.local_steps" = [1, 2]', '"algorithm.name" = ["fednmap", "fedcanon"]\n'
                                                             '"algorithm.fedcanon.lr_local" = [0.5, 1.0]')
    algos = [s.config["algorithm"] for s in tiny(both).expand()]
    assert {(a["lr_server"], a["lr_local"]) for a in algos if a["name"] == "fedcanon"} == {(0.5, 0.5), (0.5, 1.0)}
    # --set algorithm.name leaves the file's tables for the other methods unused, and drops their axes
    switched = tiny(both, **{"algorithm.name": "fednmap"})
    assert "algorithm.fedcanon.lr_local" not in switched.grids[0].axes
    assert {s.config["algorithm"]["name"] for s in switched.expand()} == {"fednmap"}


@pytest.mark.parametrize("axis, builtin", [
    ('"params.n" = [1.0, 2.0]\n"algorithm.lr_local" = ["0.1 / n"]', "the number of clients"),
    ('"params.Q" = [1.0, 2.0]\n"algorithm.lr_local" = ["0.1 / Q"]', "algorithm.local_steps"),
    ('"params.K" = [1.0, 2.0]\n"algorithm.lr_local" = ["0.1 / K"]', "algorithm.local_steps"),
    ('"params.gamma" = [1.0, 2.0]\n"algorithm.lr_local" = ["0.1 / gamma"]', "the hyperparameter algorithm.gamma"),
])
def test_params_that_a_name_of_the_expressions_would_hide_are_refused(axis, builtin):
    name = axis.split(".")[1].split('"')[0]
    with pytest.raises(ConfigError, match=rf"key 'params\.{name}': a params value cannot be called '{name}': "
                                          rf"in expressions {name} is {builtin}"):
        tiny(TINY.replace('"algorithm.local_steps" = [1, 2]', axis))
    with pytest.raises(ConfigError, match=rf"key 'run\.params\.{name}': a params value cannot be called"):
        tiny(TINY.replace("[[grid]]", f"[run.params]\n{name} = 1.0\n\n[[grid]]")
             .replace('lr_local = "1/Q"', f'lr_local = "0.1 / {name}"'))


def test_integers_for_real_options_and_later_options_at_their_default_keep_the_run_keys():
    floats = TINY.replace('partition = "sorted"', 'partition = "dirichlet"\nalpha = 1.0').replace(
        "l1 = 1e-3", "l1 = 0.0").replace("\ngamma = 4.0", "\ngamma = 4.0\nlr_server = 1.0").replace(
        "metric_gamma = 4.0", "metric_gamma = 4.0\ndivergence = { objective_factor = 1e4, stall_factor = 0.5 }")
    ints = floats.replace("alpha = 1.0", "alpha = 1").replace("l1 = 0.0", "l1 = 0").replace(
        "gamma = 4.0\nlr_server = 1.0", "gamma = 4\nlr_server = 1").replace("1e4", "10000").replace(
        "batch_size = 16", 'batch_size = 16\nsampling = "uniform"')
    assert ints.count(" = 1\n") == 2 and "10000" in ints
    a, b = tiny(floats).expand(), tiny(ints).expand()
    assert [s.key for s in a] == [s.key for s in b] and a[0].config == b[0].config
    config = b[0].config
    assert isinstance(config["algorithm"]["gamma"], float) and isinstance(config["dataset"]["alpha"], float)
    assert isinstance(config["regularizer"]["l1"], float) and config["divergence"]["objective_factor"] == 1e4
    assert isinstance(config["divergence"]["objective_factor"], float) and config["divergence"]["patience"] == 3
    assert "sampling" not in config["algorithm"]  # at its default, as if not set
    assert config["algorithm"]["batch_size"] == 16 and isinstance(config["algorithm"]["batch_size"], int)
    assert type(tiny(**{"algorithm.lr_local": True}).expand()[0].config["algorithm"]["lr_local"]) is bool
    depositum = tiny(**{"algorithm": {"name": "depositum", "edge_prob": 1}}).expand()[0]  # None, annotated float
    assert type(depositum.config["algorithm"]["edge_prob"]) is float
    weighted = tiny(ints.replace('sampling = "uniform"', 'sampling = "weighted"')).expand()[0]
    assert weighted.config["algorithm"]["sampling"] == "weighted"


@pytest.mark.parametrize("edit, key, message", [
    (("lr_local = \"1/Q\"", "lr_lcoal = 0.1"), "run.algorithm.lr_lcoal", "none of the methods"),
    (("l2 = 2e-2", "l2 = 2e-2\nl3 = 1"), "run.regularizer.l3", "has no option 'l3'"),
    (("seed = 0\n", "seed = 0\nshuffle = true\n"), "run.dataset.shuffle", "has no option"),
    (("rounds = 4", "rounds = 4\nround = 4"), "run.round", "unknown key"),
    (('"dataset.n_clients" = [4, 8]', '"datasets.n_clients" = [4, 8]'), "datasets.n_clients", "unknown table"),
    (('lr_local = "1/Q"', 'lr_local = "1/q"'), "run.algorithm.lr_local", "unknown name 'q'"),
    (('lr_local = "1/Q"', 'lr_local = "__import__(\'os\').getcwd()"'), "run.algorithm.lr_local", "not allowed"),
    (('name = "softmax"', 'name = "softmaks"'), "run.problem.name", "unknown"),
    (('"algorithm.local_steps" = [1, 2]', '"algorithm.name" = ["fednmap", "fedfoo"]'), "algorithm.name", "unknown"),
    (('slope = "dataset.n_clients"', 'slope = "dataset.clients"'), "slope", "names no axis"),
    (('name = "fednmap"', 'name = ["fednmap", "zhang"]'), "run.algorithm.name", "a run has one algorithm: to vary"),
    (('"dataset.n_clients" = [4, 8]', '"dataset.n_clients" = [4.0, 8]'), "dataset.n_clients",
     "n_clients must be an integer, got 4.0; write 4"),
    (('"algorithm.local_steps" = [1, 2]', '"divergence.objectiv_factor" = [10.0]'), "divergence.objectiv_factor",
     "divergence has no field 'objectiv_factor'"),
    (('"algorithm.local_steps" = [1, 2]', '"divergence.objective_factor" = [10.0, 0.5]'),
     "divergence.objective_factor", "objective_factor must be a finite number > 1"),
    (('"algorithm.local_steps" = [1, 2]', 'seeds = [[0], [1]]'), "seeds",
     "seeds are not a grid axis: set them with [run] seeds = [...] or --set seeds=[...]"),
])
def test_errors_name_the_key_and_its_line(edit, key, message):
    text = TINY.replace(*edit)
    assert text != TINY
    with pytest.raises(ConfigError) as info:
        tiny(text)
    err = info.value
    assert err.key == key and message in str(err)
    wanted = key.rsplit(".", 1)[-1].split('"')[0]
    assert wanted in text.splitlines()[err.line - 1], (err.line, str(err))


@pytest.mark.parametrize("name", ["Fig. 3/a", "a\\b", ".", ".."])
@pytest.mark.parametrize(("old", "key"), [('name = "speedup"', "name"), ('name = "tiny"', "experiment.name")],
                         ids=["grid", "experiment"])
def test_names_that_cannot_be_file_names_are_refused_with_their_line(name, old, key):
    text = TINY.replace(old, f"name = {json.dumps(name)}")
    with pytest.raises(ConfigError) as info:
        tiny(text)
    err = info.value
    assert err.key == key and err.line == TINY.splitlines().index(old) + 1
    assert f"write {name!r} without / and \\, and not as . or .." in str(err)


def test_fields_of_a_divergence_rule_turned_off_are_refused_and_those_of_the_default_rule_set():
    off = TINY.replace("metric_gamma = 4.0", "metric_gamma = 4.0\ndivergence = false")
    axis = off.replace('"algorithm.local_steps" = [1, 2]', '"divergence.objective_factor" = [10.0]')
    for text, assignments in ((axis, {}), (off, {"divergence.objective_factor": 10.0})):
        with pytest.raises(ConfigError, match=r"sets a field of the divergence rule, which \[run\] turns off"):
            tiny(text).override(assignments)  # a TypeError from inside the table once
    on = tiny(off.replace("divergence = false", "divergence = true"))
    assert on.override({"divergence.objective_factor": 10.0}).expand()[0].config["divergence"]["objective_factor"] == 10


def test_toml_syntax_errors_and_unknown_tables():
    with pytest.raises(ConfigError, match="line 3"):
        tiny("[run]\nrounds = 1\nseeds = [0,,]\n")
    with pytest.raises(ConfigError, match=r"key 'runs'.*unknown table"):
        tiny(TINY + "\n[runs]\nx = 1\n")


def test_key_lines_follow_tables_arrays_of_tables_and_quoted_keys():
    lines = key_lines('a = 1\n[t]\nb = [\n  1,\n  2]\nc.d = 3\n[[g]]\n"x.y" = [1]\n[[g]]\nz = 1\n')
    assert lines == {"a": 1, "t": 2, "t.b": 3, "t.c.d": 6, "g[0]": 7, "g[0].x.y": 8, "g[1]": 9, "g[1].z": 10}


def test_expressions_are_small_and_safe():
    assert sweep.evaluate_expression("1/sqrt(Q)", {"Q": 4}) == 0.5
    assert sweep.evaluate_expression("min(0.1, 2 / (n * K))", {"n": 10, "K": 5}) == 0.04
    for bad in ("Q.__class__", "open('x')", "[1][0]", "2 ** 1000"):
        with pytest.raises(ValueError):
            sweep.evaluate_expression(bad, {"Q": 2})


@pytest.mark.parametrize("text, message", [
    ("exp(1000)", "exp(1000) cannot be evaluated (math range error)"),
    ("floor(1e400)", "cannot be evaluated (cannot convert float infinity to integer)"),
    ("min()", "min() cannot be evaluated"), ("abs()", "abs() cannot be evaluated"),
    ("sqrt(1, 2)", "sqrt(1, 2) cannot be evaluated"), ("log(-1)", "log(-1) cannot be evaluated (math domain error)"),
    ("(-8) ** 0.5", "(-8) ** 0.5 is not a real number"), ("abs((-8) ** 0.5)", "(-8) ** 0.5 is not a real number"),
    ("1e300 ** 2", "too large for a floating-point number"),
])
def test_expressions_that_cannot_be_evaluated_are_config_errors_naming_the_key(text, message):
    with pytest.raises(ConfigError) as err:
        tiny(**{"algorithm.lr_local": text}).expand()
    assert str(err.value).startswith(f"--set algorithm.lr_local: {text!r}") and message in str(err.value)


def test_a_slope_needs_an_axis_of_positive_numbers():
    text = TINY.replace('"algorithm.local_steps" = [1, 2]', '"algorithm.name" = ["fednmap", "zhang"]')
    with pytest.raises(ConfigError, match=r"slope = 'algorithm.name' needs an axis of numbers > 0 .* 'fednmap'"):
        tiny(text.replace('slope = "dataset.n_clients"', 'slope = "algorithm.name"'))


def test_overrides_and_assignments_from_the_command_line():
    assert parse_assignment("dataset.name=mnist") == ("dataset.name", "mnist")
    assert parse_assignment("seeds=[0, 1]") == ("seeds", [0, 1])
    exp = tiny(**dict([parse_assignment("dataset.n_clients=5"), parse_assignment("seeds=[3]")]))
    specs = exp.expand()
    assert len(specs) == 2 and {s.config["dataset"]["n_clients"] for s in specs} == {5}
    assert {s.config["seed"] for s in specs} == {3}
    with pytest.raises(ConfigError, match="unknown table"):
        tiny().override({"datasets.name": "x"})


def test_flags_of_problems_and_data_sets_take_true_or_false_only():
    assert tiny(**{"problem.fit_intercept": False}).expand()[0].config["problem"]["fit_intercept"] is False
    synthetic = {"dataset": {"name": "fedprox_synthetic", "n_clients": 4, "samples_per_client": 20}}
    for key, section, name, overrides in (("problem.fit_intercept", "problem", "softmax", {}),
                                          ("dataset.iid", "dataset", "fedprox_synthetic", synthetic)):
        flag = key.split(".")[1]
        with pytest.raises(ConfigError, match=re.escape(f"--set {key}: {section} {name!r}: {flag} is a flag, got "
                                                        "'False': write true or false")):
            tiny(**overrides, **dict([parse_assignment(f"{key}=False")])).expand()  # a bare word: the string


def test_set_on_a_table_or_rule_drops_the_grid_axes_inside_it():
    axis = TINY.replace('"algorithm.local_steps" = [1, 2]', '"divergence.objective_factor" = [10.0, 100.0]')
    off = tiny(axis, divergence=False)
    assert "divergence.objective_factor" not in off.grids[0].axes
    assert {s.config["divergence"] for s in off.expand()} == {False}
    fixed = tiny(axis, divergence={"objective_factor": 1e6})
    assert {s.config["divergence"]["objective_factor"] for s in fixed.expand()} == {1e6}


def test_quick_drops_the_stall_factor_of_grid_axes_too():
    in_run = TINY.replace("metric_gamma = 4.0", "metric_gamma = 4.0\ndivergence = { stall_factor = 1e-2 }")
    field_axis = TINY.replace('"algorithm.local_steps" = [1, 2]', '"divergence.stall_factor" = [1e-2]')
    rule_axis = TINY.replace('"algorithm.local_steps" = [1, 2]',
                             '"divergence" = [{ stall_factor = 1e-2, objective_factor = 1e5 }, false]')
    stall = lambda spec: (spec.config.get("divergence") or {}).get("stall_factor")  # noqa: E731
    for text in (in_run, field_axis, rule_axis):
        assert any(stall(s) == 1e-2 for s in tiny(text).expand())
        assert not any(stall(s) for s in tiny(text).shortened(rounds=5).expand()), text
    rules = [s.config.get("divergence") for s in tiny(rule_axis).shortened(rounds=5).expand()]
    assert False in rules and {r["objective_factor"] for r in rules if r} == {1e5}  # the rest of the rule stays
    kept = tiny(field_axis, **{"divergence.stall_factor": 0.5}).shortened(rounds=5).expand()
    assert {stall(s) for s in kept} == {0.5}  # what --set fixed stays as set


def test_the_time_estimate_counts_the_local_iterations_of_a_communication_period(monkeypatch):
    checks = importlib.import_module("fedopt.sweep.validate")
    monkeypatch.setattr(checks, "_time_one", lambda config, workers: (0.0, 1.0, 0.0))  # 1 s a round and step
    depositum = {"name": "depositum", "lr": 0.05, "momentum": 0.5, "tracking_rate": 0.5, "batch_size": 16}
    specs = [s for period in (1, 20) for s in tiny(algorithm={**depositum, "comm_period": period}).expand()]
    assert checks.estimate(specs, None, workers=1)["seconds_per_run"] == 4 * (1 + 20) / 2  # rounds x steps


def test_whole_numbers_for_integer_options_without_a_default_are_integers():
    axis = '"algorithm.clients_per_round" = [2, "n // 2", 2.0, 0.5, 1.0]'  # n = 4
    cohorts = TINY.replace('"dataset.n_clients" = [4, 8]', axis).replace('slope = "dataset.n_clients"\n', "")
    specs = [s for s in tiny(cohorts).expand()
             if s.labels["seed"] == 0 and s.labels["algorithm.local_steps"] == 1]
    stored = [s.config["algorithm"]["clients_per_round"] for s in specs]
    assert stored == [2, 2, 2, 0.5, 1.0] and [type(v) for v in stored] == [int, int, int, float, float]
    assert len({s.key for s in specs}) == 3  # a count of 2 three times, half the clients, all of them
    minimum, written = (tiny(**{"dataset.min_samples": value}).expand()[0] for value in (5.0, 5))
    assert type(minimum.config["dataset"]["min_samples"]) is int and minimum.key == written.key
    initial = tiny(algorithm={"name": "deepstorm", "init_batch_size": "n * 4"}).expand()[0]
    assert type(initial.config["algorithm"]["init_batch_size"]) is int
    with pytest.raises(ConfigError, match=re.escape("--set algorithm.clients_per_round: clients_per_round must be a "
                                                    "count >= 1")):
        tiny(**{"algorithm.clients_per_round": 1.5}).expand()


def test_a_list_or_flag_for_local_steps_is_named_not_the_expressions_that_use_it():
    for value, hint in (([1, 2, 4], "an experiment file a [[grid]] axis"), (True, "")):
        with pytest.raises(ConfigError) as err:
            tiny(**{"algorithm.local_steps": value}).expand()
        assert str(err.value).startswith(f"--set algorithm.local_steps: local_steps of fednmap must be an integer "
                                         f">= 1 or an expression, got {value!r}") and hint in str(err.value)


def test_seeds_are_a_list_not_a_number_of_trials():
    with pytest.raises(ConfigError, match=re.escape("--set seeds: seeds is a list: seeds=[3] for seed 3, or "
                                                    "seeds=[0, 1, 2] for 3 trials")):
        tiny(seeds=3)
    with pytest.raises(ConfigError) as err:
        tiny(TINY.replace("seeds = [0, 1]", "seeds = 3"))
    assert err.value.key == "run.seeds" and "seeds=[3] for seed 3" in str(err.value)


@pytest.mark.parametrize("name", sorted(sweep.builtin_experiments()))
def test_every_builtin_experiment_parses_and_states_its_sources(name):
    exp = sweep.load_experiment(name)
    extension = exp.paper.startswith("none:")  # beyond the papers (cohorts_digits): nothing to take from one
    assert exp.title and exp.defaults and (exp.from_paper or extension) and not (exp.from_paper and extension)
    # offline by default: the bundled digits, or a synthetic operator without a data set (fedopt.problems.vi)
    assert exp.run.get("dataset", {"name": "digits"})["name"] == "digits"
    specs = exp.expand()
    assert specs and all(s.config["rounds"] > 0 for s in specs)


# ------------------------------------------------------------------------------- store and execution
def test_serial_sweep_stores_every_run_and_resume_skips_them(tmp_path):
    exp = tiny()
    with sweep.Store(tmp_path / "s.db") as store:
        first = sweep.run_sweep(exp, store, executor="serial")
        assert (first.executed, first.skipped, first.statuses) == (8, 0, {"done": 8})
        again = sweep.run_sweep(exp, store, executor="serial")
        assert (again.executed, again.skipped) == (0, 8)
        run = store.run(exp.expand()[0].key)
        assert run["status"] == "done" and run["history"]["round"] == [0, 2, 4]
        assert run["final_stationarity"] == run["history"]["stationarity"][-1]
        assert run["config"] == exp.expand()[0].config
        more = sweep.run_sweep(tiny(**{"seeds": [0, 1, 2]}), store, executor="serial")
        assert (more.executed, more.skipped) == (4, 8)  # only the new seed runs


def test_failed_and_diverged_runs_are_stored_and_do_not_stop_the_sweep(tmp_path):
    text = TINY.replace('"dataset.n_clients" = [4, 8]', '"dataset.n_clients" = [4, 5000]')
    text = text.replace('"algorithm.local_steps" = [1, 2]', '"algorithm.lr_local" = ["1/Q", 1e300]')
    exp = tiny(text, seeds=[0])
    with sweep.Store(tmp_path / "s.db") as store:
        summary = sweep.run_sweep(exp, store, executor="serial")
        assert summary.statuses == {"done": 1, "diverged": 1, "failed": 2}
        members = store.members("tiny")
        failed = [m for m in members if m["status"] == "failed"]
        assert all("5000" in m["error"] for m in failed)
        diverged = next(m for m in members if m["status"] == "diverged")
        assert diverged["history"]["round"][0] == 0 and "diverged" in diverged["error"]
        assert sweep.run_sweep(exp, store, executor="serial").executed == 0
        assert sweep.run_sweep(exp, store, executor="serial", retry_failed=True).executed == 2


def test_local_pool_gives_the_serial_results_bit_for_bit(tmp_path):
    exp = tiny()
    with sweep.Store(tmp_path / "a.db") as a, sweep.Store(tmp_path / "b.db") as b:
        sweep.run_sweep(exp, a, executor="serial")
        summary = sweep.run_sweep(exp, b, executor="local", workers=2)
        assert summary.statuses == {"done": 8}
        assert finals(a) == finals(b)


@pytest.mark.parametrize("seeds", [[0], [0, 1]], ids=["run", "batch"])
def test_compiling_the_kernels_does_not_count_as_the_first_runs_training_time(seeds, monkeypatch):
    from fedopt.algorithms import FedNMap
    from fedopt.sweep import execute

    # Prepare: the first round in the process takes 0.5 s more, as on a cold Numba cache
    first_round, plain_round = [True], FedNMap.round

    def compiling(self, state):
        if first_round.pop() if first_round else False:
            time.sleep(0.5)
        return plain_round(self, state)

    monkeypatch.setattr(FedNMap, "round", compiling)
    monkeypatch.setattr(execute, "_WARM", set())
    config = tiny().expand()[0].config
    # Execute
    records = execute.execute_batch([{**config, "seed": seed} for seed in seeds])
    again = execute.execute_batch([{**config, "seed": seed} for seed in seeds])
    # Assert: the warm-up took the slow round; the wall time keeps it, the training time does not
    assert not first_round and [r["status"] for r in records + again] == ["done"] * 2 * len(seeds)
    for record in records:
        assert record["history"]["seconds"][-1] < 0.25 and record["run_seconds"] < 0.25
        assert record["wall_seconds"] * len(seeds) >= 0.5
    assert max(r["wall_seconds"] for r in again) < 0.25  # one warm-up per kind of run and process
    for column in ("stationarity", "objective", "test_accuracy"):  # and the warm-up changed no result
        assert [r["history"][column] for r in records] == [r["history"][column] for r in again]


# -------------------------------------------------------------------------------------------- report
def test_fit_slope_recovers_a_power_law_and_its_interval():
    x = np.array([10, 20, 30, 50, 100])
    slope, intercept, low, high = sweep.fit_slope(x, 3 * x ** -1.5)
    assert math.isclose(slope, -1.5) and math.isclose(intercept, math.log(3))
    assert math.isclose(low, -1.5, abs_tol=1e-9) and math.isclose(high, -1.5, abs_tol=1e-9)
    noisy = 3 * x ** -1.5 * np.exp(np.array([0.1, -0.1, 0.05, 0.0, -0.05]))
    slope, _, low, high = sweep.fit_slope(x, noisy)
    from scipy import stats

    res = stats.linregress(np.log(x), np.log(noisy))
    half = stats.t.ppf(0.975, 3) * res.stderr
    assert math.isclose(slope, res.slope)
    assert math.isclose(low, res.slope - half) and math.isclose(high, res.slope + half)
    assert math.isnan(sweep.fit_slope([1, 2], [1, 0.5])[2])


@pytest.mark.parametrize("dof", [1, 2.5, 3, 7.3, 40])
def test_t_quantile_is_scipy_stats_t_ppf(dof):
    """The confidence intervals' t quantile, with the real degrees of freedom of Welch's interval."""
    from scipy import stats

    from fedopt.sweep.report import t_quantile

    for probability in (0.9, 0.975, 0.995):
        assert math.isclose(t_quantile(probability, dof), stats.t.ppf(probability, dof), rel_tol=1e-12)


def test_report_prints_tables_and_slopes_and_writes_files(tmp_path, capsys):
    exp = tiny()
    with sweep.Store(tmp_path / "s.db") as store:
        sweep.run_sweep(exp, store, executor="serial")
        result = sweep.report(store, out=tmp_path / "out", plots=False)
    printed = capsys.readouterr().out
    assert "slope of log stationarity against log n_clients" in printed
    assert len(result["slopes"]) == 2  # one per local_steps value
    assert all(s.points == 2 and math.isnan(s.low) for s in result["slopes"])
    assert "||F_nat||^2 mean" in printed and "2/2" in printed
    rows = (tmp_path / "out" / "tiny" / "summary.csv").read_text().splitlines()
    assert len(rows) == 5 and "stationarity_mean" in rows[0]
    assert (tmp_path / "out" / "report.md").read_text().count("slope") >= 2


def test_report_draws_the_figures(tmp_path):
    pytest.importorskip("matplotlib", reason="the PNG figures need matplotlib (the plot extra)")
    with sweep.Store(tmp_path / "s.db") as store:
        sweep.run_sweep(tiny(), store, executor="serial")
        result = sweep.report(store, out=tmp_path / "out", stream=io.StringIO())
    names = sorted(p.name for p in result["figures"])
    assert names == ["speedup_curves.png", "speedup_slope.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in result["figures"])


def test_report_without_matplotlib_still_prints_slopes(tmp_path, capsys, monkeypatch):
    rep = importlib.import_module("fedopt.sweep.report")

    monkeypatch.setattr(rep, "_matplotlib", lambda: None)
    with sweep.Store(tmp_path / "s.db") as store:
        sweep.run_sweep(tiny(), store, executor="serial")
        result = rep.report(store, out=tmp_path / "out")
    printed = capsys.readouterr().out
    assert rep.PLOT_HINT in printed and "slope" in printed and result["figures"] == []


# ----------------------------------------------------------------------------------------------- CLI
def test_cli_sweep_then_report(tmp_path, capsys):
    toml = tmp_path / "tiny.toml"
    toml.write_text(TINY)
    db = tmp_path / "r.db"
    assert main(["sweep", str(toml), "--store", str(db), "--executor", "serial"]) == 0
    assert "8 executed (8 done)" in capsys.readouterr().out
    assert main(["sweep", str(toml), "--store", str(db), "--executor", "serial"]) == 0
    assert "8 already stored, 0 executed" in capsys.readouterr().out
    for resume, to_run in (("--resume", "0 to run"), ("--no-resume", "8 to run")):  # --no-resume reruns them all
        assert main(["sweep", str(toml), "--store", str(db), "--dry-run", resume]) == 0
        assert to_run in capsys.readouterr().out
    assert main(["report", str(db), "--out", str(tmp_path / "rep"), "--no-plots"]) == 0
    printed = capsys.readouterr().out
    assert "slope of log stationarity against log n_clients" in printed
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT COUNT(*) FROM runs WHERE status = 'done'").fetchone()[0] == 8


def test_cli_refuses_a_bad_key_with_its_line(tmp_path, capsys):
    toml = tmp_path / "bad.toml"
    toml.write_text(TINY.replace("l2 = 2e-2", "l2 = 2e-2\nlam = 1"))
    assert main(["sweep", str(toml), "--store", str(tmp_path / "x.db")]) == 2
    err = capsys.readouterr().err
    line = TINY.replace("l2 = 2e-2", "l2 = 2e-2\nlam = 1").splitlines().index("lam = 1") + 1
    assert f"bad.toml:{line}: key 'run.regularizer.lam'" in err
    assert not (tmp_path / "x.db").exists()


def test_cli_run_prints_a_summary_and_writes_the_history(tmp_path, capsys):
    out = tmp_path / "h.csv"
    assert main(["run", "--rounds", "4", "--n-clients", "5", "--set", "eval_every=2", "--set",
                 'algorithm.lr_local="1/Q"', "--out", str(out), "--store", str(tmp_path / "one.db")]) == 0
    printed = capsys.readouterr().out
    assert "fednmap on softmax + elasticnet, digits with 5 clients, 4 rounds" in printed and "lr_local=0.1" in printed
    rows = out.read_text().splitlines()
    assert rows[0].startswith("round,stationarity") and len(rows) == 4
    with sweep.Store(tmp_path / "one.db") as store:
        assert store.count("done") == 1
    assert main(["run", "--algorithm", "scaffnew", "--regularizer", "zero", "--rounds", "2", "--out", str(out)]) == 0
    assert main(["run", "fednmap_fig3"]) == 2  # a grid is for `fedopt sweep`
    assert "fedopt sweep" in capsys.readouterr().err


def test_cli_list_and_bench(capsys):
    assert main(["list"]) == 0
    printed = capsys.readouterr().out
    assert all(name in printed for name in sweep.builtin_experiments())
    assert "datasets: digits" in printed and "executors: local, dask" in printed
    assert main(["bench", "--list"]) == 0
    assert "bench_prox_cpu.py" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(sweep.builtin_experiments()))
def test_every_builtin_experiment_runs_shortened(name, tmp_path):
    exp = sweep.load_experiment(name).shortened(rounds=2, seeds=1, values=2)
    with sweep.Store(tmp_path / "s.db") as store:
        summary = sweep.run_sweep(exp, store, executor="serial")
        bad = [m for m in store.members(exp.name) if m["status"] != "done"]
        assert not bad, bad[0]["error"]
        assert summary.executed == len({s.key for s in exp.expand()})
        result = sweep.report(store, out=tmp_path / "out", plots=False, stream=io.StringIO())
    if any(g.slope for g in exp.grids):
        assert result["slopes"]
    json.dumps([str(s) for s in result["slopes"]])


def test_eval_clients_is_a_run_option_that_runs_alone():
    from fedopt.sweep.batching import signature

    spec = tiny(TINY.replace("metric_gamma = 4.0", "metric_gamma = 4.0\neval_clients = 2")).expand()[0]
    assert spec.config["eval_clients"] == 2 and signature(spec.config) is None
    assert "eval_clients" not in tiny().expand()[0].config  # unset: the stored keys stay as they were
    with pytest.raises(ConfigError, match="eval_clients"):
        tiny(TINY.replace("metric_gamma = 4.0", "metric_gamma = 4.0\neval_clients = 0"))


@pytest.mark.parametrize("overrides, message", [
    ({"eval_clients": 6}, "eval_clients = 6 in 4 of 8 runs: eval_clients=6 is more than the 4 clients"),
    ({"eval_clients": 2, "algorithm": {"name": "depositum"}}, "depositum evaluates per-node or per-operator"),
    ({"algorithm.clients_per_round": 6, "algorithm.sampling": "weighted"},
     "algorithm.clients_per_round = 6 in 4 of 8 runs: clients_per_round=6 is more than the 4 clients"),
    ({"algorithm.lr_local": True}, "algorithm.lr_local = True in 8 of 8 runs: lr_local must be a finite number > 0"),
    ({"dataset.seed": -1}, "dataset.seed = -1 in 8 of 8 runs: seed must be an integer >= 0"),
])
def test_run_arguments_checked_at_run_time_are_checked_before_the_sweep(overrides, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        sweep.validate(tiny(**overrides).expand())
