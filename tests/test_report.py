"""The report of a store: what it excludes and says so, provenance beside every table, the other sweeps, the
paper's slope beside an overridden grid, the figures' labels, and the runs as data."""

from __future__ import annotations

import csv
import importlib
import io
import math
import socket
import sys

import pytest

from fedopt import sweep
from fedopt.cli import CLAIM_FAILED, main
from fedopt.sweep import claims

rep = importlib.import_module("fedopt.sweep.report")

TOML = """
[experiment]
name = "tiny"
title = "a tiny report"
from_paper = ["nothing"]
defaults = ["everything"]

[run]
rounds = 2
eval_every = 1
seeds = [0, 1]

[run.dataset]
name = "digits"
n_clients = 4

[run.problem]
name = "softmax"

[run.regularizer]
name = "elasticnet"
l1 = 1e-3
l2 = 2e-2

[run.algorithm]
name = "fednmap"

[[grid]]
name = "speedup"
"dataset.n_clients" = [4, 8, 16, 32, 64, 128]
slope = "dataset.n_clients"
paper_slope = -1.436

[[grid]]
name = "again"
"dataset.n_clients" = [4]
"""

# (n_clients, seed) -> (status, final stationarity); the others are done on the line 3 / n; n = 128 is not run
ODD = {(32, 0): ("done", 5.0), (32, 1): ("diverged", 1e30), (64, 0): ("failed", None), (64, 1): ("done", 7.0)}


def record(status, value):
    if status == "failed":
        return {"status": "failed", "history": None, "error": "Traceback\nValueError: boom", "run_seconds": None}
    return {"status": status, "error": "fednmap diverged: objective ..." if status == "diverged" else None,
            "history": {"round": [0, 1, 2], "stationarity": [1.0, 2 * value, value], "objective": [2.3, 1.5, 1 + value],
                        "test_accuracy": [0.1, 0.5, 0.9], "prox_evals": [0, 5, 10], "grad_evals": [0, 5, 10]},
            "run_seconds": 0.5, "wall_seconds": 0.6, "backend": "numpy", "host": "h", "fedopt_version": "0.1.0"}


def fill(store, exp) -> str:
    """Register ``exp`` in ``store`` and store its runs as :data:`ODD` says; returns the sweep id."""
    specs = exp.expand()
    sweep_id = store.register(exp, specs)
    for spec in specs:
        n, seed = spec.config["dataset"]["n_clients"], spec.config["seed"]
        if n != 128:
            status, value = ODD.get((n, seed), ("done", 3.0 / n))
            store.put(spec.key, spec.config, record(status, value))
    return sweep_id


@pytest.fixture
def store_path(tmp_path):
    """A store with two sweeps of "tiny": an overridden one (rounds = 3), then the file as written (the latest)."""
    path = tmp_path / "s.db"
    exp = sweep.parse_experiment(TOML, source="tiny.toml", name="tiny")
    with sweep.Store(path) as store:
        fill(store, exp.override({"rounds": 3}))
        fill(store, exp)
    return path


def test_not_done_runs_are_excluded_with_visible_counts_and_the_slope_skips_their_points(store_path, tmp_path):
    result = rep.report(store_path, out=tmp_path / "out", plots=False, stream=io.StringIO())
    text = result["text"]
    assert "1 of 12 runs diverged, excluded; 1 of 12 runs failed, excluded; 2 of 12 runs missing, excluded" in text
    (slope,) = result["slopes"]
    # n = 4, 8, 16 lie on 3 / n; the points with a seed not done (32: diverged, 64: failed, 128: missing) are out
    assert slope.points == 3 and math.isclose(slope.slope, -1.0) and slope.left_out == 3
    assert "3 points, 3 points left out (seeds not done: 1 diverged, 1 failed, 2 missing)" in str(slope)
    assert "1.000e+30" not in text  # the diverged run's huge but finite value reaches no mean
    summary = (tmp_path / "out" / "tiny" / "summary.csv").read_text().splitlines()
    assert summary[0].split(",")[:8] == ["grid", "n_clients", "seeds", "done", "diverged", "failed", "missing",
                                         "stationarity_mean"]
    assert "speedup,32,2,1,1,0,0,5.0" in summary[4]  # the mean of the done seed only


