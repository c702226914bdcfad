"""Where the runs of a sweep execute: this process, a local process pool, or a Dask cluster.

A runner takes batches, lists of specs, as one task each (``submit``), gives back ``(spec, record)``
pairs as batches finish (``wait``), and stops its workers at once (``stop``) or after the batches in
flight (``close``); ``capacity`` is how many batches it keeps in flight, ``pending`` how many are,
and ``workers`` how many run at once. What each executor does (threads per worker, start method,
workers that exit with their owner) is described in :mod:`fedopt.sweep.execute`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from collections import deque
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

#: Seconds to reach a Dask scheduler before giving up.
DASK_CONNECT_TIMEOUT = 5.0


def make_runner(executor, workers, todo, scheduler, dask_processes, claims, run):
    """The runner of ``executor`` for ``todo`` runs; ``run(configs) -> records`` executes one batch."""
    if executor == "serial":
        return _Serial(claims, run)
    if executor == "local":
        return _Local(min(int(workers or os.cpu_count() or 1), todo), run)
    return _Dask(workers, scheduler, dask_processes, run)


class _Serial:
    """Runs one batch at a time in this process, renewing the leases between the batch's evaluations."""

    capacity = workers = 1

    def __init__(self, claims, run):
        self.claims, self.run, self.queue = claims, run, deque()

    @property
    def pending(self) -> int:
        return len(self.queue)

    def submit(self, unit):
        self.queue.append(unit)

    def wait(self, timeout):
        if not self.queue:
            return []
        unit = self.queue.popleft()
        # a whole lease before the first evaluation, which comes only after the set-up and the warm-up's compiling
        self.claims.renew(force=True)
        records = self.run([spec.config for spec in unit], callback=self.claims.renew_callback)
        return list(zip(unit, records, strict=True))

    def stop(self):
        self.queue.clear()

    def close(self):
        self.queue.clear()


class _Local:
    """A pool of ``workers`` processes (see the module docstring).

    A worker that dies (killed by the out-of-memory killer, a segfault) breaks the whole pool: every
    batch in flight fails with :class:`BrokenProcessPool`, the culprit and the innocent alike. Those
    batches are not stored: the pool is started again and they run again. One that is in flight at
    a second break runs alone (nothing else in flight) and is stored as ``failed`` only when it
    breaks the pool alone, as is a batch that was the only one in flight when the pool broke.
    """

    def __init__(self, workers: int, run):
        self.run, self.workers = run, workers
        self.capacity = 2 * workers
        self.pool = self._start()
        self.futures: dict = {}
        self.queue: deque = deque()  # batches taken but not yet in the pool
        self.alone: deque = deque()  # batches in flight at two breaks: each runs with nothing else in flight
        self.strikes: dict = {}  # batch (its keys) -> breaks of the pool it was in flight at

    def _start(self):
        threads = 1 if self.workers > 1 else None
        return ProcessPoolExecutor(max_workers=self.workers, mp_context=_context(), initializer=_worker_init,
                                   initargs=(threads, os.getpid(), _start_time(os.getpid())))

    @property
    def pending(self) -> int:
        return len(self.futures) + len(self.queue) + len(self.alone)

    def submit(self, unit):
        self.queue.append(unit)
        self._fill()

    def _fill(self):
        """Hand the pool what may run now: the next batch to run alone when there is one, else the queue."""
        while True:
            source = self.alone if self.alone else self.queue
            if not source or (source is self.alone and self.futures):
                return
            unit = source.popleft()
            try:
                future = self.pool.submit(self.run, [spec.config for spec in unit])
            except BrokenProcessPool:  # a worker died meanwhile (maybe idle)
                source.appendleft(unit)
                if self.futures:  # they fail too: wait() sees them and starts a fresh pool
                    return
                self._restart()
                continue
            self.futures[future] = unit

    def wait(self, timeout):
        done, _ = wait(self.futures, timeout=timeout, return_when=FIRST_COMPLETED)
        out, broken = [], []
        if any(isinstance(future.exception(), BrokenProcessPool) for future in done):
            # the pool is dead: each of its other futures fails now too, or finished before the death
            done = set(self.futures)
            wait(done, timeout=30)
        for future in done:
            unit = self.futures.pop(future)
            if future.done() and not isinstance(future.exception(), BrokenProcessPool):
                out += _records(unit, future)
            else:
                broken.append(unit)
        if broken:
            reason = self._restart()
            if len(broken) == 1:  # the only batch in flight: surely the one that killed its worker
                out += _died(broken[0], reason)
            for unit in broken if len(broken) > 1 else ():
                key = tuple(spec.key for spec in unit)
                self.strikes[key] = self.strikes.get(key, 0) + 1
                (self.alone if self.strikes[key] > 1 else self.queue).appendleft(unit)
        self._fill()
        return out

    def _restart(self) -> str:
        """Replace the broken pool by a fresh one; how its dead worker ended."""
        processes = self._workers()
        self.pool.shutdown(wait=True, cancel_futures=True)  # the broken pool's survivors were terminated
        codes = sorted({p.exitcode for p in processes if p.exitcode not in (None, 0, -signal.SIGTERM)})
        self.pool = self._start()
        return ", ".join(f"killed by {signal.Signals(-c).name}" if c < 0 and -c in signal.valid_signals()
                         else f"exit code {c}" for c in codes) or "no exit code"

    def stop(self):
        self.queue.clear()
        self.alone.clear()
        processes = self._workers()
        self.pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:  # the workers this pool started
            if process.is_alive():
                process.terminate()
        for process in processes:
            process.join(timeout=5)

    def close(self):
        self.pool.shutdown(wait=True, cancel_futures=True)

    def _workers(self) -> list:
        """The pool's worker processes (gone from the pool once it is shut down)."""
        return list((getattr(self.pool, "_processes", None) or {}).values())


