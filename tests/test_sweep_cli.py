"""The command line of sweeps and runs: errors that name their origin, help texts, names, grid expansion."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from test_sweep import TINY, tiny

from fedopt import sweep
from fedopt.cli import build_parser, main
from fedopt.sweep import config as config_module


def test_invalid_toml_cites_the_line_that_opens_the_unclosed_array():
    text = TINY.replace("seeds = [0, 1]", "seeds = [0, 1")
    opened = text.splitlines().index("seeds = [0, 1") + 1
    with pytest.raises(sweep.ConfigError) as err:
        sweep.parse_experiment(text, source="tiny.toml")
    assert f"tiny.toml:{opened}:" in str(err.value) and "seeds is never closed" in str(err.value)


def test_set_errors_name_the_command_line_not_a_line_of_the_file():
    for key, value, expected in (("algorithm.lr_local", "x_unknown", "--set algorithm.lr_local: "),
                                 ("algorithm.batch_size", 2.5, "--set algorithm.batch_size: "),
                                 ("rounds", -1, "--set rounds: "),
                                 ("algorithm.name", ["fednmap"], "--set algorithm.name: algorithm ['fednmap'] is "
                                                                 "unknown")):
        with pytest.raises(sweep.ConfigError) as err:
            tiny(**{key: value}).expand()
        assert str(err.value).startswith(expected), str(err.value)
        assert "tiny.toml" not in str(err.value)


def test_run_flags_are_named_in_errors(capsys):
    assert main(["run", "--algorithm", "no-such-method", "--rounds", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedopt run: --algorithm: algorithm 'no-such-method' is unknown")


def test_algorithm_names_ignore_case_like_regularizer_names():
    exp = tiny(**{"algorithm.name": "FedNMap", "regularizer.name": "ElasticNet"})
    config = exp.expand()[0].config
    assert config["algorithm"]["name"] == "fednmap" and config["regularizer"]["name"] == "elasticnet"
    assert exp.expand()[0].key == tiny().expand()[0].key
    replaced = tiny().override({"algorithm": {"name": "Depositum_No_Tracking"}})
    assert replaced.expand()[0].config["algorithm"]["name"] == "depositum-no-tracking"
    spelled = tiny(**{"regularizer": {"name": "Elastic_Net", "l1": 1e-3, "l2": 2e-2}})  # "_" and "-" do not matter
    assert spelled.expand()[0].key == tiny().expand()[0].key


def test_a_reader_that_leaves_stops_the_command_quietly():
    read, write = os.pipe()
    os.close(read)  # the reader has left, as `head -1` does after its line
    try:
        command = subprocess.run([sys.executable, "-m", "fedopt", "list"], stdout=write, stderr=subprocess.PIPE)
    finally:
        os.close(write)
    assert command.stderr == b"" and command.returncode == 141  # 128 + SIGPIPE, like a pipe writer killed by it


def test_run_lowers_a_file_gamma_exactly_at_the_regularizers_limit(tmp_path, capsys):
    """gamma = 49 with MCP's gamma = 49: 49 * (1 / 49) rounds below 1, and the step is at the limit all the same."""
    path = tmp_path / "g49.toml"
    path.write_text('[run]\nrounds = 1\n[run.dataset]\nname = "digits"\nn_clients = 4\n[run.problem]\n'
                    'name = "softmax"\n[run.algorithm]\nname = "fednmap"\ngamma = 49.0\n')
    code = main(["run", str(path), "--regularizer", "mcp", "--set", "regularizer.gamma=49",
                 "--out", str(tmp_path / "h.csv")])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert "gamma = 24.5 (= 1 / (2 rho))" in printed.out


def test_run_with_a_weakly_convex_regularizer_takes_its_defaults_and_says_they_prune_everything(tmp_path, capsys):
    code = main(["run", "--regularizer", "mcp", "--rounds", "2", "--out", str(tmp_path / "h.csv")])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert "gamma = 1.5 (= 1 / (2 rho))" in printed.out
    assert "status done" in printed.out
    assert "every weight is 0: lam = 1 prunes them all" in printed.out  # MCP's default strength, on the digits
    code = main(["run", "--regularizer", "mcp", "--rounds", "2", "--set", "regularizer.lam=0.001",
                 "--out", str(tmp_path / "h.csv")])
    printed = capsys.readouterr()
    assert code == 0 and "nonzeros = 0," not in printed.out and "every weight is 0" not in printed.out


