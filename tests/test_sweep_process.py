"""Sweeps as processes: checks before the first run, leases shared by concurrent sweeps, signals,
workers that outlive a killed owner, the Dask connection, and what the summary says."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time

import pytest
from test_sweep import TINY, tiny

from fedopt import sweep
from fedopt.cli import main
from fedopt.sweep import execute
from fedopt.sweep.config import ConfigError
from fedopt.sweep.validate import estimate, validate

#: 24 runs of a few tenths of a second each.
SLOWER = TINY.replace("rounds = 4", "rounds = 60").replace("seeds = [0, 1]", "seeds = [0, 1, 2, 3, 4, 5]")
#: 12 runs, for two sweeps sharing one store.
TWELVE = TINY.replace("rounds = 4", "rounds = 20").replace("seeds = [0, 1]", "seeds = [0, 1, 2]")


def _fail(config, **_):
    return {"status": "failed", "history": None, "error": "Traceback (most recent call last):\nValueError: boom"}


# ------------------------------------------------------------------------------------ validation
@pytest.mark.parametrize(("override", "expected"), [
    ({"algorithm.lr_local": -0.1}, "algorithm.lr_local = -0.1 in 8 of 8 runs: lr_local must be a finite number > 0"),
    ({"dataset.n_clients": 0}, "dataset.n_clients = 0 in 4 of 4 runs: n_clients must be an integer >= 1"),
    ({"dataset.partition": "sroted"}, "dataset.partition = 'sroted' in 8 of 8 runs: scheme='sroted' is unknown"),
    ({"regularizer": {"name": "mcp", "lam": 0.1, "gamma": 2.0}},
     "algorithm.gamma = 4.0 in 8 of 8 runs: gamma=4 is too large for MCP"),
    ({"metric_gamma": 10.0, "algorithm.gamma": 1.0, "regularizer": {"name": "mcp", "lam": 0.1, "gamma": 2.0}},
     "metric_gamma = 10.0 in 8 of 8 runs: metric_gamma=10 is too large"),
    ({"regularizer": {"name": "nuclear", "lam": 0.1, "block": "W1"}},
     "regularizer.block = 'W1' in 8 of 8 runs: block='W1' is not a parameter block of Softmax; choose one of coef"),
    ({"regularizer": {"name": "nuclear", "lam": 0.1, "shape": [8, 8]}},  # no block: the whole vector, 64 x 10
     "regularizer.shape = [8, 8] in 8 of 8 runs: shape=(8, 8) holds 64 entries but the vectors have p=640; put it on "
     "a matrix block of Softmax (coef (10, 64))"),
    ({"regularizer": {"name": "l1", "lam": 0.1, "weights": [1.0, 2.0]}},
     "regularizer.weights = [1.0, 2.0] in 8 of 8 runs: weights has length 2 but the vectors have p=640"),
])
def test_bad_values_are_refused_before_any_run_with_their_key_and_count(override, expected):
    with pytest.raises(ConfigError) as err:
        validate(tiny(**override).expand())
    assert str(err.value).startswith(expected), str(err.value)
    assert "no run was started" in str(err.value)


def test_every_problem_of_a_grid_is_listed_once_with_its_share_of_the_runs():
    specs = tiny(**{"algorithm.lr_local": -0.1}).expand() + tiny(**{"dataset.n_clients": 0}).expand()
    with pytest.raises(ConfigError) as err:
        validate(specs)
    lines = str(err.value).splitlines()
    assert lines[0].startswith("2 problems would make runs fail")
    assert "algorithm.lr_local = -0.1 in 8 of 12 runs" in lines[1]
    assert "dataset.n_clients = 0 in 4 of 12 runs" in lines[2]


def test_missing_mnist_files_name_the_folder_and_how_to_get_them(tmp_path):
    exp = tiny(**{"dataset": {"name": "mnist", "n_clients": 4, "path": str(tmp_path / "mnist")}})
    with pytest.raises(ConfigError) as err:
        validate(exp.expand())
    message = str(err.value)
    assert message.startswith(f"dataset.path = '{tmp_path / 'mnist'}' in 4 of 4 runs: FileNotFoundError")
    assert f"missing from {tmp_path / 'mnist'}" in message and "download=True" in message


def test_each_distinct_table_is_checked_once(monkeypatch):
    from fedopt import algorithms

    calls = []
    make = algorithms.make
    monkeypatch.setattr(algorithms, "make", lambda name, **kw: calls.append(kw) or make(name, **kw))
    specs = tiny(seeds=list(range(50))).expand()
    validate(specs)
    assert len(specs) == 200 and len(calls) == 2  # local_steps 1 and 2


def test_the_command_refuses_a_bad_grid_without_touching_the_store(tmp_path, capsys):
    toml, db = tmp_path / "tiny.toml", tmp_path / "s.db"
    toml.write_text(TINY)
    assert main(["sweep", str(toml), "--store", str(db), "--set", "algorithm.lr_local=-0.1"]) == 2
    assert "algorithm.lr_local = -0.1 in 8 of 8 runs" in capsys.readouterr().err
    assert not db.exists()


def test_estimate_counts_what_is_stored_and_times_the_rest(tmp_path):
    exp = tiny()
    specs = exp.expand()
    fresh = estimate(specs, None, workers=2)
    assert (fresh["runs"], fresh["distinct"], fresh["stored"], fresh["to_run"]) == (8, 8, 0, 8)
    assert fresh["timed"] == 2 and fresh["seconds"] > 0
    assert "8 to run; " in fresh["text"] and " per run, timed on 2 short runs" in fresh["text"]
    with sweep.Store(tmp_path / "s.db") as store:
        sweep.run_sweep(tiny(seeds=[0]), store, executor="serial")
        store.put(specs[1].key, specs[1].config, _fail(None))
        before = store.statuses()
        partly = estimate(specs, store, workers=1)
        retry = estimate(specs, store, workers=1, retry_failed=True)
        assert store.statuses() == before
    assert (partly["stored"], partly["failed_stored"], partly["to_run"]) == (5, 1, 3)
    assert "1 of them failed; --retry-failed runs them again" in partly["text"]
    assert (retry["stored"], retry["to_run"]) == (4, 4)


# ---------------------------------------------------------------------------------------- summary
def test_the_summary_says_complete_only_when_every_run_is_done(tmp_path):
    text = TINY.replace('"dataset.n_clients" = [4, 8]', '"dataset.n_clients" = [4, 5000]')
    text = text.replace('"algorithm.local_steps" = [1, 2]', '"algorithm.lr_local" = ["1/Q", 1e300]')
    with sweep.Store(tmp_path / "s.db") as store:
        good = sweep.run_sweep(tiny(seeds=[0]), store, executor="serial")
        assert good.ok and str(good).endswith("complete") and good.counts["done"] == 4
        bad = sweep.run_sweep(tiny(text, seeds=[0]), store, executor="serial")
        assert not bad.ok and bad.counts == {"done": 1, "diverged": 1, "failed": 2, "missing": 0}
        assert "finished with 2 failed, 1 diverged of 4 runs; first error: " in str(bad)
        assert "complete" not in str(bad) and "5000" in bad.failed_errors[0]
        again = sweep.run_sweep(tiny(text, seeds=[0]), store, executor="serial")
        assert again.executed == 0 and not again.ok and "--retry-failed" in str(again)


def test_a_sweep_whose_runs_fail_exits_non_zero(tmp_path, monkeypatch, capsys):
    toml = tmp_path / "tiny.toml"
    toml.write_text(TINY)
    monkeypatch.setattr(execute, "execute_run", _fail)
    monkeypatch.setattr(execute, "execute_batch", lambda configs, **_: [_fail(c) for c in configs])
    assert main(["sweep", str(toml), "--store", str(tmp_path / "s.db"), "--executor", "serial"]) == 1
    out = capsys.readouterr().out
    assert "finished with 8 failed of 8 runs; first error: ValueError: boom" in out


@pytest.mark.parametrize("workers", [0, -1, 1.5, True])
def test_workers_below_one_are_an_error(workers, tmp_path):
    with sweep.Store(tmp_path / "s.db") as store, pytest.raises(ValueError) as err:
        sweep.run_sweep(tiny(), store, workers=workers)
    assert str(err.value) == f"workers must be >= 1 (got {workers!r}); omit --workers to use every core"


# ----------------------------------------------------------------------------------------- leases
def test_a_stale_claim_is_taken_over_and_a_live_one_waited_for(tmp_path):
    exp = tiny(seeds=[0])
    keys = [s.key for s in exp.expand()]
    with sweep.Store(tmp_path / "s.db") as store:
        assert store.claim(keys[:1], "dead-host:1:0", lease=-1) == keys[:1]  # expired at once
        assert store.claim(keys[1:2], "slow-host:2:0", lease=2.0) == keys[1:2]
        start = time.monotonic()
        summary = sweep.run_sweep(exp, store, executor="serial", lease=5.0)
        assert time.monotonic() - start >= 1.5  # it waited for the live lease to expire
        assert summary.executed == 4 and summary.ok and summary.by_others == 0
        assert store._db.execute("SELECT COUNT(*) FROM claims").fetchone()[0] == 0


def test_a_run_finished_by_another_sweep_is_counted_as_theirs(tmp_path):
    exp = tiny(seeds=[0])
    specs = exp.expand()
    with sweep.Store(tmp_path / "s.db") as store:
        store.claim([specs[-1].key], "other-host:3:0", lease=30.0)

        def other_sweep_finishes(spec, record):  # meanwhile, the other sweep stores its run
            if store.run(specs[-1].key) is None:
                store.put(specs[-1].key, specs[-1].config, record, owner="other-host:3:0")

        summary = sweep.run_sweep(exp, store, executor="serial", on_result=other_sweep_finishes)
    assert (summary.executed, summary.by_others, summary.counts["done"]) == (3, 1, 4)
    assert "3 executed (3 done), 1 by other sweeps on this store" in str(summary)


def test_a_batch_that_falls_back_to_runs_alone_still_renews_the_leases(monkeypatch):
    """The serial executor renews its leases through the callback; the runs of a failed batch, run
    alone one after the other, went without it (a failing batch of 64 long runs outlived its lease)."""
    import fedopt

    def broken(*args, **kwargs):
        raise RuntimeError("the batch fails as a whole")

    monkeypatch.setattr(fedopt, "run_batch", broken)
    calls = []
    records = execute.execute_batch([s.config for s in tiny(seeds=[0, 1]).expand()[:2]],
                                    callback=lambda state, row: calls.append(row))
    assert [r["status"] for r in records] == ["done", "done"] and len(calls) >= 2


def test_the_serial_executor_renews_its_leases_before_each_batch(tmp_path, monkeypatch):
    """Set-up and the warm-up's compiling come before the first evaluation, the first renewal: each
    batch starts on a whole lease, not on what is left of one renewed up to a third of a lease ago."""
    with sweep.Store(tmp_path / "s.db") as store:
        renewals = []
        renew = store.renew
        monkeypatch.setattr(store, "renew", lambda *a, **k: renewals.append(a) or renew(*a, **k))
        summary = sweep.run_sweep(tiny(), store, executor="serial", lease=600.0, progress=False)
    assert summary.executed == 8 and len(renewals) == 4  # 4 batches of 2 seeds


_SHARED = """
import json, sys
from fedopt import sweep
exp = sweep.parse_experiment(open(sys.argv[1]).read(), source=sys.argv[1], name="tiny")
keys = []
with sweep.Store(sys.argv[2]) as store:
    summary = sweep.run_sweep(exp, store, executor="serial", progress=False,
                              on_result=lambda spec, record: keys.append(spec.key))