def test_done_runs_that_ended_above_their_start_are_counted_with_a_caution(store_path, tmp_path):
    text = rep.report(store_path, out=tmp_path / "out", plots=False, stream=io.StringIO())["text"]
    # (32, 0) and (64, 1) are done at objective 6 and 8 from 2.3; the diverged one is excluded, not counted here
    assert "caution: 2 of 12 runs ended with a higher objective than they started with (kept as done" in text


def test_runs_stopped_as_stalled_are_counted_with_the_diverged_and_named():
    stalled = {"status": "diverged", "error": "fednmap did not converge: ||F_nat||^2 0.0066 at its last round ..."}
    runs = [stalled, {"status": "diverged", "error": "fednmap diverged: objective ..."}, {"status": "done"}]
    assert rep._excluded(runs) == "2 of 3 runs diverged (1 of them did not converge), excluded"


def test_a_setting_with_too_few_complete_points_says_so():
    rows = [({"dataset.n_clients": n}, {"seeds": 2, "done": done, "diverged": 2 - done, "failed": 0, "missing": 0,
                                       "stationarity_mean": 1.0 / n, "stationarity_min": 1.0 / n})
            for n, done in ((4, 2), (8, 1), (16, 0))]
    grid = {"name": "g", "slope": "dataset.n_clients", "varied": ["dataset.n_clients"]}
    slopes, unfitted = rep._slopes("e", grid, rows)
    assert slopes == [] and unfitted == ["e/g: not fitted, 1 point to fit (a slope needs 2); 2 points left out "
                                         "(seeds not done: 3 diverged)"]


def test_points_without_a_logarithm_are_named_as_left_out_of_the_slope():
    def row(x, value):
        return {"dataset.n_clients": x}, {"seeds": 1, "done": 1, "diverged": 0, "failed": 0, "missing": 0,
                                          "stationarity_mean": value, "stationarity_min": value}

    grid = {"name": "g", "slope": "dataset.n_clients", "varied": ["dataset.n_clients"]}
    (slope,), _ = rep._slopes("e", grid, [row(4, 0.5), row(8, 0.25), row(16, 0.0)])
    assert slope.points == 2 and slope.left_out == 1
    assert "1 point left out (no logarithm at n_clients=16 with final stationarity 0)" in str(slope)
    assert rep._slopes("e", grid, [row("a", 0.5), row("b", 0.25)]) == ([], [
        "e/g: not fitted, 0 points to fit (a slope needs 2); 2 points left out (no logarithm at n_clients=a (not a "
        "number > 0), n_clients=b (not a number > 0))"])


@pytest.mark.parametrize("metric", ["stationarity", "nnz"])
def test_a_point_with_a_seed_at_0_is_named_and_left_out_of_the_slope_as_the_slope_claim_does(metric):
    # n = 32 has a mean > 0 over its seeds, but one seed's 0 has no logarithm
    runs = [{"grid": "g", "labels": {"dataset.n_clients": n, "seed": seed}, "status": "done", "run_seconds": 1.0,
             "history": None, "final": {"stationarity": value, "nnz": value, "objective": 1.0, "test_accuracy": 0.9,
                                        "prox_evals": 1, "grad_evals": 1}}
            for n in (4, 8, 16, 32) for seed, value in enumerate([1 / n, 0.0 if n == 32 else 1 / n])]
    rows = [({"dataset.n_clients": n}, rep._stats([r for r in runs if r["labels"]["dataset.n_clients"] == n], metric))
            for n in (4, 8, 16, 32)]
    grid = {"name": "g", "slope": "dataset.n_clients", "varied": ["dataset.n_clients"], "metric": metric}
    (slope,), _ = rep._slopes("e", grid, rows)
    assert slope.points == 3 and math.isclose(slope.slope, -1.0) and slope.left_out == 1
    assert f"1 point left out (no logarithm at n_clients=32 with final {metric} 0 in a seed)" in str(slope)
    claim = claims.Claim(name="c", kind="slope", grid="g", axis="dataset.n_clients", metric=metric,
                         interval=(-1.1, -0.9))
    [verdict] = claims.check([claim], runs)
    assert "slope -1.000" in verdict.lines[0] and "over 3 points" in verdict.lines[0]