def test_a_failed_run_prints_one_error_and_no_traceback(tmp_path, capsys, monkeypatch):
    from fedopt.sweep import execute

    def broken(config, **_):
        return {"status": "failed", "error": "Traceback (most recent call last):\n  ...\nValueError: boom",
                "history": None}

    monkeypatch.setattr(execute, "execute_run", broken)
    assert main(["run", "--rounds", "1", "--out", str(tmp_path / "h.csv")]) == 1
    err = capsys.readouterr().err
    assert err.strip() == "fedopt run: the run failed: ValueError: boom"


@pytest.mark.parametrize("flag", ["--out", "--store"])
def test_an_unwritable_output_is_refused_before_the_run(flag, tmp_path, capsys, monkeypatch):
    from fedopt.sweep import execute

    ran = []

    def failing(config, **_):
        ran.append(config)
        return {"status": "failed", "error": "ValueError: boom", "history": None}

    monkeypatch.setattr(execute, "execute_run", failing)
    (tmp_path / "a_file").write_text("")
    target = tmp_path / "a_file" / "inside"  # a folder that cannot be made, even by root
    assert main(["run", "--rounds", "1", flag, str(target)]) == 2
    err = capsys.readouterr().err
    assert f"{flag} '{target}' cannot be written" in err and not ran
    fresh = tmp_path / "new" / "h.csv"  # a writable path is left as it was until the run writes it
    assert main(["run", "--rounds", "1", "--out", str(fresh)]) == 1  # (the stubbed run fails)
    assert ran and (tmp_path / "new").is_dir() and not fresh.exists()


@pytest.mark.parametrize(("command", "flags"), [("run", ("--n-clients", "--rounds", "--seed")),
                                                ("demo", ("--store", "--workers"))])
def test_every_flag_has_help(command, flags):
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    helps = {flag: action.help for action in sub._actions for flag in action.option_strings}
    assert all(helps[flag] for flag in flags), helps


@pytest.mark.parametrize("workers", ["0", "-2", "two"])
def test_workers_below_one_are_refused(workers, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["sweep", "speedup_demo", "--workers", workers])
    assert exc.value.code == 2
    assert "--workers: must be an integer >= 1" in capsys.readouterr().err


def test_a_grid_point_is_resolved_once_for_all_its_seeds(monkeypatch):
    exp = tiny(seeds=list(range(7)))
    calls = []
    resolve = config_module.Experiment._resolve
    monkeypatch.setattr(config_module.Experiment, "_resolve",
                        lambda self, base, grid: calls.append(1) or resolve(self, base, grid))
    specs = exp.expand()
    assert len(specs) == 4 * 7 and len(calls) == 4
    assert [s.labels["seed"] for s in specs[:7]] == list(range(7))
    assert len({s.key for s in specs}) == len(specs)


def test_overrides_are_recorded_for_the_report():
    exp = tiny(rounds=3).shortened(rounds=2, seeds=1)  # what --set fixed stays, and --quick records what it changed
    assert exp.overrides["rounds"] == 3 and exp.overrides["quick"] == {"seeds": 1, "values per axis": 2}
    assert tiny().shortened(rounds=2, seeds=1).overrides["quick"]["rounds"] == 2
    assert tiny().overrides == {}


def test_quick_keeps_what_set_fixes():
    exp = tiny(**{"eval_every": 3, "divergence.stall_factor": 0.5}).shortened(rounds=2, seeds=1)
    config = exp.expand()[0].config
    assert config["rounds"] == 2 and config["eval_every"] == 3 and config["divergence"]["stall_factor"] == 0.5
    assert exp.overrides["quick"] == {"rounds": 2, "seeds": 1, "values per axis": 2}


