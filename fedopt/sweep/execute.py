"""Executing the runs of a sweep: in this process, in a local process pool, or on a Dask cluster.

The runs are executed in batches (:mod:`fedopt.sweep.batching`, ``batch=`` of :func:`run_sweep`,
``--batch``): compatible runs (other seeds, real hyperparameters, regularization strengths) run
together as one :func:`fedopt.run_batch`, one task of the executor. Every executor calls
:func:`execute_batch` on a list of plain configuration dicts and sends back one plain result dict
per run; only the process that owns the :class:`~fedopt.sweep.store.Store` writes them, one commit
per run as its batch returns (a sweep killed during a batch loses that batch's runs, nothing
stored before). A run that raises is stored as ``failed`` with its traceback and the sweep goes
on; a run stopped by the divergence rule of :func:`fedopt.run` (or by NaN/inf) is stored as
``diverged`` with its history. Each process runs one untimed round of every kind of run before
the first one (:func:`_warm_up`), so that compiling kernels does not count as a run's training time.

* ``serial``: one batch after the other in this process (debugging, tiny sweeps).
* ``local``: a :class:`concurrent.futures.ProcessPoolExecutor` of ``workers`` processes (default:
  the machine's cores), started with ``forkserver`` (``spawn`` where that is missing), never
  ``fork``: Numba's thread pool must not be forked. With several workers each one runs Numba and
  BLAS on one thread, so the cores are shared by runs rather than by the threads of one run.
  Workers ignore SIGINT (the owner stops them) and exit by themselves within a second when the
  owner process is gone, even after SIGKILL; the forkserver and the resource tracker then exit
  too, as the last holders of their pipes are gone. A worker that dies (out of memory, a crash)
  breaks the whole pool: a fresh one is started, the batches that were in flight run again, and a
  batch is stored as ``failed`` only when it kills a worker with no other batch in flight.
* ``dask``: the batches are submitted to a Dask cluster, one task each: an existing cluster at
  ``scheduler`` (``tcp://host:8786``) or a ``LocalCluster`` of ``workers`` single-threaded workers
  started here, whose tasks run Numba (and, in worker processes, BLAS) on one thread when there
  are several, as the local pool's do; an existing cluster's workers keep their own settings. Results come back to
  this process as they finish. Every worker needs fedopt installed and the data sets at the same
  paths.

The three runners are in :mod:`fedopt.sweep.runners`; this module claims, drives and stores.

**Sharing a store.** Any number of sweeps (processes on the machine that holds the store, each
with its local pool or its Dask cluster) may work on one store at once (SQLite's locks are not
reliable on network file systems): each claims the runs it executes, a few batches at a time (the
runs of a batch together), with a lease in the store (:meth:`~fedopt.sweep.store.Store.claim`),
renews its leases while the runs go on, and leaves alone the runs other sweeps hold (a batch runs
without them). When only runs held by others are left, it waits for them and takes over those
whose lease expires (their sweep was killed); such runs come back in the batches they left.

**Signals.** SIGTERM is handled like Ctrl-C: the workers are stopped, what finished is kept, the
claims are released and :class:`SweepSummary` says ``interrupted`` with the signal (the command
exits 143, or 130 for Ctrl-C). A signal that arrives while runs are being stored waits until the
runs that came back with it (a batch, or several) are committed, one row at a time.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import sys
import threading
import time
import traceback
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from fedopt.sweep.batching import batch_option, batches, largest_first, timed_alone
from fedopt.sweep.runners import make_runner

EXECUTORS = ("local", "dask", "serial")
_CACHE: OrderedDict = OrderedDict()
_CACHE_SIZE = 4
#: Seconds between two looks at runs held by other sweeps.
POLL_SECONDS = 1.0
#: Failed runs whose error :class:`SweepSummary` keeps.
KEPT_ERRORS = 3
#: The kinds of run (:func:`_warm_up`) this process has run once, untimed.
_WARM: set = set()


# ------------------------------------------------------------------------------------------ one run
def load_dataset(config: dict):
    """The federated data set of a resolved run configuration, or None for a synthetic operator."""
    from fedopt.sweep.config import _datasets

    if config.get("dataset") is None:
        return None
    options = dict(config["dataset"])
    return _datasets()[options.pop("name")](**options)


def make_problem(config: dict, dataset):
    """The problem of a resolved run configuration on ``dataset`` (None for a synthetic operator)."""
    from fedopt.problems import PROBLEMS

    options = dict(config["problem"])
    cls = PROBLEMS[options.pop("name")]
    backend = config.get("backend", "auto")
    if dataset is None:
        return cls(backend=backend, **options)
    return cls(dataset, backend=backend, **options)


def build(config: dict):
    """``(problem, regularizer)`` of a resolved run configuration; problems are cached per process."""
    cache_key = json.dumps([config["dataset"], config["problem"], config.get("backend", "auto")], sort_keys=True)
    problem = _CACHE.get(cache_key)
    if problem is None:
        problem = make_problem(config, load_dataset(config))
        _CACHE[cache_key] = problem
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    else:
        _CACHE.move_to_end(cache_key)
    return problem, make_regularizer(config["regularizer"], problem)


def make_regularizer(table: dict, problem=None):
    """The regularizer of a ``[run.regularizer]`` table; with ``block``, on that block of ``problem``'s
    parameters only (:func:`fedopt.regularizers.on_block`)."""
    from fedopt import regularizers

    options = dict(table)
    block = options.pop("block", None)
    regularizer = regularizers.make(options.pop("name"), **options)
    return regularizer if block is None or problem is None else regularizers.on_block(regularizer, problem, block)


def run_kind(configs: list) -> str:
    """What selects the kernels that the runs ``configs`` (one run, or a batch) compile: the method, the
    problem, the regularizer and its block, the data set's name and dtype, the backend, full or
    minibatch gradients, and one run or a batch."""
    first = configs[0]
    data = {k: v for k, v in (first.get("dataset") or {}).items() if k in ("name", "dtype")}
    return json.dumps([first["algorithm"]["name"], first["problem"], first["regularizer"].get("name"),
                       first["regularizer"].get("block"), data, first.get("backend", "auto"),
                       first["algorithm"].get("batch_size") is None, len(configs) > 1], sort_keys=True, default=str)


def _warm_up(configs: list) -> None:
    """Run the first of ``configs`` (two of them for a batch) for one round, untimed and discarded,
    the first time this process meets their kind of run (:func:`run_kind`), so that compiling or
    loading its kernels does not count as training time.

    On a cold Numba cache the first run of a kind compiles for seconds (37 s for the MLP with a
    nuclear norm on two cores), which would land in one run's ``seconds``: the time of the FedCanon
    experiments' curves and time-ratio claims. A warm-up that fails is ignored: the run itself
    reports the error.
    """
    from fedopt.batch import run_batch
    from fedopt.run import run

    kind = run_kind(configs)
    if kind in _WARM:
        return
    _WARM.add(kind)
    name, short = configs[0]["algorithm"]["name"], configs[:2]
    untimed = {"rounds": 1, "eval_every": 1, "tol": None, "divergence": False, "progress": False}
    with contextlib.suppress(Exception):
        if len(short) == 1:
            run(name, *build(short[0]), **{**_run_options(short[0]), **untimed})
        else:
            run_batch(name, *_built(short), **{**_batch_options(short), **untimed})


def _run_options(config: dict) -> dict:
    """:func:`fedopt.run`'s keywords for a resolved configuration: its run options and hyperparameters."""
    return {"rounds": config["rounds"], "seed": config["seed"], "eval_every": config["eval_every"],
            "metric_gamma": config.get("metric_gamma"), "tol": config.get("tol"),
            "divergence": config.get("divergence", True), "eval_clients": config.get("eval_clients"),
            **{k: v for k, v in config["algorithm"].items() if k != "name"}}


