"""The results store: one SQLite file (standard library ``sqlite3``), one row per run.

Tables:

* ``runs``: one row per run, keyed by :func:`~fedopt.sweep.config.config_key` (SHA-256 of the
  run's full configuration). ``status`` is ``done``, ``diverged`` (NaN/inf; the history up to the
  last finite round is kept) or ``failed`` (an exception; ``error`` holds its traceback). Final
  metrics have their own columns (``final_stationarity``, ``final_objective``, ...); ``history``
  is the whole history as JSON columns (``{"round": [...], "stationarity": [...], ...}``).
* ``experiments``: each experiment swept into the store, with its TOML text.
* ``members``: which runs make up an experiment, with the grid and the labels of each grid point.

Only the process that owns the store writes to it, one transaction per finished run, so a run is
either stored whole or not at all. The database runs in WAL mode with ``synchronous=FULL``:
killing the sweep (even with SIGKILL) loses at most the runs that had not finished, and the next
sweep opens the file as it is and runs only what is missing.
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
from pathlib import Path

SCHEMA_VERSION = 1
STATUSES = ("done", "diverged", "failed")
FINAL_COLUMNS = ("stationarity", "normal_map", "objective", "test_accuracy", "nnz", "hoyer", "grad_evals",
                 "prox_evals", "floats_up", "floats_down")

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    key TEXT PRIMARY KEY,
    config TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN {STATUSES!r}),
    rounds_done INTEGER,
    {', '.join(f'final_{c} REAL' for c in FINAL_COLUMNS)},
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
"""


def _json(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=_plain)


def _plain(value):
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def _real(value):
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


class Store:
    """A sweep's SQLite store at ``path`` (created when missing). Use as a context manager or call :meth:`close`."""

    def __init__(self, path, timeout: float = 60.0):
        self.path = Path(path)
        if self.path.parent and not self.path.parent.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=timeout, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        with self._transaction():
            for statement in _SCHEMA.strip().split(";"):
                if statement.strip():
                    self._db.execute(statement)
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        row = self._db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if int(row[0]) != SCHEMA_VERSION:
            raise RuntimeError(f"{self.path} has store schema {row[0]}, this fedopt reads {SCHEMA_VERSION}")

    # ------------------------------------------------------------------ plumbing
    def _transaction(self):
        db = self._db

        class _Tx:
            def __enter__(self_):
                db.execute("BEGIN IMMEDIATE")

            def __exit__(self_, kind, value, tb):
                db.execute("COMMIT" if kind is None else "ROLLBACK")

        return _Tx()

    def close(self) -> None:
        self._db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ writing
    def register(self, experiment, specs) -> None:
        """Record ``experiment`` and its runs ``specs`` (replacing its previous list of members)."""
        meta = {"title": experiment.title, "description": experiment.description, "paper": experiment.paper,
                "from_paper": experiment.from_paper, "defaults": experiment.defaults,
                "grids": [{"name": g.name, "title": g.title, "axes": g.axes, "varied": g.varied, "lines": g.lines,
                           "slope": g.slope, "paper_slope": g.paper_slope, "predicted_slope": g.predicted_slope,
                           "metric": g.metric} for g in experiment.grids]}
        with self._transaction():
            self._db.execute("INSERT OR REPLACE INTO experiments VALUES (?, ?, ?, ?, ?)",
                             (experiment.name, experiment.source, experiment.text, _json(meta), time.time()))
            self._db.execute("DELETE FROM members WHERE experiment = ?", (experiment.name,))
            self._db.executemany("INSERT OR REPLACE INTO members VALUES (?, ?, ?, ?, ?)",
                                 [(experiment.name, s.grid, _json(s.labels), s.key, i) for i, s in enumerate(specs)])

    def put(self, key: str, config: dict, record: dict) -> None:
        """Store one finished run (``record`` from :func:`fedopt.sweep.execute.execute_run`) and commit at once."""
        history = record.get("history") or {}
        final = {c: (history.get(c) or [None])[-1] for c in FINAL_COLUMNS}
        rounds = history.get("round") or [None]
        values = (key, _json(config), record["status"], rounds[-1], *(_real(final[c]) for c in FINAL_COLUMNS),
                  _real(record.get("run_seconds")), _real(record.get("wall_seconds")), _json(history),
                  record.get("error"), record.get("backend"), record.get("host"), record.get("fedopt_version"),
                  time.time())
        marks = ", ".join("?" * len(values))
        with self._transaction():
            self._db.execute(f"INSERT OR REPLACE INTO runs VALUES ({marks})", values)

    def delete(self, keys) -> None:
        with self._transaction():
            self._db.executemany("DELETE FROM runs WHERE key = ?", [(k,) for k in keys])

    # ------------------------------------------------------------------ reading
    def statuses(self) -> dict[str, str]:
        """``{key: status}`` of every stored run."""
        return {row[0]: row[1] for row in self._db.execute("SELECT key, status FROM runs")}

    def count(self, status: str | None = None) -> int:
        if status is None:
            return self._db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        return self._db.execute("SELECT COUNT(*) FROM runs WHERE status = ?", (status,)).fetchone()[0]

    def experiments(self) -> list[dict]:
        """The experiments in the store: ``name``, ``source``, ``spec`` (TOML text) and ``meta``."""
        rows = self._db.execute("SELECT name, source, spec, meta FROM experiments ORDER BY updated").fetchall()
        return [{"name": r["name"], "source": r["source"], "spec": r["spec"], "meta": json.loads(r["meta"])}
                for r in rows]

    def members(self, experiment: str, with_history: bool = True) -> list[dict]:
        """The runs of ``experiment`` in sweep order: grid, labels, key, status, config, final metrics, history.

        Runs not stored yet come back with ``status`` None.
        """
        columns = "r.status, r.config, r.rounds_done, r.run_seconds, r.wall_seconds, r.error, r.backend, " + \
            ", ".join(f"r.final_{c}" for c in FINAL_COLUMNS) + (", r.history" if with_history else "")
        rows = self._db.execute(
            f"SELECT m.grid, m.labels, m.key, {columns} FROM members m LEFT JOIN runs r ON r.key = m.key "
            "WHERE m.experiment = ? ORDER BY m.position", (experiment,)).fetchall()
        out = []
        for r in rows:
            item = {"grid": r["grid"], "labels": json.loads(r["labels"]), "key": r["key"], "status": r["status"],
                    "config": json.loads(r["config"]) if r["config"] else None, "rounds_done": r["rounds_done"],
                    "run_seconds": r["run_seconds"], "wall_seconds": r["wall_seconds"], "error": r["error"],
                    "backend": r["backend"], "final": {c: r[f"final_{c}"] for c in FINAL_COLUMNS}}
            if with_history:
                item["history"] = json.loads(r["history"]) if r["history"] else None
            out.append(item)
        return out

    def run(self, key: str) -> dict | None:
        """One stored run as a dict (config and history decoded), or None."""
        row = self._db.execute("SELECT * FROM runs WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        item = dict(row)
        item["config"] = json.loads(item["config"])
        item["history"] = json.loads(item["history"]) if item["history"] else None
        return item


__all__ = ["FINAL_COLUMNS", "STATUSES", "Store"]