def test_quick_sweep_stores_the_rounds_and_seeds_its_overrides_record(tmp_path, capsys):
    toml, db = tmp_path / "tiny.toml", tmp_path / "s.db"
    toml.write_text(TINY)
    assert main(["sweep", str(toml), "--store", str(db), "--executor", "serial", "--quick",
                 "--set", "rounds=3", "--set", "seeds=[1, 2]"]) == 0
    with sweep.Store(db, readonly=True) as store:
        (stored,) = store.sweeps()
        runs = store.members(stored["id"], with_history=False)
    assert stored["overrides"] == {"rounds": 3, "seeds": [1, 2], "quick": {"values per axis": 2}}
    assert {r["config"]["rounds"] for r in runs} == {3} and {r["config"]["seed"] for r in runs} == {1, 2}
    assert len(runs) == 8 and {r["status"] for r in runs} == {"done"}


@pytest.mark.parametrize(("flags", "workers", "unused"), [
    (["--executor", "serial"], "1 worker ", False),
    (["--executor", "serial", "--workers", "3"], "1 worker ", True),
    (["--workers", "3"], "3 workers ", False),
])
def test_dry_run_estimates_with_the_workers_of_the_executor(flags, workers, unused, tmp_path, capsys, monkeypatch):
    import importlib

    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.setattr(importlib.import_module("fedopt.sweep.validate"), "_time_one",
                        lambda config, workers: (0.01, 0.001, 0.5))  # (the calibration runs' timings)
    toml = tmp_path / "tiny.toml"
    toml.write_text(TINY)
    assert main(["sweep", str(toml), "--store", str(tmp_path / "s.db"), "--dry-run", *flags]) == 0
    out = capsys.readouterr().out
    assert f" with {workers}(" in out
    assert ("executor serial (one batch at a time: --workers 3 is not used)" in out) == unused
    assert not (tmp_path / "s.db").exists()


def test_dry_run_takes_an_empty_store_file_as_an_empty_store(tmp_path, capsys):
    toml, db = tmp_path / "tiny.toml", tmp_path / "s.db"
    toml.write_text(TINY)
    db.touch()  # what the sweep itself fills
    assert main(["sweep", str(toml), "--store", str(db), "--dry-run"]) == 0
    assert "8 runs (8 distinct): 0 already stored, 8 to run" in capsys.readouterr().out
    assert db.read_bytes() == b""


@pytest.mark.parametrize(("flags", "message"), [
    (["--lease", "0"], "lease must be a number of seconds > 0, got 0.0"),
    (["--lease", "nan"], "lease must be a number of seconds > 0, got nan"),
    (["--scheduler", "tcp://127.0.0.1:1"], "--scheduler needs --executor dask"),
])
def test_option_errors_leave_no_store_behind(flags, message, tmp_path, capsys):
    toml, db = tmp_path / "tiny.toml", tmp_path / "s.db"
    toml.write_text(TINY)
    assert main(["sweep", str(toml), "--store", str(db), *flags]) == 2
    assert capsys.readouterr().err == f"fedopt sweep: error: {message}\n"
    assert not db.exists()


@pytest.mark.parametrize(("content", "message"), [("text", "is not a readable SQLite store"),
                                                   ("sqlite", "is a SQLite file but not a fedopt store")])
