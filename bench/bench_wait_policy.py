"""OpenMP's wait policy on a shared machine: FedNMap rounds and a soft-thresholding, alone and beside a twin.

:mod:`fedopt.kernels.cpu._jit` sets ``OMP_WAIT_POLICY=passive`` unless the environment says
otherwise: a GNU OpenMP thread that finished its share of a parallel region then sleeps at once
instead of spinning. This benchmark measures both policies in fresh processes (the policy is read
when Numba starts its threads), each time alone and with a second process running the same work
on the same cores (two runs at once, a run beside a sweep): per-round times of FedNMap on the
bundled digits (softmax, 20 clients, minibatches of 32, Q = 1 and 10) and per-call times of an
l1 prox on 2^16 and 2^20 float64 elements. The ratio ``active / passive`` of each figure is the
speed-up of the default. Nothing is asserted on timings.

    .venv/bin/python -m pytest bench/bench_wait_policy.py --benchmark-enable --benchmark-only -q -s

Without ``--benchmark-enable`` it is a smoke test: a few rounds, one repeat.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

WORK = """
import json, sys, time
import numpy as np, fedopt
from fedopt import regularizers as R
rounds, repeats = int(sys.argv[1]), int(sys.argv[2])
problem = fedopt.problems.Softmax(fedopt.datasets.load_digits(n_clients=20, partition="sorted", seed=0))
options = dict(rounds=rounds, eval_every=rounds, lr_local=0.1, gamma=4.0, batch_size=32, progress=False)
reg, times = R.ElasticNet(1e-3, 2e-2), {}
for q in (1, 10):
    fedopt.run("fednmap", problem, reg, local_steps=q, **{**options, "rounds": 2})
    spans = []
    for _ in range(repeats):
        start = time.perf_counter()
        fedopt.run("fednmap", problem, reg, local_steps=q, **options)
        spans.append((time.perf_counter() - start) / rounds)
    times[f"fednmap_q{q}_round_s"] = min(spans)
for size in (1 << 16, 1 << 20):
    z = np.random.default_rng(0).normal(size=(1, size))
    out = np.empty_like(z)
    R.L1(0.1).prox(z, 1.0, out=out)
    spans = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(100):
            R.L1(0.1).prox(z, 1.0, out=out)
        spans.append((time.perf_counter() - start) / 100)
    times[f"l1_prox_{size}_s"] = min(spans)
print(json.dumps(times))
"""


def _measure(policy: str, twins: int, rounds: int, repeats: int) -> dict:
    """The figures of ``twins`` processes started together under ``policy``: each figure's worst over them."""
    env = {**os.environ, "OMP_WAIT_POLICY": policy}
    env.pop("GOMP_SPINCOUNT", None)
    procs = [subprocess.Popen([sys.executable, "-c", WORK, str(rounds), str(repeats)], env=env,
                              stdout=subprocess.PIPE, text=True) for _ in range(twins)]
    outputs = [json.loads(p.communicate()[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    return {name: max(o[name] for o in outputs) for name in outputs[0]}


def test_wait_policy_alone_and_beside_a_twin(benchmark):
    rounds, repeats = (100, 5) if not benchmark.disabled else (2, 1)

    def measure():
        return {f"{policy}_{'alone' if twins == 1 else 'twin'}": _measure(policy, twins, rounds, repeats)
                for twins in (1, 2) for policy in ("active", "passive")}

    table = benchmark.pedantic(measure, rounds=1, iterations=1)
    assert all(v > 0 for row in table.values() for v in row.values())
    benchmark.extra_info.update(table)
    for case in ("alone", "twin"):
        active, passive = table[f"active_{case}"], table[f"passive_{case}"]
        print(f"\n{case}: " + ", ".join(f"{name} {passive[name] * 1e6:.1f} us (active / passive "
                                       f"{active[name] / passive[name]:.2f}x)" for name in passive))
