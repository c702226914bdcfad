"""The SQLite store: every sweep kept, claims shared between processes, read-only opening, errors as
messages, migration of schema-1 files and tidy rows."""

from __future__ import annotations

import datetime
import json
import math
import os
import sqlite3
import subprocess
import sys
import time

import pytest

from fedopt import sweep
from fedopt.sweep import store as store_module
from fedopt.sweep.store import Store, StoreError, provenance

TINY = """
[experiment]
name = "tiny"
title = "a tiny sweep"

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
name = "l1"
lam = 1e-3

[run.algorithm]
name = "fednmap"
local_steps = 2

[[grid]]
name = "speedup"
"dataset.n_clients" = [4, 8]
"""


def tiny(**overrides):
    exp = sweep.parse_experiment(TINY, source="tiny.toml", name="tiny")
    return exp.override(overrides) if overrides else exp


def record(status="done", rounds=(0, 1)):
    history = {"round": list(rounds), "stationarity": [1.0 / (r + 1) for r in rounds],
               "objective": [2.0 - r for r in rounds]} if rounds else None
    return {"status": status, "history": history, "run_seconds": 0.1, "wall_seconds": 0.2, "backend": "numpy",
            "host": "h", "fedopt_version": "0.1.0", "error": None if status == "done" else "boom"}


def fill(store, specs, status="done"):
    for spec in specs:
        store.put(spec.key, spec.config, record(status))


def snapshot(path):
    """The bytes and modification time of ``path`` and the names beside it."""
    return path.read_bytes(), path.stat().st_mtime_ns, sorted(p.name for p in path.parent.iterdir())


# ------------------------------------------------------------------------------------------ sweeps
def test_every_sweep_is_kept_and_chosen_by_id_prefix_or_experiment(tmp_path):
    full, quick = tiny(), tiny().shortened(rounds=1, seeds=1, values=1)
    with Store(tmp_path / "s.db") as store:
        full_id = store.register(full, full.expand())
        fill(store, full.expand())
        quick_id = store.register(quick, quick.expand())
        fill(store, quick.expand())
        assert full_id != quick_id and len(full_id) == 16
        listed = store.sweeps()
        assert [s["id"] for s in listed] == [full_id, quick_id]
        assert listed[0]["overrides"] == {} and "quick" in listed[1]["overrides"]
        assert listed[0]["runs"] == 4 and listed[0]["counts"] == {"done": 4, "diverged": 0, "failed": 0, "missing": 0}
        assert listed[1]["runs"] == 1 and listed[1]["title"] == "a tiny sweep"
        assert [m["key"] for m in store.members(full_id)] == [s.key for s in full.expand()]
        assert [m["key"] for m in store.members(quick_id)] == [s.key for s in quick.expand()]
        assert store.sweep("tiny")["id"] == quick_id  # an experiment name means its latest sweep
        assert [m["key"] for m in store.members("tiny")] == [s.key for s in quick.expand()]
        assert store.sweep(full_id[:4])["id"] == full_id and store.sweep(quick_id[:6].upper())["id"] == quick_id
        assert [e["id"] for e in store.experiments()] == [quick_id]
        again = store.register(full, full.expand())  # the same sweep: kept once, now the latest
        assert again == full_id and [s["id"] for s in store.sweeps()] == [quick_id, full_id]
        assert store.sweep("tiny")["id"] == full_id
        with pytest.raises(StoreError, match=rf"no sweep 'nothing' in .*s\.db.*{full_id[:12]} \(tiny"):
            store.sweep("nothing")
        with pytest.raises(StoreError, match="4 characters or more"):
            store.members(full_id[:3])


def test_an_ambiguous_prefix_lists_the_matching_sweeps(tmp_path, monkeypatch):
    ids = iter(["abcd000000000001", "abcd000000000002"])
    monkeypatch.setattr(store_module, "_sweep_id", lambda name, rows: next(ids))
    with Store(tmp_path / "s.db") as store:
        store.register(tiny(), tiny().expand())
        store.register(tiny(seeds=[0]), tiny(seeds=[0]).expand())
        with pytest.raises(StoreError, match=r"'abcd' matches 2 sweeps .*abcd00000000 \(tiny.*more characters"):
            store.sweep("abcd")
        assert store.sweep("abcd000000000002")["overrides"] == {"seeds": [0]}