def test_run_refuses_a_store_file_that_is_not_a_store_before_the_run(content, message, tmp_path, capsys, monkeypatch):
    import sqlite3

    from fedopt.sweep import execute

    ran = []

    def failing(config, **_):
        ran.append(config)
        return {"status": "failed", "error": "ValueError: boom", "history": None}

    monkeypatch.setattr(execute, "execute_run", failing)
    target = tmp_path / "s.db"
    if content == "text":
        target.write_text("hello\n")
    else:
        with sqlite3.connect(target) as con:
            con.execute("CREATE TABLE other (x)")
    before = target.read_bytes()
    assert main(["run", "--rounds", "1", "--store", str(target), "--out", str(tmp_path / "h.csv")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fedopt run: error: --store: {target} {message}") and not ran
    assert target.read_bytes() == before and not (tmp_path / "h.csv").exists()


def test_run_stores_in_an_empty_store_file(tmp_path, capsys):
    target = tmp_path / "s.db"
    target.touch()
    assert main(["run", "--rounds", "1", "--store", str(target), "--out", str(tmp_path / "h.csv")]) == 0
    with sweep.Store(target, readonly=True) as store:
        assert store.count("done") == 1


def test_run_stores_a_failed_run_with_its_traceback(tmp_path, capsys, monkeypatch):
    """fedopt run --store returned 1 before storing a run that raised: neither it nor its sweep was kept."""
    import fedopt

    def broken(*args, **kwargs):
        raise RuntimeError("the method broke")

    monkeypatch.setattr(fedopt, "run", broken)
    target = tmp_path / "s.db"
    assert main(["run", "--rounds", "1", "--store", str(target), "--out", str(tmp_path / "h.csv")]) == 1
    assert "the run failed: RuntimeError: the method broke" in capsys.readouterr().err
    with sweep.Store(target, readonly=True) as store:
        assert store.count("failed") == 1
        (member,) = store.members(store.sweeps()[0]["id"], with_history=False)
        assert "RuntimeError: the method broke" in member["error"]


def test_store_ls_refuses_a_sweep_and_points_to_show(tmp_path, capsys):
    target = tmp_path / "s.db"
    assert main(["run", "--rounds", "1", "--store", str(target), "--out", str(tmp_path / "h.csv")]) == 0
    capsys.readouterr()
    assert main(["store", "ls", str(target), "no-such-sweep"]) == 2
    assert f"`fedopt store show {target} no-such-sweep` shows one" in capsys.readouterr().err


def test_a_store_switching_to_wal_while_another_process_does_waits_for_it(tmp_path):
    """Two processes opening a new store both switch it to WAL mode, and SQLite answers one of them
    'locked' at once, not after its busy timeout: that one exited 2 ('stayed locked') within 2 ms."""
    import sqlite3

    class Busy:  # the connection of the process that lost the race, for its first two tries
        def __init__(self, db):
            self.db, self.tries = db, 0

        def execute(self, statement, *args):
            if statement.startswith("PRAGMA journal_mode"):
                self.tries += 1
                if self.tries <= 2:
                    raise sqlite3.OperationalError("database is locked")
            return self.db.execute(statement, *args)

    with sweep.Store(tmp_path / "s.db") as store:
        real, store._db = store._db, Busy(store._db)
        store._wal(timeout=5.0)
        assert store._db.tries == 3
        with pytest.raises(sqlite3.OperationalError, match="locked"):  # and gives up after its timeout
            store._db.tries = -10**6
            store._wal(timeout=0.05)
        store._db = real


def test_divergence_rule_in_the_experiment_file_reaches_the_run():
    default = tiny().expand()[0]
    assert "divergence" not in default.config  # the default rule leaves the stored keys as they were
    assert tiny(divergence=True).expand()[0].key == default.key
    off = tiny(divergence=False).expand()[0]
    assert off.config["divergence"] is False and off.key != default.key
    tight = tiny(**{"divergence.objective_factor": 2.0}).expand()[0]
    assert tight.config["divergence"]["objective_factor"] == 2.0
    with pytest.raises(sweep.ConfigError, match=r"--set divergence\.patience: .*patience must be an integer"):
        tiny(**{"divergence.patience": 0}).expand()


def test_run_shows_progress_on_a_terminal(tmp_path, capsys, monkeypatch):
    import sys

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(["run", "--rounds", "100", "--set", "eval_every=50", "--out", str(tmp_path / "h.csv")]) == 0
    assert "fednmap: round 100/100" in capsys.readouterr().err


def test_run_records_the_seed_it_keeps_as_an_override(tmp_path, capsys):
    path = tmp_path / "one.toml"
    path.write_text(TINY.split("[[grid]]")[0].replace("rounds = 4", "rounds = 1"))  # seeds = [0, 1]
    assert main(["run", str(path), "--store", str(tmp_path / "s.db"), "--out", str(tmp_path / "h.csv")]) == 0
    with sweep.Store(tmp_path / "s.db", readonly=True) as store:
        (stored,) = store.sweeps()
    assert stored["overrides"] == {"seeds": [0]} and stored["runs"] == 1