print(json.dumps({"keys": keys, "ok": summary.ok, "by_others": summary.by_others, "done": summary.counts["done"]}))
"""


@pytest.mark.slow
def test_two_sweeps_on_one_store_run_every_run_once(tmp_path):
    toml, db = tmp_path / "twelve.toml", tmp_path / "s.db"
    toml.write_text(TWELVE)
    sweep.Store(db).close()
    procs = [subprocess.Popen([sys.executable, "-c", _SHARED, str(toml), str(db)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for _ in range(2)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()
        results.append(json.loads(out.decode().strip().splitlines()[-1]))
    executed = results[0]["keys"] + results[1]["keys"]
    expected = {s.key for s in tiny(TWELVE).expand()}
    assert sorted(executed) == sorted(expected)  # every run once, by one of them
    assert all(r["ok"] and r["done"] == 12 for r in results)
    assert results[0]["by_others"] + results[1]["by_others"] <= 12


# ---------------------------------------------------------------------------------------- signals
def test_sigterm_is_handled_like_ctrl_c_and_keeps_whole_rows(tmp_path, monkeypatch):
    exp = tiny(seeds=[0, 1, 2, 3])  # serial batches of 4 runs (the seeds of a grid point)
    with sweep.Store(tmp_path / "s.db") as store:
        put = store.put

        def put_then_terminated(*args, **kwargs):  # the signal arrives while the row is being written
            os.kill(os.getpid(), signal.SIGTERM)
            put(*args, **kwargs)

        monkeypatch.setattr(store, "put", put_then_terminated)
        before = signal.getsignal(signal.SIGTERM)
        summary = sweep.run_sweep(exp, store, executor="serial")
        assert signal.getsignal(signal.SIGTERM) is before
        assert summary.interrupted and summary.signal == "SIGTERM" and not summary.ok
        # the first batch came back and was stored whole, row by row, before it stopped (the signal
        # used to fire after the first row and drop the batch's other runs)
        assert summary.executed == 4 and store.count() == 4
        assert "interrupted by SIGTERM" in str(summary)
        assert store._db.execute("SELECT COUNT(*) FROM claims").fetchone()[0] == 0


def _stored(db) -> int:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as con:
            return con.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    except sqlite3.OperationalError:
        return 0


def _family(sid: int) -> set[int]:
    """The live (not zombie) processes started under the sweep ``sid``: those with its Unix sid (Linux)."""
    pids = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    fields = handle.read().rpartition(")")[2].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
                pids.add(int(entry))
    return pids


def _start_sweep(tmp_path):
    toml, db = tmp_path / "slower.toml", tmp_path / "s.db"
    toml.write_text(SLOWER)
    proc = subprocess.Popen([sys.executable, "-m", "fedopt", "sweep", str(toml), "--store", str(db), "--workers", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 120
    while _stored(db) < 1:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the sweep stored no run in time"
        time.sleep(0.05)
    return proc, db


def _gone_within(sid, seconds) -> set[int]:
    deadline = time.monotonic() + seconds
    while _family(sid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return _family(sid)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigterm_exits_143_with_the_store_intact_and_no_process_left(tmp_path):
    proc, db = _start_sweep(tmp_path)
    try:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        left = _gone_within(proc.pid, 10)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 143, err.decode()
    assert b"interrupted by SIGTERM" in out and b"Traceback" not in err
    assert not left
    with sqlite3.connect(db) as con:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert con.execute("SELECT COUNT(*) FROM claims").fetchone()[0] == 0
        rows = con.execute("SELECT status, history FROM runs").fetchall()
    assert rows and all(status == "done" and json.loads(history)["round"][-1] == 60 for status, history in rows)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_forkserver_and_resource_tracker_exit_after_sigkill_of_the_sweep(tmp_path):
    proc, _ = _start_sweep(tmp_path)
    try:
        family = _family(proc.pid)
        assert len(family) >= 4  # the sweep, the forkserver, the resource tracker, the workers
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        left = _gone_within(proc.pid, 10)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert not left, f"still alive 10 s after SIGKILL of the sweep: {sorted(left)}"


# ------------------------------------------------------------------------------------------- dask
def test_an_unreachable_scheduler_fails_fast_naming_its_address(tmp_path):
    pytest.importorskip("distributed", reason="the Dask executor needs dask[distributed]")
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{probe.getsockname()[1]}"
    start = time.monotonic()
    with sweep.Store(tmp_path / "s.db") as store, pytest.raises(RuntimeError) as err:
        sweep.run_sweep(tiny(), store, executor="dask", scheduler=address)
    assert time.monotonic() - start < 15
    assert f"cannot reach the Dask scheduler at {address}" in str(err.value)


def test_a_worker_whose_script_imported_numba_limits_its_threads_and_still_compiles():
    """Pool workers import the owner's ``__main__`` before their set-up; when that script imports
    numba at its top, the set-up limits the threads without changing NUMBA_NUM_THREADS: Numba
    refuses that change at every compile once its threads run, and every run of such a sweep failed
    on a cold cache."""
    code = ("import numba\n"
            "from fedopt.sweep.runners import _worker_init\n"
            "_worker_init(1)\n"
            "assert numba.njit(lambda x: x + 1)(1) == 2\n"  # a compile after the threads started
            "print(numba.get_num_threads())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if k != "NUMBA_NUM_THREADS"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1"]
