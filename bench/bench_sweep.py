"""The FedNMap Fig. 2 grid on the bundled digits as one benchmark: runs per second and where the time goes.

``fednmap_fig2``: FedNMap, Zhang and FedCanon x n in {20, 50, 100} x Q in {10, 20}, and FedNMap's
gamma ablation (gamma in {1, 2, 4} at n = 20, Q = 10, one run shared with the first grid) x 10 seeds
(200 runs of the MLP + elastic net). First the grid runs serially in this process, instrumented
(:func:`fedopt.sweep.bench.sweep_breakdown`: compile, data, rounds, metrics, store); then it is
timed with the local executor and ``FEDOPT_SWEEP_WORKERS`` worker processes (default 2), a fresh
store each time. The shipped experiment has 500 rounds, which takes about 50 minutes (both passes) on two
cores; the benchmark runs ``FEDOPT_SWEEP_ROUNDS`` rounds (default 50) and ``FEDOPT_SWEEP_SEEDS``
seeds (default all 10), and reports rounds per second too, which does not depend on the round
count. The compile phase is what this process still had to compile or load from Numba's on-disk
cache: run this file alone (first in its process) for that figure.

    .venv/bin/python -m pytest bench/bench_sweep.py --benchmark-enable --benchmark-only -q -s
    FEDOPT_SWEEP_ROUNDS=500 .venv/bin/python -m pytest bench/bench_sweep.py --benchmark-enable --benchmark-only -q -s

Without ``--benchmark-enable`` it is a smoke test: 2 rounds, 1 seed, one worker.
"""

from __future__ import annotations

import os

from fedopt.sweep.bench import bench_sweep, shortened, sweep_breakdown

EXPERIMENT = "fednmap_fig2"


def test_fednmap_fig2_sweep(benchmark):
    enabled = not benchmark.disabled
    rounds = int(os.environ.get("FEDOPT_SWEEP_ROUNDS", 50)) if enabled else 2
    seeds = int(os.environ.get("FEDOPT_SWEEP_SEEDS", 10)) if enabled else 1
    workers = int(os.environ.get("FEDOPT_SWEEP_WORKERS", 2)) if enabled else 1

    runs = len({spec.key for spec in shortened(EXPERIMENT, rounds, seeds).expand()})  # distinct runs of all grids
    breakdown = sweep_breakdown(EXPERIMENT, rounds=rounds, seeds=seeds)
    assert breakdown["runs"] == runs and all(v >= 0 for v in breakdown["phases"].values())
    rows = benchmark.pedantic(lambda: bench_sweep([workers], EXPERIMENT, rounds=rounds, seeds=seeds),
                              rounds=1, iterations=1)
    assert rows[0]["runs"] == breakdown["runs"]
    benchmark.extra_info.update(rounds=rounds, seeds=seeds, workers=workers, runs=rows[0]["runs"],
                                runs_per_second=rows[0]["runs_per_second"],
                                rounds_per_second=rows[0]["rounds_per_second"],
                                serial_runs_per_second=breakdown["runs_per_second"],
                                phases_seconds=breakdown["phases"])


def test_expand_250k_runs(benchmark):
    """Expanding 250 000 runs: 500 step sizes x 500 seeds, and 500 x 500 grid points x 1 seed.

    Against the plain expansion, one resolution of the configuration per run (what the seeds of
    a point used to cost), timed on 2 000 runs in the same process and extrapolated.
    Without ``--benchmark-enable``: 40 x 40.
    """
    import time

    from fedopt.sweep import parse_experiment

    size = 500 if not benchmark.disabled else 40
    steps = [0.001 * i for i in range(1, size + 1)]
    text = (f'[run]\nrounds = 10\nseeds = {list(range(size))}\n[run.dataset]\nname = "digits"\nn_clients = 10\n'
            '[run.problem]\nname = "logistic"\n[run.regularizer]\nname = "l1"\nlam = 0.01\n'
            f'[run.algorithm]\nname = "fednmap"\n[[grid]]\n"algorithm.lr_local" = {steps}\n')
    seeds_grid = parse_experiment(text, name="seeds")
    points_grid = seeds_grid.override({"seeds": [0]})
    points_grid.grids[0].axes["algorithm.gamma"] = [0.01 * (i + 1) for i in range(size)]
    runs = benchmark.pedantic(lambda: len(seeds_grid.expand()), rounds=1, iterations=1)
    start = time.perf_counter()
    points = len(points_grid.expand())
    points_seconds = time.perf_counter() - start
    grid, plain_runs = seeds_grid.grids[0], 2000
    start = time.perf_counter()
    for _ in range(plain_runs):
        seeds_grid._resolve({k: dict(v) if isinstance(v, dict) else v for k, v in seeds_grid.run.items()}, grid)
    plain_seconds = (time.perf_counter() - start) / plain_runs * size * size
    assert runs == size * size and points == size * size
    benchmark.extra_info.update(runs=runs, points_grid_seconds=points_seconds, plain_seconds=plain_seconds)
    print(f"\n{runs} runs: {benchmark.stats.stats.min:.2f} s over seeds, {points_seconds:.2f} s over grid points; "
          f"one resolution per run would take {plain_seconds:.1f} s")