def _batch_options(configs: list) -> dict:
    """:func:`fedopt.run_batch`'s keywords for compatible configurations: one value per run where they may differ."""
    first = configs[0]
    return {"rounds": first["rounds"], "seeds": [c["seed"] for c in configs], "eval_every": first["eval_every"],
            "metric_gamma": [c.get("metric_gamma") for c in configs], "tol": first.get("tol"),
            "divergence": first.get("divergence", True),
            **{k: [c["algorithm"][k] for c in configs] for k in first["algorithm"] if k != "name"}}


def _built(configs: list) -> tuple[list, list]:
    """``(problems, regularizers)`` of the configurations (the problems cached: one per partition)."""
    problems, regularizers = zip(*(build(config) for config in configs), strict=True)
    return list(problems), list(regularizers)


def execute_run(config: dict, progress: bool | None = False, callback=None) -> dict:
    """Run one configuration and return a plain, picklable record (never raises for a failing run).

    ``status`` is ``done``, ``diverged`` or ``failed``; ``history`` is ``{column: list}``;
    ``error`` the message or traceback; ``run_seconds`` the time inside :func:`fedopt.run`,
    ``wall_seconds`` including the data and problem set-up. ``progress`` and ``callback`` go to
    :func:`fedopt.run` (None: a progress line on a terminal).
    """
    import fedopt
    from fedopt.run import DivergenceError

    start = time.perf_counter()
    record = {"status": "failed", "history": None, "error": None, "run_seconds": None, "host": socket.gethostname(),
              "backend": None, "fedopt_version": getattr(fedopt, "__version__", None)}
    try:
        _warm_up([config])
        problem, regularizer = build(config)
        record["backend"] = problem.backend.name
        began = time.perf_counter()
        try:
            result = fedopt.run(config["algorithm"]["name"], problem, regularizer, progress=progress,
                                callback=callback, **_run_options(config))
            record["status"] = "done"
        except DivergenceError as err:
            result = err.result
            record["status"], record["error"] = "diverged", str(err)
        record["run_seconds"] = time.perf_counter() - began
        record["history"] = {k: v.tolist() for k, v in result.history.as_dict().items()}
    except Exception:  # a failing run is data: store it and go on
        record["error"] = traceback.format_exc()[-8000:]
    record["wall_seconds"] = time.perf_counter() - start
    return record


