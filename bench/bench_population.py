"""A round's cost against the population: partial participation with a million clients.

Partial participation (``clients_per_round``) is an extension beyond the papers, which analyse
full participation. A round reads only its cohort's rows and per-client state, so its cost should
depend on the cohort, not on the population. Measured in one process:

* data: FedProx synthetic(1, 1) with fixed client sizes (:func:`fedopt.datasets.make_fedprox_synthetic`
  with ``samples_per_client=20``), d = 20 features, 10 classes, float32, no test split; a
  population of 1 000 clients and one of 1 000 000 (``FEDOPT_POPULATION``; 1.6 GB of features);
* problem and methods: :class:`fedopt.problems.Softmax` (200 parameters) on the ``numba``
  backend; FedAvg and SCAFFOLD with ``clients_per_round=100`` (uniform), ``local_steps=10``,
  ``batch_size=10``, ``lr_local=0.05``;
* a round: ``method.next_round(state)`` exactly as :func:`fedopt.run` calls it (the cohort's
  draw, its view of the problem, gathering and scattering the per-client state, the local
  steps, the aggregate), without evaluations. The two populations' rounds take turns (the small
  one's in pytest-benchmark's untimed setup, timed apart), 1 000 each after a warm-up, so that the
  load of a shared machine falls on both alike; the row's time is the large population's best and
  ``x pop`` its ratio to the small one's best. Target: at most 1.5x;
* memory: the process's peak resident set (``ru_maxrss``), generation included, with SCAFFOLD's
  control variates for the whole population written once (resident, as after every client has
  taken part; NumPy's zeros are otherwise only reserved). Target: at most 8 GB.

Nothing is asserted on timings. Run from the repository root::

    .venv/bin/python -m pytest bench/bench_population.py --benchmark-enable --benchmark-only -q -s

Without ``--benchmark-enable`` it is a smoke test with a population of 10 000.
"""

from __future__ import annotations

import os
import resource
import sys
import time

import numpy as np
import pytest

from fedopt import algorithms
from fedopt._backend import cpu_model, host_cpu_name
from fedopt.datasets import make_fedprox_synthetic
from fedopt.problems import Softmax
from fedopt.regularizers import Zero

SMALL, LARGE, SMOKE = 1_000, 1_000_000, 10_000
FEATURES, SAMPLES_PER_CLIENT = 20, 20
HYPERPARAMETERS = {"clients_per_round": 100, "local_steps": 10, "batch_size": 10, "lr_local": 0.05}
TARGET_RATIO, TARGET_MEMORY_GB = 1.5, 8.0
CALLS = 1000


def _enabled(config) -> bool:
    return not (config.getoption("benchmark_disable") and not config.getoption("benchmark_enable"))


@pytest.fixture(scope="module")
def populations(request) -> dict[int, tuple[Softmax, float]]:
    """``{population: (problem, seconds to build it)}`` for the small and the large population."""
    large = int(float(os.environ.get("FEDOPT_POPULATION", LARGE))) if _enabled(request.config) else SMOKE
    problems = {}
    for n in (SMALL, large):
        start = time.perf_counter()
        data = make_fedprox_synthetic(n_clients=n, n_features=FEATURES, samples_per_client=SAMPLES_PER_CLIENT,
                                      dtype="float32", test_size=None, seed=0)
        problems[n] = (Softmax(data, backend="numba"), time.perf_counter() - start)
    return problems


def _peak_rss_bytes() -> int:
    """The process's peak resident set (``ru_maxrss`` is in KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


@pytest.mark.parametrize("name", ["fedavg", "scaffold"])
def test_round_against_population(kbench, populations, name):
    small, large = populations
    method = algorithms.make(name, **HYPERPARAMETERS)
    states = {}
    for n in (small, large):
        state = method.init(populations[n][0], Zero(), np.random.default_rng(1))
        for values in state.vars.values():
            if getattr(values, "ndim", 0) == 2:  # per-client state (SCAFFOLD's c_i): made resident
                values[...] = 0
        states[n] = state
    per_client_bytes = sum(v.nbytes for v in states[large].vars.values() if getattr(v, "ndim", 0) == 2)

    def step(n):
        states[n] = method.next_round(states[n])

    for n in (small, large):  # compile, and fill the state
        for _ in range(5):
            step(n)
    small_s = []

    def small_round():  # pytest-benchmark's untimed setup: the small population's round, timed here
        start = time.perf_counter()
        step(small)
        small_s.append(time.perf_counter() - start)

    kbench.name = f"{name}-round-S100-Q10-b10-d20-pop"
    kbench.benchmark.pedantic(lambda: step(large), setup=small_round, rounds=CALLS, warmup_rounds=1, iterations=1)
    assert np.isfinite(states[large].x).all() and np.isfinite(states[small].x).all()

    if not kbench.enabled:
        return
    best = {small: min(small_s), large: kbench.min_s}
    ratio = best[large] / best[small]
    peak = _peak_rss_bytes()
    problem, built_s = populations[large]
    kbench.record(large, np.float32, None, prox_targets=False,
                  note=(f"pop {small:,} {best[small] * 1e6:.0f} us, pop {large:,} {best[large] * 1e6:.0f} us: "
                        f"x pop {ratio:.2f} (target <= {TARGET_RATIO:g}); peak RSS {peak / 1e9:.2f} GB "
                        f"(target <= {TARGET_MEMORY_GB:g})"),
                  extra={"population_small": small, "population_large": large,
                         "round_small_s": best[small], "round_large_s": best[large], "x_population": ratio,
                         "peak_rss_bytes": peak, "features_bytes": problem.dataset.X.nbytes,
                         "per_client_state_bytes": per_client_bytes, "build_large_s": built_s,
                         "cpu_model": cpu_model(), "host_cpu": host_cpu_name(), **HYPERPARAMETERS})
