"""The results store: one SQLite file (standard library ``sqlite3``), one row per run.

Tables (schema 2):

* ``runs``: one row per run, keyed by :func:`~fedopt.sweep.config.config_key` (SHA-256 of the
  run's full configuration). ``status`` is ``done``, ``diverged`` (stopped by the divergence rule
  of :func:`fedopt.run` or by NaN/inf; the history up to the round that tripped the rule is kept)
  or ``failed`` (an exception; ``error`` holds its traceback). Final metrics have their own
  columns (``final_stationarity``, ``final_objective``, ...); ``history`` is the whole history as
  JSON columns (``{"round": [...], "stationarity": [...], ...}``).
* ``sweeps``: every sweep ever run into the store, identified by its expanded configuration (the
  id hashes the experiment name and the ordered grid, labels and key of its runs), with the TOML
  text, the overrides (``--set``, ``--quick``, ...) and where and with what it ran (:func:`provenance`).
  A quick or overridden variant is a sweep of its own and hides nothing: :meth:`Store.sweep`
  picks one by id, id prefix or experiment name (its latest sweep).
* ``members``: which runs make up a sweep, with the grid and the labels of each grid point. Runs
  are shared: a run in two sweeps is stored, and executed, once.
* ``claims``: leases on runs being executed (``key``, ``owner``, ``expires``). :meth:`Store.claim`
  takes the runs that are neither stored nor held by a live lease of another owner in one
  ``BEGIN IMMEDIATE`` transaction, so any number of processes on one store split a grid; a lease
  left by a killed process expires and is taken over, at once when its owner (``host:pid:...``)
  names a process of this host that no longer runs.

Every finished run is one transaction (:meth:`Store.put` stores it and drops its claim), so a run is
either stored whole or not at all. A store opened for writing runs in WAL mode with
``synchronous=FULL``: killing a sweep (even with SIGKILL) loses at most the runs that had not
finished, and the next sweep opens the file as it is and runs only what is missing.

``Store(path, readonly=True)`` (reports, ``--dry-run``) opens the file read-only: it never creates
it, never changes its journal mode and never adds tables. A SQLite file that is not a fedopt store
is refused in both modes and left as it is. A schema-1 store (one member list per experiment,
replaced by each sweep) is migrated in one transaction when opened for writing, each experiment's
list becoming one sweep; opened read-only, it is read as it is. Problems with the file (corrupt,
foreign, newer schema, read-only location, locked) raise :class:`StoreError` with a one-line message.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import json
import math
import os
import platform
import socket
import sqlite3
import time
from pathlib import Path
from urllib.parse import quote

from fedopt._backend import cpu_model, host_cpu_name

SCHEMA_VERSION = 2
STATUSES = ("done", "diverged", "failed")
FINAL_COLUMNS = ("stationarity", "normal_map", "objective", "test_accuracy", "nnz", "hoyer", "grad_evals",
                 "prox_evals", "floats_up", "floats_down")
#: The prefix of the columns of :meth:`Store.records` naming a run's grid point (``point.params.alpha``).
POINT = "point."
#: What a schema-1 sweep records instead of its overrides, which that schema did not keep.
UNRECORDED = {"unrecorded": "stored by a fedopt that did not record overrides"}

_RUNS = f"""
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
)
"""

# The tables of schema 2 next to ``runs``; ``{db}`` is ``main``, or ``temp`` to read a schema-1 file read-only.
_SWEEPS = """
CREATE TABLE IF NOT EXISTS {db}.sweeps (
    id TEXT PRIMARY KEY,
    experiment TEXT NOT NULL,
    source TEXT,
    spec TEXT,
    meta TEXT NOT NULL,
    overrides TEXT NOT NULL,
    provenance TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    seq INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS {db}.sweeps_experiment ON sweeps (experiment, seq);
CREATE TABLE IF NOT EXISTS {db}.members (
    sweep TEXT NOT NULL,
    grid TEXT NOT NULL,
    labels TEXT NOT NULL,
    key TEXT NOT NULL,
    position INTEGER NOT NULL,
    PRIMARY KEY (sweep, position)
);
CREATE INDEX IF NOT EXISTS {db}.members_key ON members (key);
CREATE TABLE IF NOT EXISTS {db}.claims (key TEXT PRIMARY KEY, owner TEXT NOT NULL, expires REAL NOT NULL);
CREATE INDEX IF NOT EXISTS {db}.claims_owner ON claims (owner)
"""

_CHUNK = 500  # keys per IN (...) query, below SQLite's limit on bound parameters


class StoreError(RuntimeError):
    """A store that cannot be opened or written; the message names the path and what to do."""


# --------------------------------------------------------------------------------------- provenance
def provenance() -> dict:
    """Where and with what a sweep ran: fedopt version and commit, host, CPU, Python and the date (UTC)."""
    import fedopt

    return {"fedopt_version": getattr(fedopt, "__version__", None), "commit": _commit(), "host": socket.gethostname(),
            "machine": cpu_model(), "cpu_name": host_cpu_name(), "python": platform.python_version(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


@functools.lru_cache(maxsize=1)
def _commit() -> str | None:
    """The git HEAD of the checkout fedopt is imported from (None when installed or unreadable)."""
    root = Path(__file__).resolve().parents[2]
    git = root / ".git"
    try:
        if git.is_file():  # a worktree or submodule: "gitdir: <path>"
            text = git.read_text().strip()
            if not text.startswith("gitdir:"):
                return None
            git = (root / text[len("gitdir:"):].strip()).resolve()
        if not git.is_dir():
            return None
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref:"):
            return head if _is_sha(head) else None
        ref = head[len("ref:"):].strip()
        common = git
        if (git / "commondir").is_file():
            common = (git / (git / "commondir").read_text().strip()).resolve()
        for base in (git, common):
            if (base / ref).is_file():
                sha = (base / ref).read_text().strip()
                return sha if _is_sha(sha) else None
        packed = common / "packed-refs"
        if packed.is_file():
            for line in packed.read_text().splitlines():
                sha, _, name = line.partition(" ")
                if name.strip() == ref and _is_sha(sha):
                    return sha
    except OSError:
        return None
    return None


def _is_sha(text: str) -> bool:
    return len(text) == 40 and all(c in "0123456789abcdef" for c in text)


# ------------------------------------------------------------------------------------------ helpers
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


def _chunks(items, size: int = _CHUNK):
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _gone_owners(owners) -> set[str]:
    """The claimants among ``owners`` (``host:pid:token``, as :func:`fedopt.sweep.execute.default_owner`
    names them) that are processes of this host no longer running, each asked once. Any other
    owner, or a pid now reused by another process, counts as live: its lease ends when it expires."""
    here, gone = socket.gethostname(), set()
    for owner in set(owners):
        host, _, rest = owner.partition(":")
        pid = rest.partition(":")[0]
        if host != here or not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            gone.add(owner)
        except OSError:  # another user's process, or no right to ask: assume it runs
            pass
    return gone


def _unique(keys) -> list[str]:
    return list(dict.fromkeys(keys))


def _sweep_id(experiment: str, rows) -> str:
    """The id of a sweep: the first 16 hex digits of SHA-256 of its name and ordered ``(grid, labels, key)`` rows."""
    digest = hashlib.sha256(json.dumps(experiment).encode())
    for grid, labels, key in rows:
        digest.update(b"\n" + json.dumps([grid, labels, key]).encode())
    return digest.hexdigest()[:16]


def _member_rows(specs) -> list[tuple[str, str, str, int]]:
    """``(grid, labels, key, position)`` of each grid point in sweep order (a repeated point keeps its last run)."""
    last = {}
    for position, spec in enumerate(specs):
        last[(spec.grid, _json(spec.labels))] = (spec.key, position)
    rows = [(grid, labels, key, position) for (grid, labels), (key, position) in last.items()]
    return sorted(rows, key=lambda row: row[3])


def _flatten(table: dict, prefix: str = "") -> dict:
    out = {}
    for name, value in table.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{name}."))
        else:
            out[prefix + name] = value
    return out


def no_run_columns(by_sweep: bool) -> list[str]:
    """The columns of :meth:`Store.records` without any run stored: the run's, and the history's first."""
    return ["sweep"] * by_sweep + ["experiment", "grid", "key", "status", "seed", "round"]


def head_columns(columns) -> list[str]:
    """The run and configuration columns of ``columns`` (first seen first), then the grid-point columns: the runs
    of another method or sweep bring configuration fields of their own after the first run's point columns."""
    columns = list(columns)
    return [c for c in columns if not c.startswith(POINT)] + [c for c in columns if c.startswith(POINT)]


def _column_order(column: str):
    """Sort key of history columns: the round, the final-metric columns, then the rest by name (stored JSON
    sorts its keys, so the order of the run is lost)."""
    order = ("round", *FINAL_COLUMNS)
    return (order.index(column) if column in order else len(order), column)


def _explain(path: Path, err: sqlite3.Error) -> StoreError:
    """A :class:`StoreError` saying what ``err`` means for the store at ``path`` and what to do."""
    text = str(err)
    if "not a database" in text or "malformed" in text:
        return StoreError(f"{path} is not a readable SQLite store ({text}): restore it from a copy or move it away "
                          "and run the sweep again")
    if "readonly" in text or "read-only" in text:
        return StoreError(f"cannot write the store {path}: it is read-only ({text}); make it writable, or copy it "
                          "somewhere writable")
    if "locked" in text or "busy" in text:
        return StoreError(f"the store {path} stayed locked by another process ({text}); try again when it is done")
    if "unable to open" in text:
        return StoreError(f"cannot open the store {path} ({text}): check that its folder exists and is writable")
    return StoreError(f"store {path}: {text}")


def _guarded(method):
    """Turn SQLite errors raised by ``method`` into a :class:`StoreError` naming the store."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except sqlite3.Error as err:
            raise _explain(self.path, err) from None

    return wrapper


# -------------------------------------------------------------------------------------------- store
class Store:
    """A sweep's SQLite store at ``path``. Use as a context manager or call :meth:`close`.

    Parameters
    ----------
    path : str or Path
        The file; created (with its folder) when missing, unless ``readonly``.
    readonly : bool
        Open the file read-only: never create it, never change its journal mode, never add tables.
    timeout : float
        Seconds to wait for another process's write transaction before giving up.
    """

    def __init__(self, path, *, readonly: bool = False, timeout: float = 60.0):
        self.path = Path(path)
        self.readonly = readonly
        self._db = None
        if self.path.is_dir():
            raise StoreError(f"the store {self.path} is a folder: give the path of a file such as {self.path / 'x.db'}")
        try:
            if readonly:
                self._open_readonly(timeout)
            else:
                self._open_for_writing(timeout)
        except sqlite3.Error as err:
            self.close()
            raise _explain(self.path, err) from None
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ opening
    def _open_readonly(self, timeout: float) -> None:
        if not self.path.exists():
            raise StoreError(f"no store at {self.path}; run `fedopt sweep` first")
        uri = "file:" + quote(str(self.path.resolve()))
        self._connect(uri + "?mode=ro", timeout, uri=True)
        try:
            version = self._version()
        except sqlite3.OperationalError:
            # A WAL file in a folder we may not write: SQLite cannot create the -shm index. With no -wal
            # file left, the database file holds everything and can be read as immutable.
            wal = Path(f"{self.path}-wal")
            if os.access(self.path.parent, os.W_OK) or (wal.exists() and wal.stat().st_size):
                raise
            self._db.close()
            self._connect(uri + "?mode=ro&immutable=1", timeout, uri=True)
            version = self._version()
        if version is None:
            raise StoreError(f"{self.path} is an empty file, not a fedopt store yet; run `fedopt sweep` first")
        if version == 1:  # read as it is: the schema-2 tables are built in this connection's temp database
            self._create_sweep_tables("temp")
            self._insert_migrated(self._migrate_rows(), "temp")

    def _open_for_writing(self, timeout: float) -> None:
        parent = self.path.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            nearest = next(p for p in (parent, *parent.parents) if p.exists())
            if not nearest.is_dir():
                raise StoreError(f"cannot create the folder of the store {self.path}: {nearest} is a file; give a "
                                 "path whose parents are folders") from None
            raise StoreError(f"cannot create the folder of the store {self.path}: {err.strerror} "
                             f"({err.filename})") from None
        self._connect(str(self.path), timeout)
        self._version()  # refuses foreign and newer files before anything is written
        self._wal(timeout)
        self._db.execute("PRAGMA synchronous=FULL")
        with self._transaction():
            version = self._version()  # again, inside the lock: another process may have migrated it
            if version is None:
                for statement in _RUNS.strip().split(";"):
                    self._db.execute(statement)
                self._db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
                self._create_sweep_tables("main")
            elif version == 1:
                rows = self._migrate_rows()
                self._db.execute("DROP TABLE members")
                self._db.execute("DROP TABLE experiments")
                self._create_sweep_tables("main")
                self._insert_migrated(rows, "main")
                self._db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))

    def _wal(self, timeout: float) -> None:
        """Switch to WAL mode. Two processes switching a new store at once: SQLite answers one of them
        "locked" at once, not after its busy timeout, so that one tries again until ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as err:
                if "locked" not in str(err) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def _connect(self, target: str, timeout: float, uri: bool = False) -> None:
        self._db = sqlite3.connect(target, timeout=timeout, isolation_level=None, uri=uri)
        self._db.row_factory = sqlite3.Row

    def _version(self) -> int | None:
        """The schema version of the file: None for an empty file; refuses a foreign or newer one."""
        tables = {r[0] for r in self._db.execute("SELECT name FROM main.sqlite_master WHERE type = 'table'")}
        if not tables:
            return None
        row = None
        if "meta" in tables:
            row = self._db.execute("SELECT value FROM main.meta WHERE key = 'schema_version'").fetchone()
        if row is None:
            names = ", ".join(sorted(tables))
            raise StoreError(f"{self.path} is a SQLite file but not a fedopt store (tables: {names}); give another "
                             "path, fedopt leaves this file as it is")
        version = int(row[0])
        if version > SCHEMA_VERSION:
            raise StoreError(f"{self.path} was written by a newer fedopt (schema {version}); this one reads "
                             f"{SCHEMA_VERSION}: upgrade fedopt")
        return version

    def _create_sweep_tables(self, db: str) -> None:
        for statement in _SWEEPS.format(db=db).strip().split(";"):
            self._db.execute(statement)

    def _migrate_rows(self):
        """The sweeps and members of a schema-1 file: each experiment's member list becomes one sweep."""
        sweeps, members = [], []
        experiments = self._db.execute("SELECT name, source, spec, meta, updated FROM main.experiments "
                                       "ORDER BY updated").fetchall()
        for seq, exp in enumerate(experiments, start=1):
            rows = self._db.execute("SELECT grid, labels, key, position FROM main.members WHERE experiment = ? "
                                    "ORDER BY position", (exp["name"],)).fetchall()
            sweep = _sweep_id(exp["name"], [(r[0], r[1], r[2]) for r in rows])
            found = self._db.execute(
                "SELECT GROUP_CONCAT(DISTINCT r.fedopt_version) AS version, GROUP_CONCAT(DISTINCT r.host) AS host "
                "FROM main.members m JOIN runs r ON r.key = m.key WHERE m.experiment = ?", (exp["name"],)).fetchone()
            date = datetime.datetime.fromtimestamp(exp["updated"], datetime.timezone.utc).isoformat(timespec="seconds")
            origin = {"fedopt_version": found["version"], "commit": None, "host": found["host"], "machine": None,
                      "cpu_name": None, "python": None, "date": date}
            sweeps.append((sweep, exp["name"], exp["source"], exp["spec"], exp["meta"] or "{}", _json(UNRECORDED),
                           _json(origin), exp["updated"], exp["updated"], seq))
            members += [(sweep, *tuple(r)) for r in rows]
        return sweeps, members

    def _insert_migrated(self, rows, db: str) -> None:
        sweeps, members = rows
        self._db.executemany(f"INSERT OR REPLACE INTO {db}.sweeps VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", sweeps)
        self._db.executemany(f"INSERT OR REPLACE INTO {db}.members VALUES (?, ?, ?, ?, ?)", members)

    # ------------------------------------------------------------------ plumbing
    def _transaction(self):
        if self.readonly:
            raise StoreError(f"the store {self.path} is open read-only; open it without readonly to change it")
        db = self._db

        class _Tx:
            def __enter__(self_):
                db.execute("BEGIN IMMEDIATE")

            def __exit__(self_, kind, value, tb):
                db.execute("COMMIT" if kind is None else "ROLLBACK")

        return _Tx()

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ sweeps
    @_guarded
    def register(self, experiment, specs) -> str:
        """Record the sweep of ``experiment`` made of the runs ``specs``; returns its id.

        Every sweep is kept: another grid, another seed list or an override makes another sweep.
        Registering a sweep that is already stored marks it as the latest of its experiment and
        refreshes its description and claims from ``experiment``.
        """
        rows = _member_rows(specs)
        sweep = _sweep_id(experiment.name, [row[:3] for row in rows])
        now = time.time()
        meta = {"title": experiment.title, "description": experiment.description, "paper": experiment.paper,
                "data": getattr(experiment, "data", ""),
                "from_paper": experiment.from_paper, "defaults": experiment.defaults,
                "grids": [{"name": g.name, "title": g.title, "axes": g.axes, "varied": g.varied, "lines": g.lines,
                           "slope": g.slope, "paper_slope": g.paper_slope, "predicted_slope": g.predicted_slope,
                           "metric": g.metric, "curves": g.curves} for g in experiment.grids],
                "claims": [c.as_dict() for c in getattr(experiment, "claims", [])]}
        with self._transaction():
            seq = self._db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM sweeps").fetchone()[0]
            # the same runs again: the description and the claims may have been edited since
            if self._db.execute("UPDATE sweeps SET updated = ?, seq = ?, meta = ?, spec = ? WHERE id = ?",
                                (now, seq, _json(meta), experiment.text, sweep)).rowcount:
                return sweep
            self._db.execute("INSERT INTO sweeps VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                             (sweep, experiment.name, experiment.source, experiment.text, _json(meta),
                              _json(getattr(experiment, "overrides", None) or {}), _json(provenance()), now, now, seq))
            self._db.executemany("INSERT INTO members VALUES (?, ?, ?, ?, ?)", [(sweep, *row) for row in rows])
        return sweep

    @_guarded
    def sweeps(self, experiment: str | None = None) -> list[dict]:
        """Every sweep (of ``experiment``), oldest first: id, experiment, title, created, updated, overrides,
        provenance, meta, spec, source, runs (distinct keys) and counts of done, diverged, failed and missing runs."""
        where, args = ("WHERE experiment = ?", (experiment,)) if experiment is not None else ("", ())
        rows = self._db.execute(f"SELECT * FROM sweeps {where} ORDER BY seq", args).fetchall()
        counts = {}
        for sweep, status, n in self._db.execute(
                f"SELECT m.sweep, r.status, COUNT(DISTINCT m.key) FROM members m LEFT JOIN runs r ON r.key = m.key "
                f"WHERE m.sweep IN (SELECT id FROM sweeps {where}) GROUP BY m.sweep, r.status", args):
            counts.setdefault(sweep, {})[status or "missing"] = n
        out = []
        for r in rows:
            meta = json.loads(r["meta"])
            count = {status: counts.get(r["id"], {}).get(status, 0) for status in (*STATUSES, "missing")}
            out.append({"id": r["id"], "experiment": r["experiment"], "title": meta.get("title", ""),
                        "created": r["created"], "updated": r["updated"], "overrides": json.loads(r["overrides"]),
                        "provenance": json.loads(r["provenance"]), "meta": meta, "spec": r["spec"],
                        "source": r["source"], "runs": sum(count.values()), "counts": count})
        return out

    @_guarded
    def sweep(self, ref: str) -> dict:
        """One sweep (as in :meth:`sweeps`) by full id, unique id prefix (4 characters or more) or experiment
        name (its latest sweep)."""
        chosen = self._resolve(ref)  # raises when no sweep matches, the store's last one removed included
        return next(s for s in self.sweeps() if s["id"] == chosen)

    def _resolve(self, ref: str) -> str:
        """The id of the sweep ``ref`` names; a :class:`StoreError` listing the choices when none or several do."""
        ref = str(ref)
        row = self._db.execute("SELECT id FROM sweeps WHERE id = ?", (ref,)).fetchone()
        if row is None:
            row = self._db.execute("SELECT id FROM sweeps WHERE experiment = ? ORDER BY seq DESC LIMIT 1",
                                   (ref,)).fetchone()
        if row is not None:
            return row[0]
        matches = []
        if len(ref) >= 4:
            matches = [r[0] for r in self._db.execute("SELECT id FROM sweeps WHERE substr(id, 1, ?) = ? ORDER BY seq",
                                                      (len(ref), ref.lower()))]
        if len(matches) == 1:
            return matches[0]
        if matches:
            raise StoreError(f"sweep prefix {ref!r} matches {len(matches)} sweeps in {self.path}: "
                             f"{self._choices(matches)}; give more characters of the id")
        hint = " (an id prefix needs 4 characters or more)" if len(ref) < 4 else ""
        raise StoreError(f"no sweep {ref!r} in {self.path}{hint}; choose one of: {self._choices()}")

    def _choices(self, ids=None, shown: int = 12) -> str:
        rows = self._db.execute("SELECT id, experiment, updated FROM sweeps ORDER BY seq").fetchall()
        rows = [r for r in rows if ids is None or r[0] in ids]
        if not rows:
            return "none (the store holds no sweep; run `fedopt sweep` first)"
        names = [f"{r[0][:12]} ({r[1]}, {time.strftime('%Y-%m-%d %H:%M', time.localtime(r[2]))})"
                 for r in rows[-shown:]]
        more = f" and {len(rows) - shown} older" if len(rows) > shown else ""
        return ", ".join(names) + more

    @_guarded
    def experiments(self) -> list[dict]:
        """The latest sweep of each experiment, oldest first: ``name``, ``source``, ``spec`` (TOML text), ``meta``,
        and the sweep's ``id``, ``overrides`` and ``provenance``."""
        latest = {}
        for sweep in self.sweeps():
            latest.pop(sweep["experiment"], None)
            latest[sweep["experiment"]] = sweep
        return [{"name": s["experiment"], "source": s["source"], "spec": s["spec"], "meta": s["meta"], "id": s["id"],
                 "overrides": s["overrides"], "provenance": s["provenance"]} for s in latest.values()]

    @_guarded
    def remove_sweep(self, ref: str) -> dict:
        """Drop the sweep ``ref``, its member list and the runs no other sweep uses: ``{"sweep", "runs_removed"}``."""
        with self._transaction():
            sweep = self._resolve(ref)
            removed = self._db.execute(
                "DELETE FROM runs WHERE key IN (SELECT key FROM members WHERE sweep = ?) "
                "AND key NOT IN (SELECT key FROM members WHERE sweep != ?)", (sweep, sweep)).rowcount
            self._db.execute("DELETE FROM members WHERE sweep = ?", (sweep,))
            self._db.execute("DELETE FROM sweeps WHERE id = ?", (sweep,))
        return {"sweep": sweep, "runs_removed": removed}

    # ------------------------------------------------------------------ claims
    @_guarded
    def claim(self, keys, owner: str, lease: float = 60.0, rerun=()) -> list[str]:
        """Claim, in order and in one transaction, the ``keys`` free to run: not stored (or stored with a status
        in ``rerun``, e.g. ``("failed",)`` to retry failed runs) and not held by a live claim of another owner.
        Expired claims are taken over. Returns the claimed keys; each lease ends ``lease`` seconds from now."""
        keys = _unique(keys)
        rerun = tuple(rerun)
        claimed = []
        with self._transaction():
            now = time.time()
            for chunk in _chunks(keys):
                marks = ", ".join("?" * len(chunk))
                stored = {r[0]: r[1] for r in self._db.execute(
                    f"SELECT key, status FROM runs WHERE key IN ({marks})", chunk)}
                held = {key for key, _, _ in self._live_claims(chunk, owner, now)}
                free = [k for k in chunk if k not in held and (k not in stored or stored[k] in rerun)]
                self._db.executemany("INSERT OR REPLACE INTO claims VALUES (?, ?, ?)",
                                     [(k, owner, now + lease) for k in free])
                claimed += free
        return claimed

    @_guarded
    def renew(self, owner: str, lease: float = 60.0) -> None:
        """Extend every claim of ``owner`` to ``lease`` seconds from now (claims taken over by others stay theirs)."""
        with self._transaction():
            self._db.execute("UPDATE claims SET expires = ? WHERE owner = ?", (time.time() + lease, owner))

    @_guarded
    def release(self, owner: str, keys=None) -> None:
        """Drop the claims of ``owner``: all of them, or those on ``keys``."""
        with self._transaction():
            if keys is None:
                self._db.execute("DELETE FROM claims WHERE owner = ?", (owner,))
            else:
                self._db.executemany("DELETE FROM claims WHERE key = ? AND owner = ?",
                                     [(k, owner) for k in _unique(keys)])

    @_guarded
    def held_by_others(self, keys, owner: str) -> dict[str, tuple[str, float]]:
        """``{key: (owner, expires)}`` of the live claims on ``keys`` held by owners other than ``owner``."""
        keys, now = _unique(keys), time.time()
        return {key: (holder, expires) for chunk in _chunks(keys)
                for key, holder, expires in self._live_claims(chunk, owner, now)}

    def _live_claims(self, keys, owner: str, now: float) -> list[tuple[str, str, float]]:
        """``(key, owner, expires)`` of the claims on ``keys`` (one chunk) held at ``now`` by owners other than
        ``owner``, without those of processes of this host that no longer run (:func:`_gone_owners`)."""
        marks = ", ".join("?" * len(keys))
        claims = self._db.execute(
            f"SELECT key, owner, expires FROM claims WHERE key IN ({marks}) AND owner != ? AND expires > ?",
            (*keys, owner, now)).fetchall()
        gone = _gone_owners(holder for _, holder, _ in claims)
        return [claim for claim in claims if claim[1] not in gone]

    # ------------------------------------------------------------------ runs
    @_guarded
    def put(self, key: str, config: dict, record: dict, owner: str | None = None) -> None:
        """Store one finished run (``record`` from :func:`fedopt.sweep.execute.execute_run`) and drop the claim
        on it, in one transaction committed at once.

        The claim is dropped whoever holds it (``owner``, the claimant, is accepted for the callers that pass
        it): a stored run needs no lease, and :meth:`claim` skips it from now on.
        """
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
            self._db.execute("DELETE FROM claims WHERE key = ?", (key,))

    @_guarded
    def delete(self, keys) -> None:
        """Drop the stored runs ``keys`` (their sweeps keep listing them as missing)."""
        with self._transaction():
            self._db.executemany("DELETE FROM runs WHERE key = ?", [(k,) for k in keys])

    @_guarded
    def statuses(self) -> dict[str, str]:
        """``{key: status}`` of every stored run."""
        return {row[0]: row[1] for row in self._db.execute("SELECT key, status FROM runs")}

    @_guarded
    def count(self, status: str | None = None) -> int:
        """How many runs are stored (with ``status``), across all sweeps."""
        if status is None:
            return self._db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        return self._db.execute("SELECT COUNT(*) FROM runs WHERE status = ?", (status,)).fetchone()[0]

    @_guarded
    def members(self, ref: str, with_history: bool = True) -> list[dict]:
        """The runs of the sweep ``ref`` (id, id prefix or experiment name: its latest sweep) in sweep order:
        grid, labels, key, status, config, final metrics, history. Runs not stored yet come back with
        ``status`` None."""
        sweep = self._resolve(ref)
        columns = "r.status, r.config, r.rounds_done, r.run_seconds, r.wall_seconds, r.error, r.backend, " + \
            ", ".join(f"r.final_{c}" for c in FINAL_COLUMNS) + (", r.history" if with_history else "")
        rows = self._db.execute(
            f"SELECT m.grid, m.labels, m.key, {columns} FROM members m LEFT JOIN runs r ON r.key = m.key "
            "WHERE m.sweep = ? ORDER BY m.position", (sweep,)).fetchall()
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

    @_guarded
    def run(self, key: str) -> dict | None:
        """One stored run as a dict (config and history decoded), or None."""
        row = self._db.execute("SELECT * FROM runs WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        item = dict(row)
        item["config"] = json.loads(item["config"])
        item["history"] = json.loads(item["history"]) if item["history"] else None
        return item

    # ------------------------------------------------------------------ tidy data
    def records(self, ref: str | None = None):
        """One flat dict per stored run per evaluated round, for :meth:`to_pandas` or plotting by hand.

        Keys: ``sweep`` (when ``ref`` is given), ``experiment``, ``grid``, ``key``, ``status``, ``seed``, every
        configuration field with dotted names (``algorithm.lr_local``, ``dataset.n_clients``, ...), with ``ref``
        the grid point (``point.`` and each axis of the grid, its value as written: ``point.params.alpha``,
        ``point.algorithm.lr_local`` = ``"alpha / Q"``), then the history columns (``round``, ``stationarity``,
        ...). With ``ref`` (a sweep id, prefix or experiment name) the stored runs of that sweep, one per grid
        point: two points computing the same run repeat its rows, told apart by their ``point.`` keys. Without
        it, every stored run once, named by the latest sweep listing it, without ``point.`` keys (a run shared by
        grid points has no one point). A run without history (failed before round 0) gives one dict without
        metrics.
        """
        for head, metrics in self._tidy(ref):
            if not metrics:
                yield head
            for row in metrics:
                yield {**head, **row}

    def _tidy(self, ref):
        """``(head, [history rows])`` per run: what :meth:`records` flattens."""
        try:
            if ref is not None:
                sweep = self._resolve(ref)
                rows = self._db.execute(
                    "SELECT ? AS sweep, s.experiment, m.grid, m.labels, r.key, r.status, r.config, r.history "
                    "FROM members m JOIN sweeps s ON s.id = m.sweep JOIN runs r ON r.key = m.key "
                    "WHERE m.sweep = ? ORDER BY m.position", (sweep, sweep))
            else:
                rows = self._db.execute(
                    "SELECT s.experiment, m.grid, r.key, r.status, r.config, r.history FROM runs r "
                    "LEFT JOIN members m ON m.rowid = (SELECT m2.rowid FROM members m2 JOIN sweeps s2 "
                    "ON s2.id = m2.sweep WHERE m2.key = r.key ORDER BY s2.seq DESC, m2.position LIMIT 1) "
                    "LEFT JOIN sweeps s ON s.id = m.sweep ORDER BY r.finished, r.key")
            for r in rows:
                config = _flatten(json.loads(r["config"]))
                head = {"sweep": r["sweep"]} if ref is not None else {}
                head.update(experiment=r["experiment"], grid=r["grid"], key=r["key"], status=r["status"],
                            seed=config.pop("seed", None))
                head.update(config)
                if ref is not None:
                    head.update({POINT + k: v for k, v in json.loads(r["labels"]).items() if k != "seed"})
                history = json.loads(r["history"]) if r["history"] else {}
                history = {c: history[c] for c in sorted(history, key=_column_order)}
                length = max((len(v) for v in history.values()), default=0)
                metrics = [{c: (v[i] if i < len(v) else None) for c, v in history.items()} for i in range(length)]
                yield head, metrics
        except sqlite3.Error as err:
            raise _explain(self.path, err) from None

    def to_pandas(self, ref: str | None = None):
        """The runs as a tidy :class:`pandas.DataFrame`: one row per run per evaluated round (see :meth:`records`),
        configuration columns first, then the grid point (with ``ref``), history columns last; metrics are NaN
        for a run without history."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("Store.to_pandas needs pandas: pip install pandas "
                              "(Store.records gives the same rows as plain dicts)") from None
        rows, heads, history_columns = [], {}, {"round": None}
        for head, metrics in self._tidy(ref):
            heads.update(dict.fromkeys(head))
            for row in metrics or [{}]:
                history_columns.update(dict.fromkeys(row))
                rows.append({**head, **row})
        columns = head_columns(heads) + [c for c in history_columns if c not in heads]
        if not rows:
            columns = no_run_columns(ref is not None)
        return pd.DataFrame(rows, columns=columns)


__all__ = ["FINAL_COLUMNS", "STATUSES", "Store", "StoreError", "provenance"]