def execute_batch(configs, progress: bool | None = False, callback=None) -> list[dict]:
    """Run compatible configurations (:func:`fedopt.sweep.batching.batches`) as one
    :func:`fedopt.run_batch` and return one record per configuration, as :func:`execute_run` does.

    Each run's ``run_seconds`` is its share of the time inside :func:`fedopt.run_batch` (the time
    divided by the number of runs), and ``wall_seconds`` its share of the whole, set-up included.
    When the batch fails as a whole (its set-up or :func:`fedopt.run_batch` raises), each
    configuration runs alone through :func:`execute_run`, so that a bad one fails alone with its
    traceback. ``callback`` goes to :func:`fedopt.run_batch` (or :func:`fedopt.run` for one configuration).
    """
    import fedopt

    configs = list(configs)
    if len(configs) == 1:
        return [execute_run(configs[0], progress=progress, callback=callback)]
    start = time.perf_counter()
    try:
        _warm_up(configs)
        problems, regularizers = _built(configs)
        began = time.perf_counter()
        results = fedopt.run_batch(configs[0]["algorithm"]["name"], problems, regularizers, progress=progress,
                                   callback=callback, **_batch_options(configs))
        seconds = (time.perf_counter() - began) / len(configs)
        histories = [{k: v.tolist() for k, v in result.history.as_dict().items()} for result in results]
    except Exception:  # run each one alone: the failing ones are stored as failed, the others as usual
        # with the callback: the serial executor renews its leases through it, over runs that may take long
        return [execute_run(config, progress=progress, callback=callback) for config in configs]
    wall = (time.perf_counter() - start) / len(configs)
    common = {"run_seconds": seconds, "wall_seconds": wall, "host": socket.gethostname(),
              "backend": problems[0].backend.name, "fedopt_version": getattr(fedopt, "__version__", None)}
    return [{"status": "done" if result.error is None else "diverged", "history": history,
             "error": None if result.error is None else str(result.error), **common}
            for result, history in zip(results, histories, strict=True)]


