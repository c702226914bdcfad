"""``fedopt bench``: the rows it writes, the sweep and startup modes, and the peers it compares with.

Nothing here asserts on timings (the machine is shared): only that the measurements run, have
the documented fields, and are positive and finite, and that the peers compute fedopt's round.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedopt import algorithms, bench
from fedopt.cli import main
from fedopt.regularizers import L1

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from peers import flower_fedavg, numpy_fednmap, torch_fednmap  # noqa: E402

FIELDS = {"family", "name", "shape", "dtype", "backend", "seconds", "work", "unit", "rate", "floor", "floor_rate",
          "ratio", "peers", "kernel_seconds", "plain_seconds"}


@pytest.mark.slow
def test_quick_bench_writes_rows_with_positive_finite_ratios(tmp_path, capsys):
    # Prepare
    out = tmp_path / "bench.json"
    assert main(["bench", "--quick", "--backend", "numba", "--dtype", "float64", "--peers", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    document = json.loads(out.read_text())
    rows = document["rows"]
    assert document["backend"] == "numba" and document["quick"] and document["machine"]["cpu_count"] >= 1
    assert {row["family"] for row in rows} == set(bench.FAMILIES)
    measured = {(row["name"], row["shape"]) for row in rows if row["family"] == "prox"}
    for shape in ("n=1 p=1000", "n=100 p=10", "n=1 p=100000", "n=100 p=1000"):  # both layouts of both quick sizes
        for name in ("l1", "mcp", "scad", "box", "l2ball", "simplex", "l1ball", "group10", "normal-map-step-l1"):
            assert (name, shape) in measured
    for row in rows:  # every prox and gossip row is held to a plain loop checked against it
        if row["family"] in ("prox", "gossip"):
            assert row["kernel_seconds"] > 0 and row["plain_seconds"] > 0, row["name"]
    names = {row["name"] for row in rows}
    for method in bench.METHODS:
        assert f"{method}-logistic-l1" in names and f"{method}-mlp-h32-l1" in names
    shapes = {row["shape"] for row in rows if row["family"] == "round"}
    assert "sweep d=64 n=100 b=8 Q=10" in shapes and "mnist d=784 n=100 b=64 Q=10" in shapes
    for row in rows:
        assert set(row) == FIELDS and row["dtype"] == "float64" and row["backend"] == "numba"
        for key in ("seconds", "work", "rate", "floor_rate", "ratio"):
            assert math.isfinite(row[key]) and row[key] > 0, (row["name"], key)
        assert math.isclose(row["ratio"], row["rate"] / row["floor_rate"])
        assert row["floor"] == ("GEMM" if row["unit"] == "GFLOP/s" else "copy")
        assert row["name"] in printed
    peered = [row for row in rows if row["peers"]]
    assert {row["name"] for row in peered} == {"fednmap-logistic-l1", "fednmap-mlp-h32-l1"}  # float64 FedNMap rounds
    assert all(peer["speedup"] > 0 for row in peered for peer in row["peers"].values())


def test_row_rates_and_format():
    row = bench.Row.make("round", "x", "s", np.float32, "numba", seconds=2e-3, work=4e6, unit="GB/s", floor="copy",
                         floor_rate=4.0)
    assert row.dtype == "float32" and math.isclose(row.rate, 2.0) and math.isclose(row.ratio, 0.5)
    assert "50%" in bench.format_row(row) and "2 ms" in bench.format_row(row)


def test_bench_list_names_the_benchmark_files(capsys):
    assert main(["bench", "--list"]) == 0
    printed = capsys.readouterr().out
    assert "bench_prox_cpu.py" in printed and "bench_peers.py" in printed and "bench_sweep.py" in printed


@pytest.mark.parametrize(("args", "message"), [
    (["--clients", "0"], "argument --clients: must be an integer >= 1, got '0'"),  # not the default n = 100
    (["--clients", "-5"], "argument --clients: must be an integer >= 1, got '-5'"),
    (["--sweep", "--seeds", "0"], "argument --seeds: must be an integer >= 1, got '0'"),
    (["--sweep", "--rounds", "-2"], "argument --rounds: must be an integer >= 1, got '-2'"),
    (["--sweep", "--workers", "1", "0"], "argument --workers: must be an integer >= 1, got '0'"),
    (["--sweep", "--batch-runs", "-3"], "argument --batch-runs: must be an integer >= 0 (0: skip), got '-3'"),
    (["--startup", "--repeats", "0"], "argument --repeats: must be an integer >= 1, got '0'"),
])
def test_bench_rejects_bad_counts_naming_the_option_before_any_work(args, message, capsys, monkeypatch):
    """Any measurement before the check fails the test."""
    from fedopt.sweep import bench as sweep_bench

    def measured(*_args, **_kwargs):
        raise AssertionError("measured before the options were checked")

    for module, name in ((bench, "main"), (bench, "startup_seconds"), (sweep_bench, "bench_sweep"),
                         (sweep_bench, "bench_batch"), (sweep_bench, "sweep_breakdown")):
        monkeypatch.setattr(module, name, measured)
    with pytest.raises(SystemExit) as exited:
        main(["bench", *args])
    assert exited.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("mode", [[], ["--sweep"], ["--startup"]])
def test_bench_refuses_a_json_path_it_cannot_write_before_any_work(mode, tmp_path, capsys, monkeypatch):
    from fedopt.sweep import bench as sweep_bench

    def measured(*_args, **_kwargs):
        raise AssertionError("measured before --json was checked")

    for module, name in ((bench, "main"), (bench, "startup_seconds"), (sweep_bench, "bench_sweep")):
        monkeypatch.setattr(module, name, measured)
    (tmp_path / "a_file").write_text("")
    assert main(["bench", *mode, "--json", str(tmp_path / "a_file" / "bench.json")]) == 2
    assert "--json" in capsys.readouterr().err


def test_bench_clients_replace_n_and_must_be_positive(capsys):
    assert main(["bench", "--clients", "3", "--family", "gossip", "--quick", "--dtype", "float64"]) == 0
    assert "n=3 p=" in capsys.readouterr().out
    with pytest.raises(ValueError, match=r"clients must be integers >= 1 \(None: the shape's\), got \[3, 0\]"):
        bench.Suite("numba", clients=[3, 0])


def test_bench_json_is_strict_json_with_null_for_times_not_measured(tmp_path):
    out = tmp_path / "bench.json"
    assert main(["bench", "--clients", "3", "--family", "gradient", "--quick", "--dtype", "float64",
                 "--json", str(out)]) == 0

    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    rows = json.loads(out.read_text(), parse_constant=refuse)["rows"]
    assert rows and all(row["kernel_seconds"] is None and row["plain_seconds"] is None for row in rows)
    assert all(row["seconds"] > 0 and row["floor_rate"] > 0 for row in rows)


def test_gradients_and_the_gemm_floor_are_timed_in_the_rounds_context(monkeypatch):
    """Every timing of the gradient family, and the GEMM floor whoever asks for it, runs inside
    :func:`fedopt.run.round_context` (BLAS on one thread beside Numba's), as the rounds do."""
    run_module = importlib.import_module("fedopt.run")  # the module: fedopt.run is the function
    real, depth, inside = run_module.round_context, [0], []

    @contextlib.contextmanager
    def counted(backend):
        depth[0] += 1
        try:
            with real(backend):
                yield
        finally:
            depth[0] -= 1

    best = bench.Timer.best

    def recorded(self, fn, calls=None):
        inside.append(depth[0] > 0)
        return best(self, fn, calls)

    monkeypatch.setattr(run_module, "round_context", counted)
    monkeypatch.setattr(bench.Timer, "best", recorded)
    suite = bench.Suite("numba", quick=True, dtypes=["float64"], clients=[3], families=["gradient"])
    assert [row.name for row in suite.run()] == ["logistic", "logistic", "mlp-h32"] and inside and all(inside)
    inside.clear()
    bench.Timer(suite.backend, quick=True).gemm_gflops(3, 4, 5, 6, "float64")  # as the round family asks
    assert inside == [True]


def test_prox_benchmark_reads_the_shared_weights_once(tmp_path):
    """The weighted l1 of bench_prox_cpu.py on 100 rows of 10 reads its 10 weights once (spec 1.3)."""
    out = tmp_path / "prox.json"
    # pytest-benchmark disables itself in an xdist worker, which it reads from these variables
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    subprocess.run([sys.executable, "-m", "pytest", "bench/bench_prox_cpu.py", "--benchmark-enable", "--benchmark-only",
                    "-q", "-p", "no:cacheprovider", "-k", "l1w-p1e3-100x1e1-f64 or l1w-p1e3-f64",
                    f"--benchmark-json={out}"], cwd=ROOT, check=True, capture_output=True, env=env)
    nbytes = {b["name"]: b["extra_info"]["bytes"] for b in json.loads(out.read_text())["benchmarks"]}
    assert nbytes == {"test_prox[l1w-p1e3-f64]": 3 * 1000 * 8, "test_prox[l1w-p1e3-100x1e1-f64]": (2 * 1000 + 10) * 8}


def test_import_seconds_lists_the_heavy_imports():
    seconds = bench.import_seconds()
    assert {"numpy", "fedopt", "numba"} <= set(seconds)
    assert all(value > 0 and math.isfinite(value) for value in seconds.values())


TINY = """
[experiment]
name = "tiny_bench"

[run]
rounds = 30
eval_every = 10
seeds = [0, 1]

[run.dataset]
name = "digits"
n_clients = 4

[run.problem]
name = "softmax"

[run.regularizer]
name = "l1"
lam = 1e-3

[run.algorithm]
name = "fednmap"
local_steps = 2
batch_size = 8

[[grid]]
name = "methods"
"algorithm.name" = ["fednmap", "fedcanon"]
"""


@pytest.mark.slow
def test_sweep_modes_measure_runs_and_split_the_time(tmp_path, capsys, monkeypatch):
    # Prepare: 2 methods x 2 seeds of 30 rounds, shortened to 20 rounds (evaluated 3 times: the rounds,
    # not the evaluations, take most of a run) and 1 seed
    from fedopt.sweep.bench import bench_sweep, shortened, sweep_breakdown

    toml = tmp_path / "tiny.toml"
    toml.write_text(TINY)
    exp = shortened(str(toml), rounds=20, seeds=1)
    assert exp.run["rounds"] == 20 and exp.seeds == [0] and len(exp.expand()) == 2
    # Execute: serial kernels in this process (the breakdown's), so that another test's process on
    # the same cores cannot stall a parallel evaluation and inflate the metrics' share past the run
    from fedopt.kernels.cpu import _jit

    monkeypatch.setattr(_jit, "PARALLEL_MIN_WORK", 1 << 62)
    breakdown = sweep_breakdown(str(toml), rounds=20, seeds=1)
    rows = bench_sweep([1], str(toml), rounds=20, seeds=1)
    on_numpy = bench_sweep([1], str(toml), rounds=2, seeds=1, batches=("auto",), backend="numpy")
    assert breakdown["runs"] == 2 and breakdown["rounds"] == 20
    assert set(breakdown["phases"]) == {"compile", "data", "rounds", "metrics", "store"}
    assert all(value >= 0 for value in breakdown["phases"].values()) and breakdown["phases"]["rounds"] > 0
    assert math.isclose(breakdown["seconds"], sum(breakdown["phases"].values()))
    assert rows[0]["runs"] == 2 and rows[0]["runs_per_second"] > 0
    assert math.isclose(rows[0]["rounds_per_second"], 20 * rows[0]["runs_per_second"])
    assert rows[0]["rounds"] == 20 and rows[0]["total_rounds"] == 40 and breakdown["total_rounds"] == 40
    assert [(row["batch"], row["runs"]) for row in rows] == [("off", 2), ("auto", 2)]
    assert [row["backend"] for row in rows] == ["numba", "numba"] and on_numpy[0]["backend"] == "numpy"
    assert "where the time goes" in capsys.readouterr().out


# TINY's [run] with one seed, every round evaluated, and one grid whose runs set their own rounds
GRID_ROUNDS = TINY.split("[[grid]]")[0].replace('"tiny_bench"', '"grid_rounds_bench"').replace(
    "eval_every = 10", "eval_every = 1").replace("seeds = [0, 1]", "seeds = [0]") + \
    '[[grid]]\nname = "lengths"\nrounds = [2, 6]\n'


def test_sweep_modes_count_the_rounds_that_the_grids_set(tmp_path, capsys):
    # Prepare: the base [run] has 30 rounds; the grid runs one run of 2 rounds and one of 6
    from fedopt.sweep.bench import bench_sweep, sweep_breakdown

    toml = tmp_path / "grid_rounds.toml"
    toml.write_text(GRID_ROUNDS)
    # Execute
    row = bench_sweep([1], str(toml), batches=("off",))[0]
    breakdown = sweep_breakdown(str(toml))
    # Check: 8 rounds in all, 4 a run on average
    assert math.isclose(row["rounds_per_second"], 8 / row["seconds"])
    assert row["runs"] == 2 and row["rounds"] == 4 and row["total_rounds"] == 8
    assert breakdown["runs"] == 2 and breakdown["rounds"] == 4 and breakdown["total_rounds"] == 8
    printed = capsys.readouterr().out
    assert "2 runs of 2 to 6 rounds (mean 4), local executor" in printed
    assert "2 runs of 2 to 6 rounds (mean 4) in this process" in printed


def test_sweep_mode_counts_a_run_of_two_grids_once_in_its_mean_run_time(tmp_path, monkeypatch):
    from fedopt.sweep.bench import bench_sweep
    from fedopt.sweep.store import Store

    listed = []
    members = Store.members

    def twice(self, ref, with_history=True):  # every run listed as a member of two grids
        rows = members(self, ref, with_history)
        listed.append(rows)
        return rows + rows

    monkeypatch.setattr(Store, "members", twice)
    toml = tmp_path / "grid_rounds.toml"
    toml.write_text(GRID_ROUNDS)
    row = bench_sweep([1], str(toml), batches=("off",))[0]
    seconds = [m["run_seconds"] for m in listed[-1]]
    assert len(seconds) == 2 and row["mean_run_seconds"] == pytest.approx(sum(seconds) / 2)


def test_batch_bench_times_the_loop_the_batch_and_the_kernel(capsys):
    from fedopt.sweep.bench import bench_batch

    result = bench_batch(runs=3, rounds=2, rows_per_client=10, repeats=1)
    assert result["runs"] == 3 and min(result[f"{k}_seconds"] for k in ("loop", "batch", "kernel")) > 0
    assert math.isclose(result["batch_over_loop"], result["loop_seconds"] / result["batch_seconds"])
    assert "x the fused kernel's alone" in capsys.readouterr().out


def _fednmap_setup(d=6, n=5, per_client=12, b=3, Q=4):
    problem = bench.logistic_problem(d, n, per_client, "float64", "numba")
    method = algorithms.make("fednmap", local_steps=Q, lr_local=0.1, gamma=4.0, batch_size=b)
    state = method.round(method.init(problem, L1(0.05), np.random.default_rng(1)))  # nonzero corrections
    rows = problem.sample_rows(np.random.default_rng(2), b, steps=Q)
    X, y = problem.dataset.X, 2.0 * problem.dataset.y - 1
    return problem, method, state, rows, X, y


def test_numpy_peer_computes_fedopts_round():
    _problem, method, state, rows, X, y = _fednmap_setup()
    expected = bench.round_on_rows(method, state, rows)
    z_peer, c_peer = numpy_fednmap.fednmap_round(X, y, rows, state.z, list(state.vars["c"]), 0.05, 0.1, 1.0, 4.0)
    np.testing.assert_allclose(z_peer, expected.z, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.array(c_peer), expected.vars["c"], rtol=1e-10, atol=1e-12)
    assert np.abs(expected.z - state.z).max() > 1e-3  # the round moved


def test_torch_peer_computes_fedopts_rounds():
    pytest.importorskip("torch")
    problem, method, state, rows, X, y = _fednmap_setup()
    expected = bench.round_on_rows(method, state, rows).z
    run = torch_fednmap.fednmap_round_builder(X, y, rows, state.z, state.vars["c"], 0.05, 0.1, 1.0, 4.0)
    np.testing.assert_allclose(run(), expected, rtol=1e-10, atol=1e-12)

    fedavg = algorithms.make("fedavg", local_steps=4, lr_local=0.1, batch_size=3)
    start = fedavg.round(fedavg.init(problem, L1(0.05), np.random.default_rng(1)))
    expected = bench.round_on_rows(fedavg, start, rows).x
    run = torch_fednmap.fedavg_round_builder(X, y, rows, start.x, 0.05, 0.1, 1.0)
    np.testing.assert_allclose(run(), expected, rtol=1e-10, atol=1e-12)


def test_mlp_peers_compute_fedopts_round():
    problem = bench.mlp_problem(7, 4, 10, 5, "float64", "numba")
    method = algorithms.make("fednmap", local_steps=3, lr_local=0.2, gamma=4.0, batch_size=3)
    state = method.round(method.init(problem, L1(0.01), np.random.default_rng(1)))
    rows = problem.sample_rows(np.random.default_rng(2), 3, steps=3)
    expected = bench.round_on_rows(method, state, rows).z
    X, y, mlp = problem.dataset.X, problem.dataset.y, (5, bench.CLASSES)
    z_peer, _ = numpy_fednmap.fednmap_round(X, y, rows, state.z, list(state.vars["c"]), 0.01, 0.2, 1.0, 4.0,
                                            lambda A, yb, x: numpy_fednmap.mlp_grad(A, yb, x, *mlp))
    np.testing.assert_allclose(z_peer, expected, rtol=1e-10, atol=1e-12)
    assert np.abs(expected - state.z).max() > 1e-3  # the round moved
    if torch_fednmap.AVAILABLE:
        run = torch_fednmap.fednmap_round_builder(X, y, rows, state.z, state.vars["c"], 0.01, 0.2, 1.0, 4.0, mlp=mlp)
        np.testing.assert_allclose(run(), expected, rtol=1e-10, atol=1e-12)


def test_torch_and_flower_peers_say_when_they_cannot_run():
    if not torch_fednmap.AVAILABLE:
        assert torch_fednmap.fednmap_round_builder(np.ones((2, 2)), np.ones(2), np.zeros((1, 1, 1), int),
                                                   np.zeros(2), np.zeros((1, 2)), 0.1, 0.1, 1.0, 1.0) is None
    if not flower_fedavg.AVAILABLE:
        with pytest.raises(ImportError, match="flwr"):
            flower_fedavg.simulate_fedavg(np.ones((2, 2)), np.ones(2), np.zeros((1, 1, 1, 1), int), np.zeros(2),
                                          0.1, 0.1)