def test_the_sweep_id_depends_on_the_runs_only(tmp_path):
    with Store(tmp_path / "s.db") as store:
        first = store.register(tiny(), tiny().expand())
        assert store.register(tiny(**{"dataset.n_clients": 4}), tiny(**{"dataset.n_clients": 4}).expand()) != first
        assert store.register(tiny(), tiny().expand()) == first
        assert len(store.sweeps()) == 2 and len(store.sweeps("tiny")) == 2 and store.sweeps("other") == []


def test_remove_sweep_drops_only_the_runs_no_other_sweep_uses(tmp_path):
    both, one = tiny(), tiny(seeds=[0])
    with Store(tmp_path / "s.db") as store:
        both_id = store.register(both, both.expand())
        one_id = store.register(one, one.expand())
        fill(store, both.expand())
        assert store.count() == 4
        removed = store.remove_sweep(both_id[:8])
        assert removed == {"sweep": both_id, "runs_removed": 2}
        assert [s["id"] for s in store.sweeps()] == [one_id]
        assert store.count("done") == 2 and all(m["status"] == "done" for m in store.members(one_id))
        assert store.remove_sweep("tiny") == {"sweep": one_id, "runs_removed": 2}
        assert store.count() == 0 and store.sweeps() == []


def test_a_store_without_sweeps_says_there_is_none_to_choose(tmp_path):
    with Store(tmp_path / "s.db") as store:
        store.remove_sweep(store.register(tiny(), tiny().expand()))
        with pytest.raises(StoreError, match=r"no sweep 'tiny' in .*s\.db; choose one of: none"):
            store.sweep("tiny")


def test_store_rm_refuses_a_missing_store_and_creates_none(tmp_path, capsys):
    from fedopt.cli import main

    assert main(["store", "rm", str(tmp_path / "typo.db"), "tiny"]) == 2
    assert "no store at" in capsys.readouterr().err and list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------ claims
def test_two_stores_on_one_file_never_claim_the_same_run(tmp_path):
    keys = [f"k{i}" for i in range(10)]
    with Store(tmp_path / "s.db") as a, Store(tmp_path / "s.db") as b:
        assert a.claim(keys[:6], "a") == keys[:6]
        assert b.claim(keys, "b") == keys[6:]
        assert a.claim(keys, "a") == keys[:6]  # a holds its own claims still
        assert b.held_by_others(keys, "b").keys() == set(keys[:6])
        owner, expires = b.held_by_others(keys[:1], "b")["k0"]
        assert owner == "a" and expires > time.time()
        a.put("k0", {"x": 0}, record())  # a stored run drops its claim and is claimed by nobody again
        assert "k0" not in b.held_by_others(keys, "b") and b.claim(["k0"], "b") == []
        a.release("a", ["k1"])
        assert b.claim(["k1", "k2"], "b") == ["k1"]
        a.release("a")
        assert b.held_by_others(keys, "b") == {}


def test_an_expired_claim_is_taken_over_and_renew_keeps_it(tmp_path):
    with Store(tmp_path / "s.db") as a, Store(tmp_path / "s.db") as b:
        assert a.claim(["k0", "k1"], "a", lease=0.2) == ["k0", "k1"]
        assert b.claim(["k0", "k1"], "b") == []
        time.sleep(0.1)
        a.renew("a", lease=60.0)
        time.sleep(0.15)
        assert b.claim(["k0", "k1"], "b") == []  # renewed: still a's
        a.claim(["k2"], "a", lease=0.05)
        time.sleep(0.1)
        a.renew("b")  # renewing another owner's claims leaves a's expired one alone
        assert b.claim(["k2"], "b") == ["k2"]
        assert a.held_by_others(["k2"], "a")["k2"][0] == "b"


def test_a_claim_of_a_process_gone_from_this_host_is_taken_over_at_once(tmp_path):
    """A killed sweep's leases need not be waited out when it ran here: its pid no longer runs.
    The claims of a live process, of another host, or of an owner not named host:pid stay held."""
    import socket

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    host = socket.gethostname()
    owners = {"k0": f"{host}:{gone.pid}:ab12", "k1": f"{host}:{os.getpid()}:cd34",
              "k2": f"elsewhere-{host}:{gone.pid}:ef56", "k3": "a"}
    with Store(tmp_path / "s.db") as store:
        for key, owner in owners.items():
            assert store.claim([key], owner) == [key]
        assert store.held_by_others(list(owners), "b").keys() == {"k1", "k2", "k3"}
        assert store.claim(list(owners), "b") == ["k0"]