# -------------------------------------------------------------------------------------- the sweep
@dataclass
class SweepSummary:
    """What :func:`run_sweep` did.

    ``total`` distinct runs in the sweep ``sweep`` (its id in the store), ``skipped`` (stored
    before it started), ``executed`` here with their ``statuses``, ``by_others`` (finished by other
    sweeps on the same store meanwhile), ``counts`` (every run of this sweep by stored status, and
    ``missing``), ``failed_errors`` (the last line of the first errors of runs that failed here),
    and whether it was ``interrupted`` and by which ``signal`` (``"SIGINT"``, ``"SIGTERM"``).
    """

    experiment: str
    total: int
    skipped: int
    executed: int = 0
    statuses: dict = field(default_factory=dict)
    interrupted: bool = False
    seconds: float = 0.0
    sweep: str | None = None
    by_others: int = 0
    counts: dict = field(default_factory=dict)
    failed_errors: list = field(default_factory=list)
    signal: str | None = None

    @property
    def complete(self) -> bool:
        """Every run of the sweep is stored ``done``."""
        return not self.interrupted and self.counts.get("done", 0) == self.total

    @property
    def ok(self) -> bool:
        """No run of the sweep failed and it was not interrupted (diverged runs are results)."""
        return not self.interrupted and not self.counts.get("failed", 0) and not self.counts.get("missing", 0)

    def __str__(self) -> str:
        counts = ", ".join(f"{n} {s}" for s, n in sorted(self.statuses.items())) or "nothing new"
        text = (f"{self.experiment}: {self.total} runs, {self.skipped} already stored, {self.executed} executed "
                f"({counts})")
        if self.by_others:
            text += f", {self.by_others} by other sweeps on this store"
        text += f" in {self.seconds:.1f}s; "
        if self.interrupted:
            by = f" by {self.signal}" if self.signal else ""
            return text + f"interrupted{by}; run the sweep again to finish it"
        if self.complete:
            return text + "complete"
        bad = [f"{self.counts[s]} {s}" for s in ("failed", "diverged", "missing") if self.counts.get(s)]
        text += f"finished with {', '.join(bad)} of {self.total} runs"
        if self.failed_errors:
            text += f"; first error: {self.failed_errors[0]}"
        elif self.counts.get("failed"):
            text += "; the failed runs were stored before: --retry-failed runs them again"
        return text


class _Progress:
    """A one-line progress bar on stderr (or nothing when ``enabled`` is False)."""

    def __init__(self, total, enabled, label):
        self.total, self.enabled, self.label = total, enabled, label
        self.done, self.bad, self.others, self.waiting, self.start = 0, 0, 0, 0, time.perf_counter()

    def update(self, status=None, others: int = 0, waiting: int | None = None):
        if status is not None:
            self.done += 1
            self.bad += status != "done"
        self.others += others
        self.waiting = self.waiting if waiting is None else waiting
        if not self.enabled:
            return
        width = 30
        count = self.done + self.others
        filled = int(width * count / max(self.total, 1))
        elapsed = time.perf_counter() - self.start
        eta = f", eta {elapsed / self.done * (self.total - count):.0f}s" if self.done else ""
        extra = f", {self.bad} not done" if self.bad else ""
        extra += f", {self.others} by other sweeps" if self.others else ""
        extra += f", waiting for {self.waiting} held by other sweeps" if self.waiting else ""
        print(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {count}/{self.total} runs{extra}, "
              f"{elapsed:.0f}s{eta} ", end="", file=sys.stderr, flush=True)

    def close(self):
        if self.enabled and self.total:
            print(file=sys.stderr, flush=True)