def _died(unit, reason: str) -> list:
    """A ``failed`` record for each run of ``unit``, whose worker process died running it."""
    error = (f"the worker process running this batch of {len(unit)} run(s) died ({reason}): out of memory "
             "(the kernel's OOM killer sends SIGKILL), a crash (SIGSEGV), or killed from outside")
    return [(spec, {"status": "failed", "history": None, "error": error}) for spec in unit]


def _worker_init(threads: int | None, owner: int | None = None, owner_start: str | None = None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the owner handles Ctrl-C and stops the workers
    if owner is not None:
        threading.Thread(target=_exit_with_owner, args=(owner, owner_start), daemon=True,
                         name="fedopt-owner-watch").start()
    if threads:
        # Numba reads NUMBA_NUM_THREADS when it is imported: set before that, it sizes the pool. A
        # worker imports the owner's __main__ first, and a script that imports numba at its top has
        # already done so; changed then, once Numba's threads run, every compile raises.
        if "numba" not in sys.modules:
            os.environ["NUMBA_NUM_THREADS"] = str(threads)
        try:
            from threadpoolctl import threadpool_limits

            threadpool_limits(threads)
        except ImportError:  # pragma: no cover - scikit-learn brings threadpoolctl
            pass
        import numba

        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))


def _exit_with_owner(pid: int, start: str | None, every: float = 0.5) -> None:
    """Exit this worker as soon as the process ``pid`` that owns it is gone (killed without stopping it).

    A pool worker otherwise waits for work forever: it holds both ends of its call queue's pipe, so
    it never sees the owner's end close.
    """
    while _alive(pid, start):
        time.sleep(every)
    os._exit(1)


def _alive(pid: int, start: str | None) -> bool:
    """Whether ``pid`` is a live process (not a zombie) started at ``start`` (its /proc start time, when known)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process took the pid
        return False
    stat = _proc_stat(pid)
    if stat is None:  # no /proc: trust kill()
        return True
    state, started = stat
    return state not in ("Z", "X") and (start is None or started == start)


def _proc_stat(pid: int):
    """``(state, start time)`` of ``pid`` from ``/proc/PID/stat``, or None where that is unavailable."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            fields = handle.read().rpartition(")")[2].split()
    except OSError:
        return None
    return fields[0], fields[19]