def test_claim_reruns_stored_runs_only_when_asked(tmp_path):
    with Store(tmp_path / "s.db") as store:
        store.put("bad", {}, record("failed", rounds=()))
        store.put("good", {}, record())
        assert store.claim(["bad", "good", "new"], "a") == ["new"]
        assert store.claim(["bad", "good"], "a", rerun=("failed",)) == ["bad"]


CLAIMER = """
import sys, time
from pathlib import Path
from fedopt.sweep.store import Store

path, owner, go = sys.argv[1], sys.argv[2], Path(sys.argv[3])
keys = [f"k{i}" for i in range(300)]
with Store(path) as store:
    while not go.exists():
        time.sleep(0.01)
    mine = [k for k in keys if store.claim([k], owner)]
print(" ".join(mine))
"""


def test_two_processes_split_the_runs(tmp_path):
    db, go = tmp_path / "s.db", tmp_path / "go"
    Store(db).close()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [subprocess.Popen([sys.executable, "-c", CLAIMER, str(db), owner, str(go)], stdout=subprocess.PIPE,
                              text=True, env=env) for owner in ("p", "q")]
    time.sleep(0.5)
    go.touch()
    mine = [set(proc.communicate(timeout=120)[0].split()) for proc in procs]
    assert all(proc.returncode == 0 for proc in procs)
    assert not mine[0] & mine[1]
    assert mine[0] | mine[1] == {f"k{i}" for i in range(300)}


# -------------------------------------------------------------------------------------- read-only
def test_readonly_opening_changes_nothing_and_never_creates(tmp_path):
    db = tmp_path / "s.db"
    with Store(db) as store:
        sweep_id = store.register(tiny(), tiny().expand())
        fill(store, tiny().expand()[:2])
    with sqlite3.connect(db) as con:  # a store kept in rollback-journal mode by plain sqlite3
        assert con.execute("PRAGMA journal_mode=DELETE").fetchone()[0] == "delete"
    before = snapshot(db)
    time.sleep(0.01)
    with Store(db, readonly=True) as store:
        assert store.count() == 2 and store.sweep("tiny")["id"] == sweep_id
        assert [m["status"] for m in store.members(sweep_id)] == ["done", "done", None, None]
        with pytest.raises(StoreError, match="open read-only"):
            store.put("k", {}, record())
        with pytest.raises(StoreError, match="open read-only"):
            store.register(tiny(), tiny().expand())
    assert snapshot(db) == before
    with sqlite3.connect(db) as con:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    with pytest.raises(StoreError, match=r"no store at .*missing\.db; run `fedopt sweep` first"):
        Store(tmp_path / "missing.db", readonly=True)
    assert not (tmp_path / "missing.db").exists()