def test_report_check_exits_1_on_failed_or_missing_runs_as_sweep_check_does(tmp_path, capsys):
    def check(statuses, claimed=""):
        path = tmp_path / f"{len(list(tmp_path.glob('*.db')))}.db"
        exp = sweep.parse_experiment(TOML + claimed, source="tiny.toml", name="tiny")
        with sweep.Store(path) as store:
            specs = exp.expand()
            store.register(exp, specs)
            for spec in specs:
                n, seed = spec.config["dataset"]["n_clients"], spec.config["seed"]
                status = statuses.get((n, seed), "done")
                if status != "missing":
                    store.put(spec.key, spec.config, record(status, 3.0 / n))
        code = main(["report", str(path), "--no-plots", "--out", str(tmp_path / "out"), "--check"])
        return code, capsys.readouterr().err

    assert check({(32, 1): "diverged"}) == (0, "")  # a divergence is a result of the grid
    code, err = check({(64, 0): "failed", (32, 1): "diverged"})
    assert code == 1 and "tiny: 1 failed of 12 runs; `fedopt store show " in err
    code, err = check({(128, 0): "missing"})
    assert code == 1 and "tiny: 1 missing of 12 runs" in err
    # a claim that fails takes precedence, as with `fedopt sweep --check`
    claimed = '[[claim]]\nname = "fewer-lower"\ngrid = "speedup"\nkind = "order"\naxis = "dataset.n_clients"\n' \
              "values = [4, 8]\n"
    code, err = check({(64, 0): "failed"}, claimed)
    assert code == CLAIM_FAILED and "claims that fail: fewer-lower" in err and "1 failed of 12 runs" in err
    assert main(["report", str(tmp_path / "1.db"), "--no-plots", "--out", str(tmp_path / "out")]) == 0

def test_every_table_states_the_sweep_its_overrides_and_where_it_ran(store_path, tmp_path):
    result = rep.report(store_path, out=tmp_path / "out", plots=False, stream=io.StringIO())
    text = result["text"]
    with sweep.Store(store_path, readonly=True) as store:
        overridden, latest = store.sweeps("tiny")
    assert result["sweeps"] == [latest["id"]]
    assert f"sweep {latest['id'][:12]}: as written in the experiment file; fedopt " in text
    assert f"on {socket.gethostname()}; 20" in text  # host, then the ISO date
    assert "(14 grid points x seeds, 12 distinct runs)" in text  # grid "again" shares the runs with n = 4
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert markdown.splitlines()[2].startswith(f"- tiny, sweep {latest['id'][:12]}: as written")
    # the other sweep is listed with how to choose it
    assert f"1 other sweep of tiny in this store (report one with `fedopt report {store_path} --sweep ID`)" in text
    assert f"{overridden['id'][:12]}  " in text and "rounds=3" in text
    assert "; paper -1.436" in text and "not comparable" not in text  # the paper's grid, as written


def test_the_papers_slope_beside_an_overridden_grid_says_it_is_not_comparable(store_path, tmp_path):
    with sweep.Store(store_path, readonly=True) as store:
        overridden = store.sweeps("tiny")[0]
    result = rep.report(store_path, out=tmp_path / "out", plots=False, stream=io.StringIO(),
                        sweep=overridden["id"][:8])
    assert result["sweeps"] == [overridden["id"]]
    assert f"sweep {overridden['id'][:12]}: rounds=3; fedopt" in result["text"]
    assert "paper -1.436 (the paper's grid; this sweep overrides rounds=3: not comparable)" in result["text"]
    assert "as written in the experiment file" in result["text"]  # the other (latest) sweep's listing
    with pytest.raises(ValueError, match="is of experiment 'tiny', not 'other'"):
        rep.report(store_path, out=tmp_path / "out", plots=False, stream=io.StringIO(), sweep=overridden["id"],
                   experiment="other")


def test_overrides_in_words():
    assert rep.overrides_text({}) == "as written in the experiment file"
    assert rep.overrides_text({"seeds": [0], "quick": {"rounds": 2, "seeds": 1, "values per axis": 2}}) == \
        "seeds=[0], quick (rounds=2, seeds=1, values per axis=2)"
    assert rep._caution({"backend": "gpu"}) is None  # where it ran changes nothing
    assert "not recorded" in rep._caution({"unrecorded": "stored by a fedopt that did not record overrides"})


@pytest.fixture
def drawn(monkeypatch):
    """The matplotlib figures the report draws, in order (skipped without matplotlib)."""
    pytest.importorskip("matplotlib", reason="the PNG figures need matplotlib (the plot extra)")
    from matplotlib.figure import Figure

    figures = []

    class Recorded(Figure):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            figures.append(self)

    monkeypatch.setattr(rep, "_matplotlib", lambda: Recorded)
    return figures


