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