def _start_time(pid: int) -> str | None:
    stat = _proc_stat(pid)
    return None if stat is None else stat[1]


def _context():
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


# -------------------------------------------------------------------------------------------- dask
def _dask_worker_setup():
    """Run on every process worker of the LocalCluster: BLAS on one thread (a per-process setting)."""
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    except ImportError:  # pragma: no cover
        pass


def _on_one_numba_thread(run, configs):
    """A LocalCluster task: the batch ``run(configs)`` with Numba on one thread. Numba's thread count
    is a setting of each thread, so it is made in the thread that runs the task: one made when the
    worker starts does not reach the worker's task threads, whose kernels then ran on every core,
    once per worker."""
    import numba

    numba.set_num_threads(1)
    return run(configs)


class _Dask:
    """Runs on a Dask cluster: an existing one at ``scheduler`` or a LocalCluster started here."""

    def __init__(self, workers, scheduler, processes, run):
        self.run = run  # an existing cluster's workers keep their own thread settings
        try:
            from distributed import Client, LocalCluster
        except ImportError as err:
            raise RuntimeError("--executor dask needs Dask's distributed scheduler: pip install "
                               "'fedopt[distributed]'") from err
        self.cluster = None
        if scheduler is None:
            n = max(1, int(workers or os.cpu_count() or 1))
            where = {"host": "127.0.0.1"} if processes else {}  # loopback TCP; threads talk in-process
            self.cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=processes,
                                        dashboard_address=None, **where)
            self.client = Client(self.cluster)
            if processes:
                self.client.run(_dask_worker_setup)
            if n > 1:  # the cores are shared by the workers, as in the local pool
                self.run = functools.partial(_on_one_numba_thread, run)
        else:
            self.client = connect(scheduler)
        self.workers = max(1, sum(self.client.nthreads().values()))
        self.capacity = 2 * self.workers
        self.futures: dict = {}

    @property
    def pending(self) -> int:
        return len(self.futures)

    def submit(self, unit):
        name = unit[0].key if len(unit) == 1 else hashlib.sha1("".join(s.key for s in unit).encode()).hexdigest()
        future = self.client.submit(self.run, [spec.config for spec in unit], key=f"fedopt-run-{name}", pure=False)
        self.futures[future] = unit

    def wait(self, timeout):
        from distributed import wait as dask_wait

        with contextlib.suppress(TimeoutError, asyncio.TimeoutError):  # distinct types before Python 3.11
            dask_wait(list(self.futures), timeout=timeout, return_when="FIRST_COMPLETED")
        out = []
        for future in [f for f in self.futures if f.done()]:
            out += _records(self.futures.pop(future), future)
            future.release()
        return out

    def stop(self):
        with contextlib.suppress(Exception):
            self.client.cancel(list(self.futures))
        self.futures.clear()
        self.close()

    def close(self):
        if self.client is not None:
            self.client.close()
            self.client = None
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None


def _records(unit, future) -> list:
    """``(spec, record)`` for each run of the batch ``unit`` that ``future`` ran; when the task itself
    failed (a lost Dask worker; a dead local worker is handled by :class:`_Local`), a ``failed`` record
    with the traceback for each: stored, and the sweep goes on."""
    try:
        return list(zip(unit, future.result(), strict=True))
    except Exception:
        record = {"status": "failed", "history": None, "error": traceback.format_exc()[-8000:]}
        return [(spec, dict(record)) for spec in unit]


def connect(scheduler: str, timeout: float = DASK_CONNECT_TIMEOUT):
    """A ``distributed.Client`` on the scheduler at ``scheduler``; RuntimeError naming it when it is not reached."""
    from distributed import Client

    try:
        return Client(scheduler, timeout=timeout)
    except (OSError, TimeoutError, asyncio.TimeoutError) as err:
        raise RuntimeError(f"cannot reach the Dask scheduler at {scheduler} within {timeout:g} s ({err}); start "
                           "it with `dask scheduler` on that machine, or check the address and the firewall") \
            from None


__all__ = ["DASK_CONNECT_TIMEOUT", "connect", "make_runner"]