def test_figures_label_the_metric_and_carry_the_provenance(store_path, tmp_path, drawn):
    result = rep.report(store_path, out=tmp_path / "out", stream=io.StringIO())
    assert sorted(p.name for p in result["figures"]) == ["again_curves.png", "speedup_curves.png", "speedup_slope.png"]
    labels = [ax.get_ylabel() for fig in drawn for ax in fig.axes]
    assert labels.count(r"$\|F_{nat}(x_t)\|^2$") == 2 and labels.count(r"final $\|F_{nat}(x_t)\|^2$") == 1
    assert {ax.get_yscale() for fig in drawn for ax in fig.axes} == {"log"}  # a grid's metric on a log axis
    for fig in drawn:
        assert any(t.get_text().startswith("tiny sweep ") and "as written" in t.get_text() for t in fig.texts)
    assert rep.metric_label("gap", tex=True) == "gap"


def test_a_grids_curves_plot_one_column_against_another(tmp_path, drawn):
    text = TOML.replace('name = "again"', 'name = "again"\ncurves = [{ y = "test_accuracy", x = "prox_evals" }]')
    exp = sweep.parse_experiment(text, source="tiny.toml", name="tiny")
    with sweep.Store(tmp_path / "s.db") as store:
        fill(store, exp)
    result = rep.report(tmp_path / "s.db", out=tmp_path / "out", stream=io.StringIO())
    assert "again_test_accuracy_vs_prox_evals.png" in [p.name for p in result["figures"]]
    (ax,) = drawn[-1].axes
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_yscale()) == ("prox evaluations", "test_accuracy", "linear")
    (line,) = ax.get_lines()
    assert list(line.get_xdata()) == [0, 5, 10] and list(line.get_ydata()) == [0.1, 0.5, 0.9]


@pytest.mark.parametrize("curves, message", [
    ('[{ y = "test_accuracy", x = "secs" }]', r"x = 'secs' names no history column.*seconds"),
    ('[{ y = "acc", x = "round" }]', r"y = 'acc' names no history column"),
    ('[["test_accuracy", "seconds"]]', r"a list of tables \{ y ="),
])
def test_a_grids_curves_name_history_columns(curves, message):
    text = TOML.replace('name = "again"', f'name = "again"\ncurves = {curves}')
    with pytest.raises(sweep.ConfigError, match=message):
        sweep.parse_experiment(text, source="tiny.toml", name="tiny")


def test_export_writes_one_row_per_run_and_round(store_path, tmp_path):
    path = rep.export(store_path, tmp_path / "rows.csv", sweep="tiny")
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    columns = list(rows[0])
    assert columns[:4] == ["sweep", "experiment", "grid", "key"] and "status" in columns
    assert {"algorithm.lr_local", "dataset.n_clients", "round", "stationarity"} <= set(columns)
    assert columns.index("dataset.n_clients") < columns.index("round")
    speedup = [r for r in rows if r["grid"] == "speedup"]
    assert len(speedup) == 9 * 3 + 1  # 9 runs with 3 evaluated rounds, the failed one without history
    failed = [r for r in speedup if r["status"] == "failed"]
    assert len(failed) == 1 and failed[0]["round"] == "" and failed[0]["dataset.n_clients"] == "64"
    assert {r["status"] for r in speedup} == {"done", "diverged", "failed"}


