"""Batched runs against one run at a time: ``R`` FedNMap runs (seeds x ``lr_local``) at the sweep shape.

:func:`fedopt.sweep.bench.bench_batch` times, in one process, the runs one after another with
:func:`fedopt.run`, the same runs as one :func:`fedopt.run_batch`, and the fused local-steps kernel
alone on the same ``R x n`` client rows (the floor the batch amortizes toward); the ratios go to
``extra_info`` and BENCHMARKS.md. ``FEDOPT_BATCH_RUNS`` (default 64), ``FEDOPT_BATCH_ROUNDS``
(default 200) and ``FEDOPT_BATCH_EVAL_EVERY`` (default: the round count) set the sizes.

    .venv/bin/python -m pytest bench/bench_batch.py --benchmark-enable --benchmark-only -q -s

Without ``--benchmark-enable`` it is a smoke test: 3 runs of 2 rounds.
"""

from __future__ import annotations

import os

from fedopt.sweep.bench import bench_batch


def test_fednmap_batch_against_loop(benchmark):
    enabled = not benchmark.disabled
    runs = int(os.environ.get("FEDOPT_BATCH_RUNS", 64)) if enabled else 3
    rounds = int(os.environ.get("FEDOPT_BATCH_ROUNDS", 200)) if enabled else 2
    every = os.environ.get("FEDOPT_BATCH_EVAL_EVERY")
    result = benchmark.pedantic(lambda: bench_batch(runs, rounds, eval_every=int(every) if every else None),
                                rounds=1, iterations=1)
    assert result["batch_seconds"] > 0
    benchmark.extra_info.update(result)
