"""CPU benchmark of the in-place prox and normal-map step, and of the DEPOSITUM round that uses them.

* One row of 2 410 elements (the MLP's parameters at the sweep shape, d = 64, h = 32, 10 classes),
  float64 and float32: ``prox_elementwise`` (l1, MCP) and ``normal_map_step`` (l1) with the output
  the input itself, against the same call into another array (loops of 20 000 calls, best of 5).
  In place, a loop that read and wrote two views of one buffer ran scalar; the ratio shows it.
* DEPOSITUM's round at the sweep shape (n = 100 nodes on a ring, b = 8, T0 = 10, l1): the MLP
  round against the same-shape batched GEMM (``fedopt.bench.Timer.gemm_gflops``) and the logistic
  round, best of single rounds set up and run inside ``round_context`` as ``fedopt.run`` runs them.
* DEPOSITUM's ``tracking_steps_mlp`` against FedNMap's ``local_steps_mlp`` per node-step, on the
  same fixed rows at the sweep shape.
* Soft-thresholding of 1e3 and 1e5 elements: the plain loops, the kernel variant called directly
  and the backend wrapper that picks it, interleaved (what a small call spends beyond the loop).
* The MLP's two large minibatch products at the sweep shape on one thread, in GFLOP/s.

Run from the repository root (the timings are printed; nothing is asserted on them)::

    .venv/bin/python -m pytest bench/bench_inplace_cpu.py --benchmark-enable -q -s
"""

from __future__ import annotations

import sys
import timeit
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from fedopt import bench as B
from fedopt._backend import get_backend
from fedopt.kernels import MCP, SOFT, cpu
from fedopt.regularizers import L1
from fedopt.run import round_context

sys.path.insert(0, str(Path(__file__).parent))
from conftest import best_time

P = 2410  # h (d + 1) + k (h + 1) with d = 64, h = 32, k = 10