def test_the_export_of_a_sweep_without_stored_runs_is_a_table_of_no_rows(tmp_path):
    """A sweep interrupted before its first run: the CSV has its header (it was one empty line, which no CSV
    reader loads as a table)."""
    path = tmp_path / "s.db"
    with sweep.Store(path) as store:
        exp = sweep.parse_experiment(TOML, source="tiny.toml", name="tiny")
        store.register(exp, exp.expand())
    out = rep.export(path, tmp_path / "rows.csv", sweep="tiny")
    with open(out, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        assert list(reader) == [] and reader.fieldnames[:2] == ["sweep", "experiment"] and "round" in reader.fieldnames


def test_export_refuses_other_formats_and_names_pyarrow(store_path, tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=r"\.csv or a \.parquet"):
        rep.export(store_path, tmp_path / "rows.xlsx")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(ImportError, match="pip install pyarrow"):
        rep.export(store_path, tmp_path / "rows.parquet")


def test_report_refuses_parquet_without_pyarrow_before_the_report(store_path, tmp_path, monkeypatch, capsys):
    from fedopt.cli import main

    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setattr(rep, "report", lambda *a, **k: pytest.fail("the report ran"))
    assert main(["report", str(store_path), "--parquet", str(tmp_path / "rows.parquet")]) == 2
    assert "--parquet: writing" in capsys.readouterr().err and not (tmp_path / "rows.parquet").exists()


def test_the_reports_export_holds_the_runs_of_the_reported_sweeps_and_names_them(store_path, tmp_path):
    from fedopt.cli import main

    other = sweep.parse_experiment(TOML.replace('name = "tiny"', 'name = "other"').replace("l1 = 1e-3", "l1 = 2e-3"),
                                   source="other.toml", name="other")
    with sweep.Store(store_path) as store:
        other_id = fill(store, other)
        overridden, latest = store.sweeps("tiny")
        keys = {m["key"] for m in store.members(latest["id"]) if m["status"]}  # n = 128 is not stored

    def exported(*flags):
        path = tmp_path / "rows.csv"
        assert main(["report", str(store_path), "--no-plots", "--out", str(tmp_path / "out"), "--csv", str(path),
                     *flags]) == 0
        with open(path, newline="", encoding="utf-8") as handle:
            return list(csv.DictReader(handle))

    # the latest sweep of tiny only: not the other experiment, not the older sweep's runs (rounds = 3)
    rows = exported("--experiment", "tiny")
    assert {r["sweep"] for r in rows} == {latest["id"]} and {r["key"] for r in rows} == keys
    assert {r["experiment"] for r in rows} == {"tiny"} and max(int(r["round"] or 0) for r in rows) == 2
    assert {r["sweep"] for r in exported("--sweep", overridden["id"][:8])} == {overridden["id"]}
    assert {r["sweep"] for r in exported()} == {latest["id"], other_id}  # the latest of each experiment


def test_axes_that_share_a_short_name_are_named_in_full(tmp_path):
    text = TOML.replace('name = "elasticnet"\nl1 = 1e-3\nl2 = 2e-2', 'name = "mcp"\nlam = 1e-3\ngamma = 3.0')
    text = text[:text.index("[[grid]]")] + """
[[grid]]
name = "gammas"
"algorithm.gamma" = [2.0, 1.0]
"regularizer.gamma" = [3.0, 5.0]
"dataset.n_clients" = [4, 8]
"""
    exp = sweep.parse_experiment(text, source="tiny.toml", name="tiny")
    with sweep.Store(tmp_path / "s.db") as store:
        fill(store, exp)
    result = rep.report(tmp_path / "s.db", out=tmp_path / "out", plots=False, stream=io.StringIO())
    header = result["text"].split("-- gammas\n")[1].split()[:4]
    assert header == ["algorithm.gamma", "regularizer.gamma", "n_clients", "seeds"]  # n_clients is unique
    with open(tmp_path / "out" / "tiny" / "summary.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert {"algorithm.gamma", "regularizer.gamma", "n_clients"} <= set(rows[0]) and "gamma" not in rows[0]
    assert len({(r["algorithm.gamma"], r["regularizer.gamma"], r["n_clients"]) for r in rows}) == 8


MCP = TOML.replace('name = "elasticnet"\nl1 = 1e-3\nl2 = 2e-2', 'name = "mcp"\nlam = 1e-3\ngamma = 3.0')


def test_single_valued_axes_that_share_a_short_name_keep_a_column_each_in_the_summary(tmp_path):
    text = MCP[:MCP.index("[[grid]]")] + """
[[grid]]
name = "fixed"
"algorithm.gamma" = [2.0]
"regularizer.gamma" = [5.0]
"dataset.n_clients" = [4, 8]

[[grid]]
name = "regularizer"
"regularizer.gamma" = [4.0, 6.0]
"""
    exp = sweep.parse_experiment(text, source="tiny.toml", name="tiny")
    with sweep.Store(tmp_path / "s.db") as store:
        fill(store, exp)
    rep.report(tmp_path / "s.db", out=tmp_path / "out", plots=False, stream=io.StringIO())
    with open(tmp_path / "out" / "tiny" / "summary.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert {"algorithm.gamma", "regularizer.gamma", "n_clients"} <= set(rows[0]) and "gamma" not in rows[0]
    # one column an axis across the grids of the sweep, the other grid's axis left empty
    assert [(r["grid"], r["algorithm.gamma"], r["regularizer.gamma"], r["n_clients"]) for r in rows] == [
        ("fixed", "2.0", "5.0", "4"), ("fixed", "2.0", "5.0", "8"), ("regularizer", "", "4.0", ""),
        ("regularizer", "", "6.0", "")]


def test_the_lines_of_a_figure_on_a_single_valued_axis_name_the_panels_axes_in_full(tmp_path, drawn):
    text = MCP[:MCP.index("[[grid]]")] + """
[[grid]]
name = "gammas"
"algorithm.gamma" = [2.0, 1.0]
"regularizer.gamma" = [5.0]
lines = "regularizer.gamma"
"""
    exp = sweep.parse_experiment(text, source="tiny.toml", name="tiny")
    with sweep.Store(tmp_path / "s.db") as store:
        fill(store, exp)
    rep.report(tmp_path / "s.db", out=tmp_path / "out", stream=io.StringIO())
    axes = drawn[0].axes
    assert [ax.get_title() for ax in axes] == ["algorithm.gamma = 2", "algorithm.gamma = 1"]
    assert {text.get_text() for ax in axes for text in ax.get_legend().get_texts()} == {"regularizer.gamma = 5"}


def test_the_export_of_a_sweep_names_the_grid_point_of_each_row(tmp_path):
    # lr_local = "alpha / Q" (Q = 1) at alpha = 0.05 computes the run of lr_local = 0.05: two points, one run
    grid = '"params.alpha" = [0.05, 0.1]\n"algorithm.lr_local" = [0.05, "alpha / Q"]\n"algorithm.local_steps" = [1]'
    text = TOML.replace('"dataset.n_clients" = [4]', grid)
    other = sweep.parse_experiment(MCP.replace('name = "tiny"', 'name = "other"'), source="o.toml", name="other")
    with sweep.Store(tmp_path / "s.db") as store:
        ids = [fill(store, sweep.parse_experiment(text, source="tiny.toml", name="tiny")), fill(store, other)]
    path = rep.export(tmp_path / "s.db", tmp_path / "rows.csv", sweep=ids)
    with open(path, newline="", encoding="utf-8") as handle:
        rows = [r for r in csv.DictReader(handle) if (r["experiment"], r["grid"]) == ("tiny", "again")]
    columns = list(rows[0])
    points = {(r["point.params.alpha"], r["point.algorithm.lr_local"]) for r in rows}
    assert points == {("0.05", "0.05"), ("0.05", "alpha / Q"), ("0.1", "0.05"), ("0.1", "alpha / Q")}
    assert len({tuple(r.values()) for r in rows}) == len(rows) == 4 * 2 * 3  # grid points x seeds x rounds
    # after every configuration column of both experiments (mcp's gamma, elasticnet's l1), before the history
    first = min(columns.index(c) for c in columns if c.startswith("point."))
    assert max(columns.index(c) for c in ("regularizer.gamma", "regularizer.l1")) < first
    assert all(c.startswith("point.") for c in columns[first:columns.index("round")])
    parquet = pytest.importorskip("pyarrow.parquet")
    import pyarrow

    table = parquet.read_table(rep.export(tmp_path / "s.db", tmp_path / "rows.parquet", sweep=ids[0]))
    assert table.column_names == [c for c in columns if c not in ("regularizer.lam", "regularizer.gamma")]
    assert table.schema.field("point.params.alpha").type == pyarrow.float64()
    assert set(table.column("point.algorithm.lr_local").to_pylist()) == {"0.05", "alpha / Q", None}


def test_the_curves_of_a_grid_are_on_a_log_axis_only_for_a_log_scaled_metric(tmp_path, drawn):
    exp = sweep.parse_experiment(TOML.replace('name = "again"', 'name = "again"\nmetric = "test_accuracy"'),
                                 source="tiny.toml", name="tiny")
    with sweep.Store(tmp_path / "s.db") as store:
        fill(store, exp)
    rep.report(tmp_path / "s.db", out=tmp_path / "out", stream=io.StringIO())
    scales = {ax.get_ylabel(): ax.get_yscale() for fig in drawn for ax in fig.axes}
    # an accuracy of 0 (or a negative objective) has no place on a log axis
    assert scales == {r"$\|F_{nat}(x_t)\|^2$": "log", r"final $\|F_{nat}(x_t)\|^2$": "log", "test_accuracy": "linear"}
