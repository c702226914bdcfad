"""``fedopt bench --sweep``: runs per second of the demo sweep with the local executor.

Each measurement sweeps the whole ``speedup_demo`` experiment into a fresh temporary store with
``workers`` local processes and divides the number of runs by the wall time, which includes
starting the workers (they load the Numba kernels from the on-disk cache) and writing the store.
One run in this process first fills the kernel cache, so that compilation is not measured.
"""

from __future__ import annotations

import os
import tempfile
import time


def bench_sweep(workers=(1, 2), experiment: str = "speedup_demo", stream=None) -> list[dict]:
    """Measure the sweep of ``experiment`` once per worker count; print and return the rows."""
    import sys

    from fedopt.sweep.config import load_experiment
    from fedopt.sweep.execute import execute_run, run_sweep
    from fedopt.sweep.store import Store

    stream = sys.stdout if stream is None else stream
    exp = load_experiment(experiment)
    specs = exp.expand()
    execute_run({**specs[0].config, "rounds": 1})  # compile (or load) the kernels once
    rows = []
    print(f"{experiment}: {len({s.key for s in specs})} runs, local executor, {os.cpu_count()} cores", file=stream)
    print(f"    {'workers':>7s} {'seconds':>8s} {'runs/s':>7s} {'mean run s':>10s}", file=stream)
    for count in workers:
        with tempfile.TemporaryDirectory() as folder, Store(os.path.join(folder, "bench.db")) as store:
            start = time.perf_counter()
            summary = run_sweep(exp, store, executor="local", workers=count, progress=False)
            seconds = time.perf_counter() - start
            mean_run = sum(m["run_seconds"] or 0 for m in store.members(exp.name, with_history=False)) / len(specs)
        row = {"workers": count, "runs": summary.executed, "seconds": seconds, "runs_per_second": summary.executed / seconds,
               "mean_run_seconds": mean_run}
        rows.append(row)
        print(f"    {count:7d} {seconds:8.1f} {row['runs_per_second']:7.2f} {mean_run:10.2f}", file=stream, flush=True)
    return rows


__all__ = ["bench_sweep"]
