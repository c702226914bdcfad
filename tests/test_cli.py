"""The command line: `fedopt list` and `fedopt demo --quick` (the sweep behind `make demo` is tested in test_sweep)."""

import pytest

from fedopt import algorithms, regularizers
from fedopt.cli import main


def test_list_names_every_regularizer(capsys):
    assert main(["list"]) == 0
    printed = capsys.readouterr().out
    assert all(name in printed for name in regularizers.available() + algorithms.available())
    assert "numba" in printed


@pytest.mark.slow
def test_demo_trains_federated_models_and_reproduces_the_lasso(capsys):
    assert main(["demo", "--quick", "--backend", "numba"]) == 0
    printed = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in printed.splitlines() if line.strip().split()[:1] in
            [[name] for name in ("fednmap", "zhang", "fedcanon", "fedavg")]}
    assert set(rows) == {"fednmap", "zhang", "fedcanon", "fedavg"}
    assert all(float(row[3]) > 0.8 for row in rows.values())  # test accuracy on digits
    gap = float(printed.split("max |x - x_sklearn| = ")[1].split(",")[0])
    assert gap < 1e-8
    ours, sklearn = printed.split("support ")[1].splitlines()[0].split(" vs ")
    assert ours == sklearn and ours != "[]"
    assert "fused normal-map step" in printed


def test_unknown_command_exits_with_usage():
    with pytest.raises(SystemExit) as exc:
        main(["sweep-everything"])
    assert exc.value.code == 2


def test_run_a_game_without_a_data_set(tmp_path, capsys):
    out = tmp_path / "history.csv"
    assert main(["run", "--problem", "bilinear_game", "--algorithm", "lippax", "--rounds", "5", "--n-clients", "4",
                 "--set", "algorithm.lr_local=1.0", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "bilinear_game + zero, no data set with 4 clients" in printed
    assert "distance to z* = " in printed and "test accuracy" not in printed  # a game has none
    header, *rows = out.read_text().splitlines()
    columns = header.split(",")
    assert "gap" in columns and [row.split(",")[0] for row in rows] == ["0", "5"]
    first, last = (dict(zip(columns, map(float, row.split(",")), strict=True)) for row in (rows[0], rows[-1]))
    assert last["distance"] < first["distance"]


def test_a_game_with_its_own_regularizer_runs_with_it(tmp_path, capsys):
    out = str(tmp_path / "history.csv")
    assert main(["run", "--problem", "l1_bilinear_game", "--algorithm", "local-dual-extrapolation", "--rounds", "2",
                 "--out", out]) == 0
    assert "l1_bilinear_game + l1," in capsys.readouterr().out
    assert main(["run", "--problem", "l1_bilinear_game", "--algorithm", "lippax", "--rounds", "2", "--out", out]) == 2
    assert "L1BilinearGame's own" in capsys.readouterr().err
    assert main(["run", "--problem", "l1_bilinear_game", "--algorithm", "lippax", "--regularizer", "zero",
                 "--rounds", "2", "--out", out]) == 0


def test_demo_refuses_an_unusable_backend_and_reruns_failed_runs(tmp_path, monkeypatch, capsys):
    from fedopt import _backend, sweep

    if _backend.gpu_available():
        pytest.skip("needs a machine where the gpu backend is unavailable")
    short = sweep.load_experiment("speedup_demo").shortened(rounds=2, seeds=1, values=2)
    monkeypatch.setattr(sweep, "load_experiment", lambda name: short)
    db = tmp_path / "demo.db"
    assert main(["demo", "--backend", "gpu", "--store", str(db), "--workers", "1"]) == 2
    assert "backend = 'gpu'" in capsys.readouterr().err and not db.exists()  # as `fedopt sweep --backend gpu`

    with monkeypatch.context() as patch:  # runs that fail only as they execute: stored failed
        patch.setattr(sweep, "validate", lambda specs: None)
        assert main(["demo", "--backend", "gpu", "--store", str(db), "--workers", "1"]) == 1
    captured = capsys.readouterr()
    assert "demo finished" not in captured.out
    assert "failed of" in captured.err and "`fedopt demo` runs them again" in captured.err
    assert "--retry-failed" not in captured.out + captured.err  # a flag `fedopt demo` does not have

    assert main(["demo", "--store", str(db), "--workers", "1"]) == 0  # `make demo` again: the failed runs rerun
    printed = capsys.readouterr().out
    assert "complete" in printed and "demo finished" in printed


def test_run_refuses_a_data_set_for_a_game(tmp_path, capsys):
    out = tmp_path / "history.csv"
    game = ["--problem", "bilinear_game", "--algorithm", "lippax", "--rounds", "2", "--out", str(out)]
    assert main(["run", *game, "--dataset", "mnist"]) == 2
    assert "--dataset mnist: problem 'bilinear_game' is a synthetic operator without a data set" in \
        capsys.readouterr().err
    assert main(["run", "lippax_k", "--dataset", "digits", "--rounds", "2", "--out", str(out)]) == 2  # a game's file
    assert "--dataset digits: problem 'smooth_game'" in capsys.readouterr().err
    config = tmp_path / "game.toml"
    config.write_text('[run]\nrounds = 2\n[run.problem]\nname = "bilinear_game"\n[run.dataset]\nname = "digits"\n'
                      '[run.algorithm]\nname = "lippax"\n')
    assert main(["run", str(config), "--out", str(out)]) == 2
    assert "synthetic operator without a data set: remove [run.dataset]" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("method", ["scaffold", "scaffnew"])
def test_run_of_a_method_without_a_prox_leaves_out_the_default_runs_penalty(method, tmp_path, capsys):
    """The default run's elastic net is for the methods with a prox: `fedopt run --algorithm scaffold` stopped
    on it, with advice that led to an error in the default run's template."""
    out = tmp_path / "history.csv"
    assert main(["run", "--algorithm", method, "--rounds", "2", "--out", str(out)]) == 0
    assert "zero" in capsys.readouterr().out.split("\n")[0].lower()
    assert main(["run", "--algorithm", method, "--regularizer", "l1", "--rounds", "2", "--out", str(out)]) == 2
    assert "is for smooth problems (regularizer Zero)" in capsys.readouterr().err


def test_run_help_names_every_problem(capsys):
    from fedopt.problems import PROBLEMS

    with pytest.raises(SystemExit):
        main(["run", "--help"])
    printed = " ".join(capsys.readouterr().out.split())
    problem_help = printed.split("--problem PROBLEM ")[1].split("--dataset DATASET")[0]
    assert all(name in problem_help.replace(",", " ").split() for name in PROBLEMS)


def test_data_download_without_a_name_lists_the_downloadable_ones(capsys):
    assert main(["data", "download"]) == 2
    err = capsys.readouterr().err
    assert "needs a name: mnist or fashion_mnist (a9a: by hand, `fedopt data ls` says how)" in err