def test_a_foreign_sqlite_file_is_refused_and_left_alone(tmp_path):
    db = tmp_path / "other.db"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE notes (text TEXT)")
        con.execute("INSERT INTO notes VALUES ('mine')")
    con.close()
    before = snapshot(db)
    for readonly in (True, False):
        with pytest.raises(StoreError, match=r"other\.db is a SQLite file but not a fedopt store \(tables: notes\)"):
            Store(db, readonly=readonly)
    assert snapshot(db) == before


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root ignores file permissions")
def test_a_store_in_a_readonly_folder_is_read_and_refused_for_writing(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    with Store(folder / "s.db") as store:
        store.register(tiny(), tiny().expand())
        fill(store, tiny().expand())
    os.chmod(folder / "s.db", 0o444)
    os.chmod(folder, 0o555)
    try:
        before = snapshot(folder / "s.db")
        with Store(folder / "s.db", readonly=True) as store:
            assert store.count("done") == 4 and len(store.members("tiny")) == 4
        with pytest.raises(StoreError, match=r"s\.db.*read-only"):
            Store(folder / "s.db")
        with pytest.raises(StoreError, match=r"cannot open the store .*new\.db"):
            Store(folder / "new.db")
        assert snapshot(folder / "s.db") == before
    finally:
        os.chmod(folder, 0o755)


# ------------------------------------------------------------------------------------------ errors
def test_bad_files_and_paths_are_store_errors(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(os.urandom(4096))
    before = snapshot(junk)
    for readonly in (True, False):
        with pytest.raises(StoreError, match=r"junk\.db is not a readable SQLite store"):
            Store(junk, readonly=readonly)
    assert snapshot(junk) == before
    (tmp_path / "empty.db").touch()
    with pytest.raises(StoreError, match=r"empty\.db is an empty file, not a fedopt store yet"):
        Store(tmp_path / "empty.db", readonly=True)
    (tmp_path / "afile").write_text("x")
    with pytest.raises(StoreError, match=r"cannot create the folder of the store .*afile.*parents are folders"):
        Store(tmp_path / "afile" / "s.db")
    with pytest.raises(StoreError, match="is a folder"):
        Store(tmp_path)


def test_a_store_from_a_newer_fedopt_is_refused_untouched(tmp_path):
    db = tmp_path / "s.db"
    Store(db).close()
    with sqlite3.connect(db) as con:
        con.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    con.close()
    before = snapshot(db)
    for readonly in (True, False):
        with pytest.raises(StoreError, match=r"written by a newer fedopt \(schema 3\); this one reads 2: upgrade"):
            Store(db, readonly=readonly)
    assert snapshot(db) == before


# --------------------------------------------------------------------------------------- migration
SCHEMA_1 = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    key TEXT PRIMARY KEY,
    config TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('done', 'diverged', 'failed')),
    rounds_done INTEGER,
    final_stationarity REAL, final_normal_map REAL, final_objective REAL, final_test_accuracy REAL, final_nnz REAL,
    final_hoyer REAL, final_grad_evals REAL, final_prox_evals REAL, final_floats_up REAL, final_floats_down REAL,
    run_seconds REAL,
    wall_seconds REAL,
    history TEXT,
    error TEXT,
    backend TEXT,
    host TEXT,
    fedopt_version TEXT,
    finished REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS experiments (
    name TEXT PRIMARY KEY,
    source TEXT,
    spec TEXT,
    meta TEXT,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS members (
    experiment TEXT NOT NULL,
    grid TEXT NOT NULL,
    labels TEXT NOT NULL,
    key TEXT NOT NULL,
    position INTEGER NOT NULL,
    PRIMARY KEY (experiment, grid, labels)
);
CREATE INDEX IF NOT EXISTS members_key ON members (key);
INSERT INTO meta VALUES ('schema_version', '1');
"""


def schema_1_store(path):
    """A store as the first schema wrote it: the experiment ``tiny`` with 4 runs, 3 of them stored."""
    exp, specs = tiny(), tiny().expand()
    con = sqlite3.connect(path)
    con.executescript(SCHEMA_1)
    con.execute("INSERT INTO experiments VALUES (?, ?, ?, ?, ?)",
                ("tiny", "tiny.toml", TINY, json.dumps({"title": exp.title, "grids": []}), 1_700_000_000.0))
    con.executemany("INSERT INTO members VALUES (?, ?, ?, ?, ?)",
                    [("tiny", s.grid, json.dumps(s.labels, sort_keys=True, separators=(",", ":")), s.key, i)
                     for i, s in enumerate(specs)])
    con.executemany("INSERT INTO runs (key, config, status, rounds_done, final_stationarity, history, host, "
                    "fedopt_version, finished) VALUES (?, ?, 'done', 1, 0.5, ?, 'old-host', '0.0.9', 1.0)",
                    [(s.key, json.dumps(s.config), json.dumps({"round": [0, 1], "stationarity": [1.0, 0.5]}))
                     for s in specs[:3]])
    con.commit()
    con.close()
    return specs


def test_a_schema_1_store_is_read_as_it_is_and_migrated_for_writing(tmp_path):
    db = tmp_path / "old.db"
    specs = schema_1_store(db)
    before = snapshot(db)
    with Store(db, readonly=True) as store:
        (old,) = store.sweeps()
        assert old["experiment"] == "tiny" and old["counts"] == {"done": 3, "diverged": 0, "failed": 0, "missing": 1}
        assert old["overrides"] == store_module.UNRECORDED and old["provenance"]["host"] == "old-host"
        assert [m["key"] for m in store.members("tiny")] == [s.key for s in specs]
    assert snapshot(db) == before
    with Store(db) as store:
        (migrated,) = store.sweeps()
        assert migrated["id"] == old["id"] and migrated["spec"] == TINY
        assert [(m["key"], m["status"]) for m in store.members("tiny")] == \
            [(s.key, "done") for s in specs[:3]] + [(specs[3].key, None)]
        assert store.run(specs[0].key)["history"]["stationarity"] == [1.0, 0.5]
        assert store.register(tiny(), specs) == old["id"]  # the same runs: the migrated sweep, not a new one
        assert len(store.sweeps()) == 1
    with sqlite3.connect(db) as con:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == "2"
    con.close()
    assert "experiments" not in tables and {"runs", "sweeps", "members", "claims"} <= tables


# ----------------------------------------------------------------------------------------- tidy rows
def test_records_give_one_row_per_run_and_round(tmp_path):
    exp, specs = tiny(), tiny().expand()
    with Store(tmp_path / "s.db") as store:
        sweep_id = store.register(exp, specs)
        store.put(specs[0].key, specs[0].config, record(rounds=(0, 1, 2)))
        store.put(specs[1].key, specs[1].config, record("diverged", rounds=(0, 1)))
        store.put(specs[2].key, specs[2].config, record("failed", rounds=()))
        rows = list(store.records("tiny"))
        assert len(rows) == 3 + 2 + 1  # the fourth run is not stored
        first = rows[0]
        assert list(first)[:6] == ["sweep", "experiment", "grid", "key", "status", "seed"]
        assert first["sweep"] == sweep_id and first["experiment"] == "tiny" and first["grid"] == "speedup"
        assert first["dataset.n_clients"] == 4 and first["algorithm.name"] == "fednmap" and first["rounds"] == 2
        assert [r["round"] for r in rows[:3]] == [0, 1, 2] and rows[2]["stationarity"] == 1 / 3
        assert {r["status"] for r in rows} == {"done", "diverged", "failed"}
        assert "round" not in rows[-1] and rows[-1]["status"] == "failed"
        every = list(store.records())
        assert len(every) == 6 and "sweep" not in every[0] and every[0]["experiment"] == "tiny"


def test_records_of_a_sweep_name_the_grid_point_of_each_row(tmp_path):
    # lr_local = "alpha / Q" with Q = 2 computes the run of lr_local = 0.05 at alpha = 0.1: three points, one run a seed
    text = TINY.replace('"dataset.n_clients" = [4, 8]', '"params.alpha" = [0.1, 0.2]\n'
                        '"algorithm.lr_local" = [0.05, "alpha / Q"]')
    exp = sweep.parse_experiment(text, source="tiny.toml", name="tiny")
    specs = exp.expand()
    with Store(tmp_path / "s.db") as store:
        store.register(exp, specs)
        fill(store, specs)
        rows = list(store.records("tiny"))
        every = list(store.records())
    assert len({s.key for s in specs}) == 4 and len(rows) == 4 * 2 * 2  # grid points x seeds x rounds
    points = [(r["point.params.alpha"], r["point.algorithm.lr_local"], r["seed"], r["round"]) for r in rows]
    assert len(set(points)) == len(rows) and "point.seed" not in rows[0]
    assert {p[:2] for p in points} == {(0.1, 0.05), (0.1, "alpha / Q"), (0.2, 0.05), (0.2, "alpha / Q")}
    columns = list(rows[0])
    config = [c for c in columns if "." in c and not c.startswith("point.")]
    assert max(map(columns.index, config)) < columns.index("point.params.alpha") < columns.index("round")
    # every stored run once: no single grid point to name
    assert len(every) == 4 * 2 and not any(c.startswith("point.") for c in every[0])


def test_to_pandas_is_a_tidy_frame(tmp_path):
    pd = pytest.importorskip("pandas")
    exp, specs = tiny(), tiny().expand()
    with Store(tmp_path / "s.db") as store:
        store.register(exp, specs)
        store.put(specs[0].key, specs[0].config, record(rounds=(0, 1)))
        store.put(specs[1].key, specs[1].config, record("failed", rounds=()))
        frame = store.to_pandas("tiny")
    assert isinstance(frame, pd.DataFrame) and len(frame) == 3
    assert list(frame.columns[:6]) == ["sweep", "experiment", "grid", "key", "status", "seed"]
    assert list(frame.columns[-3:]) == ["round", "stationarity", "objective"]
    assert math.isnan(frame["stationarity"].iloc[2]) and frame["status"].tolist() == ["done", "done", "failed"]
    assert frame["dataset.n_clients"].tolist() == [4, 4, 4]


# ------------------------------------------------------------------------------------------ provenance
def test_provenance_names_the_version_machine_and_date(tmp_path):
    info = provenance()
    assert set(info) == {"fedopt_version", "commit", "host", "machine", "cpu_name", "python", "date"}
    assert info["fedopt_version"] and info["python"].count(".") == 2 and info["machine"]
    assert info["commit"] is None or (len(info["commit"]) == 40 and int(info["commit"], 16) >= 0)
    assert datetime.datetime.fromisoformat(info["date"]).tzinfo is not None
    with Store(tmp_path / "s.db") as store:
        store.register(tiny(), tiny().expand())
        assert store.sweep("tiny")["provenance"]["host"] == info["host"]

