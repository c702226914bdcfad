"""Crash safety with a real SIGKILL, Ctrl-C, and the Dask executor on a LocalCluster."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sqlite3
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from test_sweep import TINY, finals, tiny

from fedopt import sweep

#: 24 runs of a few tenths of a second each.
SLOWER = TINY.replace("rounds = 4", "rounds = 60").replace("seeds = [0, 1]", "seeds = [0, 1, 2, 3, 4, 5]")


def _stored(db) -> dict:
    if not os.path.exists(db):
        return {}
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as con:
            return dict(con.execute("SELECT key, finished FROM runs WHERE status = 'done'").fetchall())
    except sqlite3.OperationalError:  # the tables are not created yet
        return {}


def _sweep_process(toml, db, *extra):
    """The sweep in a process of its own, with Ctrl-C at its default action as in a terminal:
    a process started in the background (``make test &``) would otherwise inherit SIGINT ignored,
    and the sweep rightly leaves an ignored Ctrl-C alone."""
    return subprocess.Popen([sys.executable, "-m", "fedopt", "sweep", str(toml), "--store", str(db), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _stop_group(proc):
    """Stop what is left of the process group this test started (orphaned pool workers)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def _wait_for_runs(proc, db, count, timeout=120):
    deadline = time.monotonic() + timeout
    while len(_stored(db)) < count:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the sweep stored too few runs in time"
        time.sleep(0.05)


@pytest.mark.slow
def test_sigkill_loses_no_finished_run_and_the_next_sweep_completes(tmp_path):
    toml, db = tmp_path / "slower.toml", tmp_path / "s.db"
    toml.write_text(SLOWER)
    total = len({s.key for s in tiny(SLOWER).expand()})
    proc = _sweep_process(toml, db, "--executor", "local", "--workers", "2")
    try:
        _wait_for_runs(proc, db, 3)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        _stop_group(proc)
    assert proc.returncode == -signal.SIGKILL
    before = _stored(db)
    assert 3 <= len(before) < total, "kill the sweep in the middle"
    with sweep.Store(db) as store:
        assert store._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        summary = sweep.run_sweep(tiny(SLOWER), store, executor="serial")
    after = _stored(db)
    assert summary.executed == total - len(before) and summary.skipped == len(before)
    assert len(after) == total
    assert all(after[key] == finished for key, finished in before.items())  # nothing finished was redone


@pytest.mark.slow
def test_ctrl_c_stops_cleanly_and_keeps_what_finished(tmp_path):
    toml, db = tmp_path / "slower.toml", tmp_path / "s.db"
    toml.write_text(SLOWER)
    proc = _sweep_process(toml, db, "--executor", "local", "--workers", "2")
    try:
        _wait_for_runs(proc, db, 2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        _stop_group(proc)
    assert proc.returncode == 130, err.decode()
    assert b"interrupted" in out and b"Traceback" not in err
    kept = _stored(db)
    with sweep.Store(db) as store:
        summary = sweep.run_sweep(tiny(SLOWER), store, executor="serial")
    assert summary.skipped == len(kept) and store is not None


def _dies_on_one_run(mark, configs, **_):
    """A batch of fake runs in a pool worker whose process is killed (as by the OOM killer) on the run
    with seed 1 and 8 clients of 2 local steps: every time, or only the first time when ``mark``
    names a file to leave behind."""
    time.sleep(0.2)  # the other worker's batch is in flight when this one dies
    for config in configs:  # the second batch of the sweep: in flight from the start, with others queued
        killer = (config["seed"], config["dataset"]["n_clients"], config["algorithm"]["local_steps"]) == (1, 8, 2)
        if killer and (mark is None or not os.path.exists(mark)):
            if mark is not None:
                open(mark, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
    return [{"status": "done", "history": None, "error": None} for _ in configs]


@pytest.mark.parametrize("every_time", [True, False], ids=["always", "once"])
def test_a_dead_pool_worker_fails_its_own_run_and_the_sweep_goes_on(every_time, tmp_path, monkeypatch):
    """A worker's death breaks the whole pool and fails every batch in flight: those run again in a
    fresh pool, and the run that kills its worker is stored as failed once it does so alone."""
    from fedopt.sweep import execute

    mark = None if every_time else str(tmp_path / "died")
    monkeypatch.setattr(execute, "execute_batch", functools.partial(_dies_on_one_run, mark))
    keys = []
    with sweep.Store(tmp_path / "s.db") as store:
        summary = sweep.run_sweep(tiny(), store, executor="local", workers=2, batch="off", progress=False,
                                  on_result=lambda spec, record: keys.append(spec.key))
        assert store._db.execute("SELECT COUNT(*) FROM claims").fetchone()[0] == 0
        errors = [store.run(key)["error"] for key in keys if store.run(key)["status"] == "failed"]
    assert not summary.interrupted and summary.executed == 8 and sorted(keys) == sorted(set(keys))
    if every_time:
        assert summary.counts == {"done": 7, "diverged": 0, "failed": 1, "missing": 0}
        assert len(errors) == 1
        assert "the worker process running this batch of 1 run(s) died (killed by SIGKILL)" in errors[0]
    else:  # it died once, with others in flight: none of them is blamed, all run again
        assert summary.counts["done"] == 8 and summary.ok and os.path.exists(mark)


def test_dask_local_cluster_runs_the_sweep_into_the_store(tmp_path):
    pytest.importorskip("distributed", reason="the Dask executor needs dask[distributed]")
    exp = tiny()
    with sweep.Store(tmp_path / "serial.db") as serial, sweep.Store(tmp_path / "dask.db") as store:
        sweep.run_sweep(exp, serial, executor="serial")
        summary = sweep.run_sweep(exp, store, executor="dask", workers=2, dask_processes=False)
        assert summary.statuses == {"done": 8} and not summary.interrupted
        assert finals(store) == finals(serial)
        assert sweep.run_sweep(exp, store, executor="dask", workers=2, dask_processes=False).executed == 0


def _numba_threads_of_each(configs):
    import numba

    return [numba.get_num_threads() for _ in configs]


@pytest.mark.parametrize("processes", [False, True], ids=["threads", "processes"])
def test_local_cluster_tasks_run_numba_on_one_thread(processes):
    """Numba's thread count is per thread: the task threads of a LocalCluster of two workers run on
    one (their kernels ran on every core, the workers' start-up setting not reaching them)."""
    pytest.importorskip("distributed", reason="the Dask executor needs dask[distributed]")
    import numba

    from fedopt.sweep.runners import _Dask

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("needs two Numba threads")
    runner = _Dask(2, None, processes, _numba_threads_of_each)
    try:
        runner.submit([SimpleNamespace(key="a", config={}), SimpleNamespace(key="b", config={})])
        records, deadline = [], time.monotonic() + 60
        while len(records) < 2 and time.monotonic() < deadline:
            records += runner.wait(timeout=5)
    finally:
        runner.close()
    assert [threads for _, threads in records] == [1, 1]


@pytest.mark.slow
def test_dask_executor_on_an_existing_scheduler_address(tmp_path):
    distributed = pytest.importorskip("distributed", reason="the Dask executor needs dask[distributed]")
    exp = tiny(seeds=[0])
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster, sweep.Store(tmp_path / "d.db") as store:
        summary = sweep.run_sweep(exp, store, executor="dask", scheduler=cluster.scheduler_address)
        assert summary.statuses == {"done": 4}
        hosts = {store.run(s.key)["host"] for s in exp.expand()}
        assert len(hosts) == 1
