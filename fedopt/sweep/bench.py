"""``fedopt bench --sweep``: runs per second of a whole sweep, and where its time goes.

:func:`bench_sweep` sweeps an experiment (default ``speedup_demo``; ``fednmap_fig2`` is the FedNMap
Fig. 2 grid, 3 methods x 6 configurations, and its gamma ablation, 20 distinct runs x 10 seeds) into
a fresh temporary store once per worker count with the local executor, and divides the number of
runs, and the rounds they ran, by the wall time. That time includes starting the worker processes
(they load the Numba kernels from the on-disk cache) and one SQLite commit per run. One run in
this process first fills the kernel cache, so that compilation is not measured there. ``rounds``
and ``seeds`` shorten the experiment; without ``rounds``, a ``[[grid]]`` that sets its own rounds
runs them, so the runs may differ in length.

:func:`sweep_breakdown` runs the same sweep serially in this process, instrumented, and splits
its time into:

* ``compile``: the first run of each kind (:func:`fedopt.sweep.execute.run_kind`) pays Numba's
  compilation, or loading it from the on-disk cache, in its untimed warm-up round; measured as a
  one-round run's wall time minus a repeat of it;
* ``data``: loading the data set and building the problem (once per distinct problem; runs that
  share one reuse it, as the executors do);
* ``metrics``: the history's evaluations (full-data loss, gradient, prox, accuracy): the time of
  one evaluation near the run's start point, times the number of evaluations of each run;
* ``rounds``: the rest of the time inside :func:`fedopt.run`;
* ``store``: writing each finished run to the SQLite store.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

from fedopt.sweep.store import Store


def shortened(experiment: str, rounds: int | None = None, seeds: int | None = None):
    """The experiment ``experiment`` (a name or a TOML file) with ``rounds`` rounds and its first ``seeds`` seeds."""
    from fedopt.sweep.config import load_experiment

    exp = load_experiment(experiment)
    if rounds is not None:
        exp = exp.override({"rounds": int(rounds)})
        exp.run["eval_every"] = max(1, min(int(exp.run.get("eval_every", 1)), int(rounds)))
    if seeds is not None:
        exp = exp.override({"seeds": exp.seeds[: int(seeds)]})
    return exp


def bench_sweep(workers=(1, 2), experiment: str = "speedup_demo", rounds: int | None = None,
                seeds: int | None = None, batches=("off", "auto"), backend: str | None = None,
                stream=None) -> list[dict]:
    """Measure the sweep of ``experiment`` once per worker count and ``--batch`` mode; print and return
    the rows. ``backend`` runs every configuration there (``"gpu"``: each worker process on the
    device), as ``fedopt sweep --backend``.

    Each row's ``rounds`` is the rounds of one run (their mean where grids set different ones),
    ``total_rounds`` the rounds of all the distinct runs, and ``rounds_per_second`` the latter over
    the wall time."""
    from fedopt.sweep.execute import execute_run, run_sweep

    stream = sys.stdout if stream is None else stream
    exp = shortened(experiment, rounds, seeds)
    specs = list({s.key: s for s in exp.expand()}.values())  # the distinct runs, as the store keeps them
    on_backend = {} if backend is None else {"backend": backend}
    execute_run({**specs[0].config, "rounds": 1, **on_backend})  # compile (or load) the kernels once
    runs, (rounds_per_run, total_rounds, rounds_words) = len(specs), _rounds(specs)
    print(f"{exp.name}: {runs} runs of {rounds_words}, local executor, {os.cpu_count()} cores", file=stream)
    print(f"    {'workers':>7s} {'batch':>6s} {'backend':>7s} {'seconds':>8s} {'runs/s':>7s} {'rounds/s':>9s} "
          f"{'mean run s':>10s}", file=stream)
    rows = []
    for count in workers:
        for batch in batches:
            with tempfile.TemporaryDirectory() as folder, Store(os.path.join(folder, "bench.db")) as store:
                start = time.perf_counter()
                summary = run_sweep(exp, store, executor="local", workers=count, progress=False, batch=batch,
                                    backend=backend)
                seconds = time.perf_counter() - start
                members = store.members(exp.name, with_history=False)
            if summary.counts.get("done") != runs:
                raise RuntimeError(f"the benchmark sweep did not finish every run: {summary.counts}")
            seconds_by_run = {m["key"]: m["run_seconds"] or 0 for m in members}  # a run of two grids counts once
            mean_run = sum(seconds_by_run.values()) / len(seconds_by_run)
            ran_on = ",".join(sorted({m["backend"] for m in members}))
            row = {"experiment": exp.name, "workers": count, "batch": batch, "backend": ran_on,
                   "runs": summary.executed, "rounds": rounds_per_run, "total_rounds": total_rounds,
                   "seconds": seconds, "runs_per_second": summary.executed / seconds,
                   "rounds_per_second": total_rounds / seconds, "mean_run_seconds": mean_run}
            rows.append(row)
            print(f"    {count:7d} {batch!s:>6s} {ran_on:>7s} {seconds:8.1f} {row['runs_per_second']:7.2f} "
                  f"{row['rounds_per_second']:9.0f} {mean_run:10.2f}", file=stream, flush=True)
    return rows


def _rounds(specs) -> tuple[float, int, str]:
    """The rounds of the runs ``specs`` (a ``[[grid]]`` may set its own): per run (their mean where
    they differ), in all, and in words for the printed summary."""
    rounds = [spec.config["rounds"] for spec in specs]
    total, low, high = sum(rounds), min(rounds), max(rounds)
    if low == high:
        return low, total, f"{low} rounds"
    return total / len(rounds), total, f"{low} to {high} rounds (mean {total / len(rounds):.0f})"


def bench_batch(runs: int = 64, rounds: int = 200, rows_per_client: int = 200, eval_every: int | None = None,
                backend: str = "numba", repeats: int = 3, stream=None) -> dict:
    """Runs per second of ``runs`` FedNMap runs (seeds x ``lr_local``) at the sweep shape (logistic + l1,
    ``d = 64, n = 100, b = 8, Q = 10``), measured three ways in this process:

    * ``loop``: one :func:`fedopt.run` after another (the one-run-at-a-time sweep);
    * ``batch``: one :func:`fedopt.run_batch` of all runs;
    * ``kernel``: the fused local-steps kernel alone on the same ``runs * n`` client rows, ``rounds``
      calls: the floor that the batch's per-round overhead must amortize toward.

    ``eval_every`` defaults to ``rounds`` (the history at the start and the end only). Each time is
    the best of ``repeats``, after a two-round warm-up that fills the kernel caches; the three are
    timed in turn, once each per repeat, so that a slow spell of a shared machine slows all three.
    """
    import numpy as np

    import fedopt
    from fedopt.bench import SHAPES, logistic_problem
    from fedopt.regularizers import L1

    stream = sys.stdout if stream is None else stream
    d, n, b, Q, _ = SHAPES["sweep"]
    eval_every = rounds if eval_every is None else eval_every
    problem = logistic_problem(d, n, rows_per_client, "float64", backend)
    reg = L1(1e-3)
    seeds = [seed // 2 for seed in range(runs)]
    lrs = [(0.05, 0.1)[seed % 2] for seed in range(runs)]
    hyper = {"local_steps": Q, "batch_size": b, "gamma": 4.0, "eval_every": eval_every, "progress": False}
    fedopt.run_batch("fednmap", problem, reg, rounds=2, seeds=seeds[:2], lr_local=lrs[:2], **hyper)  # warm-up

    def seconds(work):
        began = time.perf_counter()
        work()
        return time.perf_counter() - began

    def loop_of_runs():
        for seed, lr in zip(seeds, lrs, strict=True):
            fedopt.run("fednmap", problem, reg, rounds=rounds, seed=seed, lr_local=lr, **hyper)

    def one_batch():
        failed = [r for r in fedopt.run_batch("fednmap", problem, reg, rounds=rounds, seeds=seeds, lr_local=lrs,
                                              **hyper) if r.error is not None]
        if failed:
            raise RuntimeError(f"{len(failed)} of the benchmark's runs failed: {failed[0].error}")

    from fedopt.batch import BatchProblem

    rows_view = BatchProblem([problem] * runs).rows
    kernel_args = _kernel_arguments(rows_view, reg, Q, b, np.repeat(np.asarray(lrs), n))

    def kernel_alone():
        for _ in range(rounds):
            rows_view.fused_local_steps(*kernel_args)
        rows_view.backend.to_numpy(kernel_args[-1][:1])  # waits for a device's queue (the runs return to the host)

    times = [[seconds(work) for work in (loop_of_runs, one_batch, kernel_alone)] for _ in range(repeats)]
    loop, batch, kernel = (min(column) for column in zip(*times, strict=True))
    result = {"runs": runs, "rounds": rounds, "eval_every": eval_every, "backend": problem.backend.name,
              "loop_seconds": loop, "batch_seconds": batch, "kernel_seconds": kernel,
              "batch_over_loop": loop / batch, "batch_over_kernel": batch / kernel}
    print(f"{runs} FedNMap runs x {rounds} rounds (logistic + l1, d={d}, n={n}, b={b}, Q={Q}, eval_every="
          f"{eval_every}, {problem.backend.name}; best of {repeats}):", file=stream)
    for name in ("loop", "batch", "kernel"):
        seconds = result[f"{name}_seconds"]
        print(f"    {name:6s} {seconds:8.2f} s  {runs / seconds:8.1f} runs/s", file=stream)
    print(f"    batch runs/s = {result['batch_over_loop']:.1f} x the loop's; batch time = "
          f"{result['batch_over_kernel']:.2f} x the fused kernel's alone", file=stream)
    return result


def _kernel_arguments(rows_view, reg, Q, b, lr):
    """``fused_local_steps`` arguments of one FedNMap round on the client rows of ``rows_view``,
    its minibatches drawn once (the kernel alone, without the round around it)."""
    import numpy as np

    xp, dtype, p = rows_view.backend.xp, rows_view.dtype, rows_view.n_params
    rows = rows_view.sample_rows(np.random.default_rng(0), b, steps=Q)
    kind, thetas, w = reg.separable([4.0] * Q, rows_view.backend, dtype)
    shift = xp.zeros((rows_view.n_clients, p), dtype=dtype)
    Z, P = xp.zeros_like(shift), xp.zeros_like(shift)
    return rows, shift, lr, kind, thetas, w, Z, P


class _TimedStore(Store):
    """A store that adds up the time spent writing runs."""

    put_seconds = 0.0

    def put(self, key, config, record):
        began = time.perf_counter()
        super().put(key, config, record)
        self.put_seconds += time.perf_counter() - began


def _evaluation_seconds(config: dict, problem, regularizer) -> float:
    """The time of one history evaluation: a two-round run that evaluates every round less one that
    skips round 1's evaluation, best of three each. (A zero-round run also times the run's set-up,
    once per evaluation counted: on small runs that left nothing for the rounds.)"""
    import fedopt

    hyper = {k: v for k, v in config["algorithm"].items() if k != "name"}

    def best(eval_every: int) -> float:
        times = []
        for _ in range(3):
            began = time.perf_counter()
            fedopt.run(config["algorithm"]["name"], problem, regularizer, rounds=2, eval_every=eval_every,
                       seed=config["seed"], metric_gamma=config.get("metric_gamma"), progress=False, **hyper)
            times.append(time.perf_counter() - began)
        return min(times)

    return max(0.0, best(1) - best(2))


def sweep_breakdown(experiment: str = "speedup_demo", rounds: int | None = None, seeds: int | None = None,
                    stream=None) -> dict:
    """Run the sweep serially in this process and split its time into phases (see the module docstring).

    Returns ``{"experiment", "runs", "rounds", "total_rounds", "seconds", "runs_per_second", "phases":
    {phase: seconds}}`` where ``rounds`` and ``total_rounds`` are as in :func:`bench_sweep` and ``seconds``
    is the sum of the phases (the instrumentation's own repeats are left out).
    """
    from fedopt.sweep import execute

    stream = sys.stdout if stream is None else stream
    exp = shortened(experiment, rounds, seeds)
    specs = list({s.key: s for s in exp.expand()}.values())
    phases = dict.fromkeys(("compile", "data", "rounds", "metrics", "store"), 0.0)
    execute._CACHE.clear()
    compiled, evaluation = set(), {}
    with tempfile.TemporaryDirectory() as folder, _TimedStore(os.path.join(folder, "bench.db")) as store:
        store.register(exp, specs)
        for spec in specs:
            config = spec.config
            began = time.perf_counter()
            problem, regularizer = execute.build(config)  # cached per process after the first time
            phases["data"] += time.perf_counter() - began
            if execute.run_kind([config]) not in compiled:  # its first run warms up: compiles or loads them
                compiled.add(execute.run_kind([config]))
                once = {**config, "rounds": 1, "eval_every": 1}
                first, repeat = (execute.execute_run(once)["wall_seconds"] for _ in range(2))
                phases["compile"] += max(0.0, first - repeat)
            point = spec.key if len(exp.seeds) < 2 else _point(config)
            if point not in evaluation:
                evaluation[point] = _evaluation_seconds(config, problem, regularizer)
            record = execute.execute_run(config)
            evaluations = len((record.get("history") or {}).get("round") or [])
            metrics = min(record["run_seconds"] or 0.0, evaluations * evaluation[point])
            phases["metrics"] += metrics
            phases["rounds"] += (record["run_seconds"] or 0.0) - metrics
            store.put(spec.key, config, record)
        phases["store"] = store.put_seconds
    total = sum(phases.values())
    rounds_per_run, total_rounds, rounds_words = _rounds(specs)
    result = {"experiment": exp.name, "runs": len(specs), "rounds": rounds_per_run, "total_rounds": total_rounds,
              "seconds": total, "runs_per_second": len(specs) / total, "phases": phases}
    print(f"{exp.name}: {len(specs)} runs of {rounds_words} in this process, {total:.1f} s "
          f"({result['runs_per_second']:.2f} runs/s); where the time goes:", file=stream)
    for name, seconds in phases.items():
        print(f"    {name:8s} {seconds:8.2f} s  {100 * seconds / total:5.1f} %", file=stream)
    return result


def _point(config: dict) -> str:
    """The grid point of a run: its configuration without the seed."""
    import json

    return json.dumps({k: v for k, v in config.items() if k != "seed"}, sort_keys=True, default=str)


__all__ = ["bench_batch", "bench_sweep", "shortened", "sweep_breakdown"]