def _per_call_us(fn, number=20_000) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_in_place_against_out_of_place(request, dtype):
    rng = np.random.default_rng(0)
    z, g = (rng.standard_normal((1, P)).astype(dtype) for _ in range(2))
    out, x_out, empty = np.empty_like(z), np.empty_like(z), np.empty((0, 0), dtype)
    z_ref, x_ref = (rng.standard_normal(P).astype(dtype) for _ in range(2))
    soft, mcp = np.array([1e-3, 1.0], dtype), np.array([1e-3, 3.0, 1.5], dtype)
    calls = {"prox l1": lambda target: cpu.prox_elementwise(z, SOFT, soft, empty, target),
             "prox MCP": lambda target: cpu.prox_elementwise(z, MCP, mcp, empty, target),
             "normal-map step l1": lambda target: cpu.normal_map_step(z, g, empty, z_ref, x_ref, 0.01, 1.0, SOFT, soft,
                                                                      empty, target, x_out)}
    for name, call in calls.items():
        if not request.config.getoption("benchmark_enable"):
            call(z), call(out)  # a smoke run
            continue
        inside, outside = _per_call_us(lambda c=call: c(z)), _per_call_us(lambda c=call: c(out))
        print(f"\n{dtype} {name}: in place {inside:.2f} us, out of place {outside:.2f} us")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_depositum_round_at_the_sweep_shape(request, dtype):
    backend = get_backend("numba")
    d, n, b, Q, per_client = B.SHAPES["sweep"]
    rounds = 60 if request.config.getoption("benchmark_enable") else 1
    for model in ("mlp", "logistic"):
        problem = (B.mlp_problem(d, n, per_client, 32, dtype, backend) if model == "mlp"
                   else B.logistic_problem(d, n, per_client, dtype, backend))
        method = B.method("depositum", Q, b)
        with round_context(backend):
            state = method.init(problem, L1(B.LAM), np.random.default_rng(1))
            seconds = best_time(partial(method.round, state), rounds=rounds * (5 if model == "logistic" else 1),
                                budget_s=10.0)
        line = f"\n{dtype} DEPOSITUM {model} round: {seconds * 1e3:.3f} ms"
        if model == "mlp":
            gemm = B.Timer(backend, quick=False).gemm_gflops(n, b, d, 32, dtype)
            rate = Q * B._mlp_flops(n, b, d, 32) / seconds / 1e9
            line += f", {rate:.1f} GFLOP/s, {100 * rate / gemm:.0f} % of the same-shape GEMM ({gemm:.1f} GFLOP/s)"
        print(line)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_tracking_node_step_against_the_local_step(request, dtype):
    """``tracking_steps_mlp`` (DEPOSITUM, whose adapt step proxes in place) against FedNMap's
    ``local_steps_mlp`` on the same 10 steps of fixed rows at the sweep shape, per node-step."""
    d, n, b, Q, per_client = B.SHAPES["sweep"]
    problem = B.mlp_problem(d, n, per_client, 32, dtype, get_backend("numba"))
    X, y, offsets, p = problem._X, problem._y, problem._offsets, problem.n_params
    rng = np.random.default_rng(0)
    rows = np.stack([np.stack([rng.integers(offsets[i], offsets[i + 1], b) for i in range(n)]) for _ in range(Q)])
    Z = (0.01 * rng.standard_normal((n, p))).astype(dtype)
    P, D, empty = Z.copy(), np.zeros_like(Z), np.empty((0, 0), dtype)
    state = [(0.01 * rng.standard_normal((n, p))).astype(dtype) for _ in range(5)]
    state[2] = empty  # no Nesterov
    thetas = np.tile(np.array([1e-4, 1.0], dtype), (Q, 1))
    common = (X, y, offsets, rows, 32, 10, problem.kind, problem.dataset.scale)
    calls = {"local": partial(cpu.local_steps_mlp, *common, D, 0.1, SOFT, thetas, empty, Z, P),
             "tracking": partial(cpu.tracking_steps_mlp, *common, np.ones(n), 0.5, 0.1, 1.0, False, True, SOFT,
                                 thetas[0], empty, *state)}
    rounds = 90 if request.config.getoption("benchmark_enable") else 1
    with round_context(get_backend("numba")):
        per_step = {name: best_time(call, rounds=rounds) / (n * Q) * 1e6 for name, call in calls.items()}
    print(f"\n{dtype} per node-step: tracking {per_step['tracking']:.2f} us, local {per_step['local']:.2f} us")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_soft_thresholding_call_against_the_plain_loop(request, dtype):
    """Where a small call's time goes: soft-thresholding of one row of 1e3 and of 1e5 elements by
    the plainest Numba loop (serial and parallel), fedopt's kernel variant called directly (serial
    at 1e3, parallel on the threads at 1e5) and the backend wrapper that picks it, interleaved in
    one process (best of 7 loops of calls each)."""
    from fedopt.kernels.cpu import _jit, plain
    from fedopt.kernels.cpu.elementwise import prox_elementwise_kernel

    enabled = request.config.getoption("benchmark_enable")
    for p in (1_000, 100_000):
        z = np.random.default_rng(0).standard_normal((1, p)).astype(dtype)
        out, w = np.empty_like(z), np.empty((0, 0), dtype)
        flat, flat_out = z.reshape(-1), out.reshape(-1)
        theta, tau, scale = np.array([0.5, 1.0], dtype), z.dtype.type(0.5), z.dtype.type(1.0)
        threads = _jit.threads(p)
        calls = {"plain serial": partial(plain.soft[1], flat, tau, scale, flat_out),
                 "plain parallel": partial(plain.soft[0], flat, tau, scale, flat_out),
                 "kernel": partial(prox_elementwise_kernel.parallel if threads > 1 else prox_elementwise_kernel.serial,
                                   z, SOFT, theta, w, out, threads),
                 "wrapper": partial(cpu.prox_elementwise, z, SOFT, theta, w, out)}
        number = max(1, 2_000_000 // p) if enabled else 1
        times = {name: [] for name in calls}
        for _ in range(7 if enabled else 1):
            for name, call in calls.items():
                times[name].append(timeit.timeit(call, number=number) / number * 1e6)
        print(f"\n{dtype} l1 on 1 x {p}: " + ", ".join(f"{name} {min(t):.2f} us" for name, t in times.items()))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_minibatch_products_at_the_sweep_shape(request, dtype):
    """The MLP's two large minibatch products at the sweep shape on one thread: ``H = A W1^T``
    (``times_transpose``, ``(8, 64) x (32, 64)^T``) and ``G += S^T A`` (``add_transpose_times``),
    in GFLOP/s (loops of 100 000 calls in one compiled loop, best of 5)."""
    import numba

    from fedopt.kernels.cpu.minibatch import add_transpose_times, times_transpose

    rng = np.random.default_rng(0)
    A, W1, S = (rng.standard_normal(shape).astype(dtype) for shape in ((8, 64), (32, 64), (8, 32)))
    H, G, zero = np.empty((8, 32), dtype), np.zeros((32, 64), dtype), A.dtype.type(0)

    @numba.njit
    def forward(n, A, W1, H, zero):
        for _ in range(n):
            times_transpose(A, W1, H, zero)

    @numba.njit
    def backward(n, S, A, G):
        for _ in range(n):
            add_transpose_times(S, A, G)

    calls = 100_000 if request.config.getoption("benchmark_enable") else 1
    flops = 2 * 8 * 64 * 32
    rates = {}
    products = (("times_transpose", forward, (A, W1, H, zero)), ("add_transpose_times", backward, (S, A, G)))
    for name, loop, arrays in products:
        loop(1, *arrays)
        rates[name] = flops * calls / min(timeit.repeat(partial(loop, calls, *arrays), number=1, repeat=5)) / 1e9
    print(f"\n{dtype} one thread: " + ", ".join(f"{name} {rate:.1f} GFLOP/s" for name, rate in rates.items()))