def plan(specs, store, resume: bool = True, retry_failed: bool = False):
    """The specs to execute (one per key): all when not ``resume``, else those not stored (and failed
    ones on request); and how many distinct runs are skipped."""
    stored = store.statuses() if resume else {}
    todo, seen = [], set()
    for spec in specs:
        if spec.key in seen:
            continue
        seen.add(spec.key)
        status = stored.get(spec.key)
        if status is None or (retry_failed and status == "failed"):
            todo.append(spec)
    return todo, len(seen) - len(todo)


def default_owner() -> str:
    """The claimant of a sweep's runs in the store: ``host:pid:random``."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def check_options(executor: str = "local", workers: int | None = None, scheduler: str | None = None,
                  lease: float = 60.0) -> None:
    """Refuse the options of :func:`run_sweep` that no sweep takes (`fedopt sweep` checks them before it opens
    the store)."""
    if executor not in EXECUTORS:
        raise ValueError(f"executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")
    if scheduler is not None and executor != "dask":
        raise ValueError("--scheduler needs --executor dask")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ValueError(f"workers must be >= 1 (got {workers!r}); omit --workers to use every core")
    if not (isinstance(lease, (int, float)) and lease > 0):
        raise ValueError(f"lease must be a number of seconds > 0, got {lease!r}")


def run_sweep(experiment, store, executor: str = "local", workers: int | None = None, scheduler: str | None = None,
              backend: str | None = None, resume: bool = True, retry_failed: bool = False,
              progress: bool | None = None, dask_processes: bool = True, on_result=None, lease: float = 60.0,
              owner: str | None = None, batch="auto") -> SweepSummary:
    """Execute the runs of ``experiment`` that ``store`` lacks, in batches; store each run as its batch returns.

    Parameters
    ----------
    experiment : Experiment
    store : Store
    executor : {"local", "dask", "serial"}
    workers : int or None
        Local processes or LocalCluster workers (default: the number of cores); at least 1.
    scheduler : str or None
        With ``executor="dask"``: the address of a running scheduler; None starts a LocalCluster.
    backend : str or None
        Run every configuration on this backend (it is not part of a run's key).
    resume : bool
        Skip the runs already stored (default); False runs everything again and replaces it.
    retry_failed : bool
        Run the stored ``failed`` runs again (``diverged`` ones are results and stay).
    progress : bool or None
        Show a progress bar on stderr (default: when stderr is a terminal).
    dask_processes : bool
        LocalCluster workers are processes (default) or threads of this process.
    on_result : callable or None
        ``on_result(spec, record)`` after each run executed here is stored.
    lease : float
        Seconds a claim on a run lasts without renewal; renewed every ``lease / 3`` seconds while
        the runs go on (by the serial executor before each batch and between the evaluations of its run or batch, so a
        lease shorter than the time between two evaluations lets another sweep run them too). A
        sweep killed without releasing its claims holds them this long.
    owner : str or None
        The claimant's name in the store (default :func:`default_owner`).
    batch : "auto", "off" or int
        How runs are grouped into batches of :func:`fedopt.run_batch` (:mod:`fedopt.sweep.batching`):
        ``"auto"`` (default) cuts the groups of compatible runs into batches of at most
        ``ceil(runs / (2 workers))`` runs (all of them for one worker; at most 64), an integer ``N``
        into at most ``N``; ``"off"`` runs each run alone. The largest batches start first. The
        runs a claim on wall time compares run alone in any case (:func:`~fedopt.sweep.batching.timed_alone`).

    Returns
    -------
    SweepSummary
        ``interrupted`` is True after Ctrl-C or SIGTERM; what finished before is stored.
    """
    check_options(executor, workers, scheduler, lease)
    batch = batch_option(batch)
    owner = owner or default_owner()
    specs = experiment.expand()
    if backend is not None:
        specs = [type(s)(s.key, {**s.config, "backend": backend}, s.grid, s.labels) for s in specs]
    sweep_id = store.register(experiment, specs)
    todo, skipped = plan(specs, store, resume, retry_failed)
    rerun = ("done", "diverged", "failed") if not resume else ("failed",) if retry_failed else ()
    summary = SweepSummary(experiment.name, total=len({s.key for s in specs}), skipped=skipped, sweep=sweep_id)
    show = sys.stderr.isatty() if progress is None else bool(progress)
    bar = _Progress(len(todo), show, experiment.name)
    start = time.perf_counter()
    guard = _Signals()
    claims = _Claims(store, owner, lease, rerun, guard)

    def finished(spec, record):
        with guard.deferred():  # the row is committed whole and counted, whatever signal arrives
            store.put(spec.key, spec.config, record, owner=owner)
            summary.executed += 1
            summary.statuses[record["status"]] = summary.statuses.get(record["status"], 0) + 1
            if record["status"] == "failed" and len(summary.failed_errors) < KEPT_ERRORS:
                lines = [line for line in (record.get("error") or "").strip().splitlines() if line.strip()]
                summary.failed_errors.append(lines[-1].strip() if lines else "no error message")
        bar.update(record["status"])
        if on_result is not None:
            on_result(spec, record)

    runner, clean = None, False
    with guard:
        try:
            if todo:
                runner = make_runner(executor, workers, len(todo), scheduler, dask_processes, claims,
                                     execute_batch)
                units = batches(todo, batch, runner.workers, alone=timed_alone(experiment, specs))
                _drive(runner, largest_first(units), claims, finished, bar, summary)
            clean = True
        except KeyboardInterrupt as err:  # Ctrl-C, or SIGTERM through _Signals
            summary.interrupted = True
            summary.signal = getattr(err, "signal", "SIGINT")
        finally:
            with guard.deferred(raise_pending=False):
                if runner is not None and clean:
                    runner.close()
                elif runner is not None:  # after an error or a signal the workers are stopped, not waited for
                    runner.stop()
                with contextlib.suppress(Exception):  # a broken store must not hide the first error
                    store.release(owner)
            bar.close()
            summary.seconds = time.perf_counter() - start
    stored = store.statuses()
    keys = {s.key for s in specs}
    counts = {status: 0 for status in ("done", "diverged", "failed", "missing")}
    for key in keys:
        counts[stored.get(key, "missing")] += 1
    summary.counts = counts
    return summary


class _Claims:
    """This sweep's claims in the store: taken a few at a time, renewed, released at the end."""

    def __init__(self, store, owner, lease, rerun, guard):
        self.store, self.owner, self.lease, self.rerun, self.guard = store, owner, float(lease), rerun, guard
        self.renewed = time.monotonic()

    def take(self, keys) -> list:
        with self.guard.deferred():
            return self.store.claim(keys, self.owner, self.lease, rerun=self.rerun)

    def held(self, keys) -> dict:
        return self.store.held_by_others(keys, self.owner)

    def renew(self, force: bool = False) -> None:
        """Extend the leases when a third of one has passed since the last renewal (or now, with ``force``)."""
        if force or time.monotonic() - self.renewed >= self.lease / 3:
            with self.guard.deferred():
                self.store.renew(self.owner, self.lease)
            self.renewed = time.monotonic()

    def renew_callback(self, state, row) -> None:
        """For :func:`fedopt.run` in this process: renew between evaluations of a long run."""
        self.renew()


def _drive(runner, units, claims, finished, bar, summary) -> None:
    """Claim, execute and store the batches ``units`` (lists of specs) until each run is stored, here or by
    another sweep. The runs of a batch are claimed together and go to the runner as one task; a run held by
    another sweep waits, and comes back with the others of its batch freed at the same look."""
    spec_of = {spec.key: spec for unit in units for spec in unit}
    queue = deque(tuple(spec.key for spec in unit) for unit in units)
    waiting: dict = {}  # key held by a live claim of another sweep -> the batch it left
    polled = time.monotonic()

    def claim(count):
        """Up to ``count`` batches of runs now claimed by this sweep."""
        got = []
        while len(got) < count and queue:
            looked = [queue.popleft() for _ in range(min(count - len(got), len(queue)))]
            mine = set(claims.take([key for unit in looked for key in unit]))
            rest = [key for unit in looked for key in unit if key not in mine]
            held = claims.held(rest) if rest else {}
            for unit in looked:
                taken = [spec_of[key] for key in unit if key in mine]
                if taken:
                    got.append(taken)
                for key in unit:
                    if key in held:
                        waiting[key] = unit
                    elif key not in mine:  # stored by another sweep since this one started
                        summary.by_others += 1
                        bar.update(others=1)
        return got

    def poll():
        """Runs no longer held by a live claim go back to the queue (stored ones are then counted)."""
        held = claims.held(list(waiting))
        freed: dict = {}
        for key in [k for k in waiting if k not in held]:
            freed.setdefault(waiting.pop(key), []).append(key)
        for keys in freed.values():
            queue.appendleft(tuple(keys))
        bar.update(waiting=len(waiting))

    timeout = min(claims.lease / 3, POLL_SECONDS)
    while True:
        free = runner.capacity - runner.pending
        if free > 0 and queue:
            for unit in claim(free):
                runner.submit(unit)
        if not runner.pending:
            if not waiting and not queue:
                return
            if waiting:
                bar.update(waiting=len(waiting))
                time.sleep(POLL_SECONDS)
                poll()
                polled = time.monotonic()
            continue
        returned = runner.wait(timeout)
        with claims.guard.deferred():  # a signal now waits until every run the runner gave back is stored
            for spec, record in returned:
                finished(spec, record)
        claims.renew()
        if waiting and time.monotonic() - polled >= POLL_SECONDS:
            poll()
            polled = time.monotonic()


# ------------------------------------------------------------------------------------------ signals
class SweepInterrupted(KeyboardInterrupt):
    """SIGTERM (or SIGINT) during :func:`run_sweep`, handled like Ctrl-C; ``signal`` is its name."""

    def __init__(self, name: str):
        super().__init__(name)
        self.signal = name


class _Signals:
    """While active (in the main thread), SIGTERM and SIGINT raise :class:`SweepInterrupted`, except inside
    :meth:`deferred` blocks (store writes), after which they are raised; previous handlers are restored."""

    def __init__(self):
        self.depth, self.pending, self.previous = 0, None, {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for number in (signal.SIGTERM, signal.SIGINT):
                current = signal.getsignal(number)
                if number == signal.SIGINT and current is not signal.default_int_handler:
                    continue  # Ctrl-C ignored or handled by the caller: leave it so
                self.previous[number] = current
                signal.signal(number, self._handle)
        return self

    def __exit__(self, *exc):
        for number, handler in self.previous.items():
            signal.signal(number, handler)
        self.previous.clear()

    def _handle(self, number, frame):
        name = signal.Signals(number).name
        if self.depth:
            self.pending = self.pending or name
        else:
            raise SweepInterrupted(name)

    @contextlib.contextmanager
    def deferred(self, raise_pending: bool = True):
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
        if raise_pending and not self.depth and self.pending:
            name, self.pending = self.pending, None
            raise SweepInterrupted(name)


__all__ = ["EXECUTORS", "SweepInterrupted", "SweepSummary", "build", "check_options", "default_owner", "execute_batch",
           "execute_run", "load_dataset", "make_problem", "make_regularizer", "plan", "run_kind", "run_sweep"]
