"""The command line: `fedopt list` and the demo that `make demo` runs."""

import pytest

from fedopt import regularizers
from fedopt.cli import main


def test_list_names_every_regularizer(capsys):
    assert main(["list"]) == 0
    printed = capsys.readouterr().out
    assert all(name in printed for name in regularizers.available())
    assert "numba" in printed


@pytest.mark.slow
def test_demo_reproduces_reference_solutions(capsys):
    assert main(["demo", "--backend", "numba"]) == 0
    printed = capsys.readouterr().out
    gap_line = next(line for line in printed.splitlines() if "relative gap" in line)
    assert float(gap_line.split("relative gap")[1].split(",")[0]) < 1e-8
    ours, sklearn = gap_line.split("support ")[1].split(" vs ")
    assert ours == sklearn and ours != "[]"
    nnls_error = float(printed.split("max |x - scipy nnls| = ")[1].split()[0])
    assert nnls_error < 1e-8
    assert "fused normal-map step" in printed


def test_unknown_command_exits_with_usage():
    with pytest.raises(SystemExit) as exc:
        main(["sweep-everything"])
    assert exc.value.code == 2
