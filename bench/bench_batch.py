"""Batched runs against one run at a time: ``R`` FedNMap runs (seeds x ``lr_local``) at the sweep shape.

:func:`fedopt.sweep.bench.bench_batch` times, in one process, the runs one after another with
:func:`fedopt.run`, the same runs as one :func:`fedopt.run_batch`, and the fused local-steps kernel
alone on the same ``R x n`` client rows (the floor the batch amortizes toward); the ratios go to
``extra_info`` and BENCHMARKS.md. ``FEDOPT_BATCH_RUNS`` (default 64), ``FEDOPT_BATCH_ROUNDS``
(default 200) and ``FEDOPT_BATCH_EVAL_EVERY`` (default: the round count) set the sizes.

    .venv/bin/python -m pytest bench/bench_batch.py --benchmark-enable --benchmark-only -q -s

Without ``--benchmark-enable`` it is a smoke test: 3 runs of 2 rounds.

:func:`test_visiting_order_against_row_order` times the kernel alone with the batch's visiting
order (each client's rows read once for all runs) against row order, and prints the times.
"""

from __future__ import annotations

import os
import timeit

import numpy as np
import pytest

from fedopt.batch import BatchProblem
from fedopt.bench import SHAPES, logistic_problem, mlp_problem
from fedopt.regularizers import L1
from fedopt.sweep.bench import _kernel_arguments, bench_batch


def test_fednmap_batch_against_loop(benchmark):
    enabled = not benchmark.disabled
    runs = int(os.environ.get("FEDOPT_BATCH_RUNS", 64)) if enabled else 3
    rounds = int(os.environ.get("FEDOPT_BATCH_ROUNDS", 200)) if enabled else 2
    every = os.environ.get("FEDOPT_BATCH_EVAL_EVERY")
    result = benchmark.pedantic(lambda: bench_batch(runs, rounds, eval_every=int(every) if every else None),
                                rounds=1, iterations=1)
    assert result["batch_seconds"] > 0
    benchmark.extra_info.update(result)


@pytest.mark.parametrize("model, dtype", [("logistic", "float64"), ("logistic", "float32"), ("mlp", "float64")])
def test_visiting_order_against_row_order(request, model, dtype):
    """The fused local-steps kernel on 64 runs' client rows at the sweep shape (the MLP with
    h = 32), visiting each client's 64 rows one after another (the batch's ``(3, N)`` bounds)
    against in row order (run by run: ``bounds[:2]``), the two timed alternately in one process
    (best of 5 x 10 calls each)."""
    d, n, b, Q, per_client = SHAPES["sweep"]
    problem = (logistic_problem(d, n, per_client, dtype, "numba") if model == "logistic" else
               mlp_problem(d, n, per_client, 32, dtype, "numba"))
    enabled = request.config.getoption("benchmark_enable")
    runs = 64 if enabled else 2
    view = BatchProblem([problem] * runs).rows
    args = _kernel_arguments(view, L1(1e-3), Q, b, np.full(runs * n, 0.05))
    visited, in_row_order = view._offsets, view._offsets[:2]

    def seconds(offsets):
        view._offsets = offsets
        return timeit.timeit(lambda: view.fused_local_steps(*args), number=10 if enabled else 1) / 10

    best = {"visited": [], "row order": []}
    for _ in range(5 if enabled else 1):
        best["visited"].append(seconds(visited))
        best["row order"].append(seconds(in_row_order))
    view._offsets = visited
    visited_ms, row_order_ms = min(best["visited"]) * 1e3, min(best["row order"]) * 1e3
    print(f"\n{model} {dtype}, {runs} runs: visited {visited_ms:.2f} ms, row order {row_order_ms:.2f} ms a call "
          f"({row_order_ms / visited_ms:.2f}x)")
