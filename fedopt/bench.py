"""``fedopt bench``: the standard shapes, timed against a floor measured in the same process.

Every row is one operation at one shape and dtype, timed as the best of single calls after an
untimed warm-up (Numba compiles or loads its cache there; on the GPU each call ends with a
stream synchronisation). Its work is either bytes (memory-bound operations, reported in GB/s)
or flops (the MLP, in GFLOP/s), and its floor is the rate of the simplest operation of the same
size on the same arrays module, measured in this process right before:

* ``copy``: ``xp.copyto(dst, src)`` over as many elements as the operation streams once
  (``2 * elements * itemsize`` bytes), so ``% floor`` is achieved GB/s over copy GB/s;
* ``GEMM``: the batched product ``(n, b, d) @ (n, d, h)`` of the MLP's first layer, in
  :func:`fedopt.run.round_context` as the gradients and the rounds are (BLAS on one thread beside
  Numba's).

The copy is single-threaded on the CPU while the kernels use every core, so a kernel can pass
100 %. The families and their minimal work:

* ``prox``: ``reg.prox(Z, step, out=)`` at each of :data:`PROX_SIZES` elements (1e3 and 1e5 with
  ``quick``), as one row and as ``n`` client rows: 2 passes (l1, MCP, SCAD, box, group lasso of
  10), 3 (l2 ball, simplex, l1 ball); the fused normal-map step reads ``z, g, c`` and writes
  ``z_out, x_out`` (5 passes);
* ``gossip``: ``W @ V`` on a ring of ``n`` nodes, rows of the same sizes: ``V`` read and the result
  written once (2 passes);
* ``gradient``: ``problem.client_grad(W, rows)``, one minibatch of ``b`` rows per client: the
  sampled rows read once (``n b d`` elements) for logistic regression, ``2 n b (2 d h + 3 h k)``
  flops for the MLP;
* ``round``: one ``method.round(state)`` exactly as :func:`fedopt.run` calls it (drawing the
  rows, the ``Q`` local steps, aggregation, prox, gossip): ``Q`` times the gradient's work.

Shapes (``d`` features, ``n`` clients, ``b`` batch, ``Q`` local steps): the small sweep-style
shape ``d = 64, n = 100, b = 8, Q = 10`` and the MNIST shape ``d = 784, n = 100, b = 64, Q = 10``
(Gaussian rows, labels from a random linear model, sorted partition); the MLP has 64 hidden
units (32 with ``quick``) and 10 classes. ``clients`` replaces ``n``. ``quick`` keeps the shapes
but holds fewer rows per client, times fewer calls, and runs the MLP rounds at the sweep shape.

The ``prox`` and ``gossip`` rows also time the backend kernel call alone (``kernel``, captured by
:func:`capture_kernel_call`) and the plainest Numba loops of the same operation (``plain``,
:mod:`fedopt.kernels.cpu.plain`), each checked against fedopt's result first.

``peers=True`` adds, for the FedNMap logistic + l1 and MLP + l1 rounds in float64, the time of the peer
implementations in ``bench/peers/`` of a source checkout (a per-client NumPy loop, batched
PyTorch when torch is importable) on the same rows, checked against fedopt's round first.

:func:`startup_seconds` and :func:`import_seconds` (``fedopt bench --startup``) time a small
``fedopt run`` in a fresh process, with an empty and with a filled Numba cache, and its imports.
The whole-sweep measurement (``fedopt bench --sweep``) is :mod:`fedopt.sweep.bench`.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

#: ``name: (d, n, b, Q, rows per client)``.
SHAPES = {"sweep": (64, 100, 8, 10, 200), "mnist": (784, 100, 64, 10, 600)}
QUICK_ROWS_PER_CLIENT = 64
#: At most this many rows in one data set (many clients get fewer rows each, never fewer than b).
MAX_ROWS = 1_280_000
#: The largest copy of the floor, in elements (1 GiB of float64 each way).
MAX_COPY = 1 << 27
LAM, GAMMA, LR = 1e-3, 4.0, 0.1
#: Elements of the prox and gossip rows: one row of each size, and PROX_ROWS rows of size / PROX_ROWS.
PROX_SIZES = (1_000, 10_000, 100_000, 1_000_000, 10_000_000)
QUICK_PROX_SIZES = (1_000, 100_000)
PROX_ROWS = 100
GROUP_SIZE = 10
#: The backend kernels a prox or a normal-map step calls (see :func:`capture_kernel_call`).
PROX_KERNELS = ("prox_elementwise", "prox_group", "project_l2_ball", "project_simplex", "project_l1_ball",
                "normal_map_step")
CLASSES = 10
METHODS = ("fednmap", "fedcanon", "depositum")
FAMILIES = ("prox", "gossip", "gradient", "round")
DTYPES = ("float64", "float32")


@dataclass
class Row:
    """One measurement: ``seconds`` per call, its ``rate`` in ``unit`` and the floor's rate."""

    family: str
    name: str
    shape: str
    dtype: str
    backend: str
    seconds: float
    work: float
    unit: str
    rate: float
    floor: str
    floor_rate: float
    ratio: float
    peers: dict = field(default_factory=dict)
    kernel_seconds: float = math.nan
    plain_seconds: float = math.nan

    @classmethod
    def make(cls, family, name, shape, dtype, backend, seconds, work, unit, floor, floor_rate, peers=None,
             kernel_seconds=math.nan, plain_seconds=math.nan):
        rate = work / seconds / 1e9
        return cls(family, name, shape, np.dtype(dtype).name, backend, seconds, float(work), unit, rate, floor,
                   floor_rate, rate / floor_rate, dict(peers or {}), kernel_seconds, plain_seconds)

    @property
    def over_plain(self) -> float:
        """The kernel's time over the plainest Numba loop of the same operation (NaN where there is none)."""
        return self.kernel_seconds / self.plain_seconds


# ------------------------------------------------------------------------------------------ timing
#: The shortest sample of :meth:`Timer.best` on the CPU, in seconds.
MIN_SAMPLE = 20e-6


class Timer:
    """Best-of timing on one backend, and the floors of that backend measured once per size."""

    def __init__(self, backend, quick: bool):
        self.backend = backend
        self.xp = backend.xp
        self.calls = 3 if quick else 20
        self.budget = 0.5 if quick else 2.0
        self._floors: dict = {}

    def best(self, fn, calls: int | None = None) -> float:
        """The best wall time per call of ``fn()`` after one untimed call, over ``calls`` samples.

        On the CPU a sample of a call shorter than :data:`MIN_SAMPLE` is a loop of calls that lasts
        about that long: a single call of 0.5 us is measured with the timer's own cost and with
        its jitter (the best of 20 single calls of the same kernel read 0.44 to 0.84 us).
        """
        fn()
        self.backend.synchronize()
        began = time.perf_counter()
        fn()
        self.backend.synchronize()
        loop = 1 if self.backend.name == "gpu" else max(1, int(MIN_SAMPLE / (time.perf_counter() - began)))
        best, start = math.inf, time.perf_counter()
        for _ in range(calls or self.calls):
            began = time.perf_counter()
            for _ in range(loop):
                fn()
            self.backend.synchronize()
            best = min(best, (time.perf_counter() - began) / loop)
            if time.perf_counter() - start > self.budget:
                break
        return best

    def copy_gbps(self, elements: int, dtype) -> float:
        """GB/s of ``xp.copyto`` over ``elements`` of ``dtype`` (read and write), at most :data:`MAX_COPY`."""
        elements = min(int(elements), MAX_COPY)  # far past every cache: the rate no longer depends on the size
        key = ("copy", elements, np.dtype(dtype))
        if key not in self._floors:
            src = self.xp.ones(int(elements), dtype=dtype)
            dst = self.xp.empty_like(src)
            seconds = self.best(lambda: self.xp.copyto(dst, src), calls=max(self.calls, 10))
            self._floors[key] = 2 * src.nbytes / seconds / 1e9
        return self._floors[key]

    def gemm_gflops(self, n: int, b: int, d: int, h: int, dtype) -> float:
        """GFLOP/s of the batched product ``(n, b, d) @ (n, d, h)``, in the context that the rounds run in."""
        from fedopt.run import round_context

        key = ("gemm", n, b, d, h, np.dtype(dtype))
        if key not in self._floors:
            A = self.xp.ones((n, b, d), dtype=dtype)
            B = self.xp.ones((n, d, h), dtype=dtype)
            C = self.xp.empty((n, b, h), dtype=dtype)
            with round_context(self.backend):
                seconds = self.best(lambda: self.xp.matmul(A, B, out=C), calls=max(self.calls, 5))
            self._floors[key] = 2 * n * b * d * h / seconds / 1e9
        return self._floors[key]


# -------------------------------------------------------------------------------------------- data
def logistic_problem(d, n, rows_per_client, dtype, backend):
    """Logistic regression on Gaussian rows, sorted partition, ``n * rows_per_client`` rows."""
    from fedopt.datasets import partition
    from fedopt.problems import Logistic

    X, score = _gaussian(d, n * rows_per_client, 1, dtype)
    return Logistic(partition(X, (score[:, 0] > 0).astype(int), n, "sorted", dtype=dtype), backend=backend)


def mlp_problem(d, n, rows_per_client, hidden, dtype, backend):
    """The MLP with ``hidden`` units on Gaussian rows with ``CLASSES`` classes, sorted partition."""
    from fedopt.datasets import partition
    from fedopt.problems import MLP

    X, score = _gaussian(d, n * rows_per_client, CLASSES, dtype)
    return MLP(partition(X, score.argmax(axis=1), n, "sorted", dtype=dtype), hidden=hidden, backend=backend)


def _gaussian(d, samples, outputs, dtype):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((samples, d), dtype=np.float32).astype(dtype, copy=False)
    return X, X @ rng.standard_normal((d, outputs)).astype(dtype)


def method(name: str, Q: int, b: int):
    from fedopt import algorithms

    if name == "depositum":  # one round = one communication period of Q steps, gossip on a ring
        return algorithms.make(name, lr=LR, batch_size=b, comm_period=Q, topology="ring")
    hyper = {"gamma": GAMMA} if name == "fednmap" else {}
    return algorithms.make(name, local_steps=Q, lr_local=LR, lr_server=1.0, batch_size=b, **hyper)


# -------------------------------------------------------------------------------------- the suite
class Suite:
    """Builds the standard shapes on one backend and measures them; :meth:`run` returns the rows."""

    def __init__(self, backend="numba", quick=False, dtypes=DTYPES, clients=None, families=None, peers=False,
                 stream=None):
        from fedopt._backend import get_backend

        if any(n is not None and n < 1 for n in clients or ()):
            raise ValueError(f"clients must be integers >= 1 (None: the shape's), got {list(clients)}")
        self.backend = get_backend(backend)
        self.quick = quick
        self.dtypes = tuple(np.dtype(t).name for t in dtypes)
        self.clients = list(clients or [None])
        self.families = tuple(families or FAMILIES)
        self.peers = peers
        self.stream = stream
        self.timer = Timer(self.backend, quick)
        self.rows: list[Row] = []

    # ---- sizes
    def shape(self, name: str, clients: int | None):
        d, n, b, Q, per_client = SHAPES[name]
        n = n if clients is None else clients
        per_client = QUICK_ROWS_PER_CLIENT if self.quick else per_client
        per_client = max(b, min(per_client, MAX_ROWS // n))
        return d, n, b, Q, per_client

    @staticmethod
    def label(name, d, n, b, Q=None) -> str:
        return f"{name} d={d} n={n} b={b}" + (f" Q={Q}" if Q else "")

    @property
    def hidden(self) -> int:
        return 32 if self.quick else 64

    # ---- running
    def run(self) -> list[Row]:
        for clients in self.clients:
            for dtype in self.dtypes:
                if "prox" in self.families:
                    self.prox(dtype, clients)
                if "gossip" in self.families:
                    self.gossip(dtype, clients)
                if "gradient" in self.families:
                    self.gradients(dtype, clients)
                if "round" in self.families:
                    self.rounds(dtype, clients)
                if self.backend.name == "gpu":  # hand the cached blocks back before the next, larger sizes
                    self.backend.xp.get_default_memory_pool().free_all_blocks()
        return self.rows

    def add(self, row: Row):
        self.rows.append(row)
        if self.stream is not None:
            print(format_row(row), file=self.stream, flush=True)

    def prox(self, dtype, clients):
        """Every prox family and the fused normal-map step at each size, as one row and as ``n`` rows."""
        for size in QUICK_PROX_SIZES if self.quick else PROX_SIZES:
            for n in (1, PROX_ROWS if clients is None else clients):
                if size // n >= 2:
                    self.prox_shape(n, size // n, dtype)

    def prox_shape(self, n, p, dtype):
        from fedopt import regularizers as R

        xp = self.backend.xp
        rng = np.random.default_rng(1)
        Z = self.backend.asarray(rng.standard_normal((n, p)).astype(dtype))
        out = xp.empty_like(Z)
        floor = self.timer.copy_gbps(n * p, dtype)
        shape = f"n={n} p={p}"
        cases = {"l1": (R.L1(1.0), 2), "mcp": (R.MCP(1.0, 3.0), 2), "scad": (R.SCAD(1.0, 3.7), 2),
                 "box": (R.Box(-1.0, 1.0), 2), "l2ball": (R.L2Ball(1.0), 3), "simplex": (R.Simplex(1.0), 3),
                 # a fifth of the entries stay nonzero: the hard case for the threshold search
                 "l1ball": (R.L1Ball(0.1 * p), 3)}
        if p % GROUP_SIZE == 0:
            cases[f"group{GROUP_SIZE}"] = (R.GroupLasso(1.0, groups=GROUP_SIZE), 2)
        numba = self.backend.name == "numba"  # the plain loops are Numba CPU loops
        plain_out = np.empty_like(self.backend.to_numpy(Z))
        for name, (reg, passes) in cases.items():
            plain = plain_prox(reg, Z, 0.5, plain_out) if numba else []
            self.add(self.measured("prox", name, shape, dtype, partial(reg.prox, Z, 0.5, out=out), out,
                                   passes * Z.nbytes, floor, plain, plain_out))
        G, C = xp.ones_like(Z), xp.full_like(Z, 0.5)
        z_ref = Z[0].copy()
        reg = R.L1(1.0)
        x_ref = reg.prox(z_ref, GAMMA)
        Z_out = xp.empty_like(Z)
        call = partial(reg.normal_map_step, Z, G, z_ref, x_ref, LR, GAMMA, correction=C, z_out=Z_out, x_out=out)
        plain = plain_normal_map_soft(Z, G, C, z_ref, x_ref, LR, GAMMA, GAMMA * reg.lam, np.empty_like(plain_out),
                                      plain_out) if numba else []
        self.add(self.measured("prox", "normal-map-step-l1", shape, dtype, call, out, 5 * Z.nbytes, floor, plain,
                               plain_out))

    def gossip(self, dtype, clients):
        """Gossip ``W @ V`` on a ring of ``n`` nodes (three nonzeros a row of ``W``), rows of each size."""
        from fedopt.algorithms.decentralized.mixing import Mixer
        from fedopt.algorithms.decentralized.topology import make

        n = PROX_ROWS if clients is None else clients
        ring = make("ring", n)
        mixer = Mixer(ring, self.backend, dtype)
        for size in QUICK_PROX_SIZES if self.quick else PROX_SIZES:
            p = max(1, size // n)
            V = self.backend.asarray(np.random.default_rng(2).standard_normal((n, p)).astype(dtype))
            out = self.backend.xp.empty_like(V)
            plain_out = np.empty((n, p), dtype)
            plain = plain_mix(ring.mixing, V, plain_out) if self.backend.name == "numba" else []
            self.add(self.measured("gossip", "ring", f"n={n} p={p}", dtype, partial(mixer, V, out), out,
                                   2 * V.nbytes, self.timer.copy_gbps(n * p, dtype), plain, plain_out))

    def measured(self, family, name, shape, dtype, call, out, nbytes, floor, plain, plain_out) -> Row:
        """The row of ``call``, a public call that writes ``out``: its time, the time of the backend
        kernel call it makes, and the best time of the ``plain`` loops, which write ``plain_out``
        (each checked against ``out`` first)."""
        seconds = self.timer.best(call)
        kernel = capture_kernel_call(self.backend, call)
        kernel_seconds = self.timer.best(kernel) if kernel is not None else seconds
        expected = self.backend.to_numpy(out)
        plain_seconds = math.inf if plain else math.nan
        for loop in plain:
            loop()
            if not np.allclose(plain_out, expected, rtol=1e-4, atol=1e-4, equal_nan=True):
                raise AssertionError(f"a plain loop of {name} at {shape} ({dtype}) disagrees with fedopt by "
                                     f"{np.nanmax(np.abs(plain_out - expected)):.3g}")
            plain_seconds = min(plain_seconds, self.timer.best(loop))
        return Row.make(family, name, shape, dtype, self.backend.name, seconds, nbytes, "GB/s", "copy", floor,
                        kernel_seconds=kernel_seconds, plain_seconds=plain_seconds)

    def gradients(self, dtype, clients):
        from fedopt.run import round_context

        with round_context(self.backend):  # as the rounds that they are compared with, from the set-up on
            self._gradients(dtype, clients)

    def _gradients(self, dtype, clients):
        itemsize = np.dtype(dtype).itemsize
        for shape_name in SHAPES:
            d, n, b, _, per_client = self.shape(shape_name, clients)
            problem = logistic_problem(d, n, per_client, dtype, self.backend)
            rows = problem.sample_rows(np.random.default_rng(2), b)
            W = self.backend.asarray(0.01 * np.random.default_rng(3).standard_normal((n, problem.n_params)), dtype)
            out = self.backend.xp.empty_like(W)
            seconds = self.timer.best(partial(problem.client_grad, W, rows, out=out))
            self.add(Row.make("gradient", "logistic", self.label(shape_name, d, n, b), dtype, self.backend.name,
                              seconds, n * b * d * itemsize, "GB/s", "copy", self.timer.copy_gbps(n * b * d, dtype)))
        d, n, b, _, per_client = self.shape("mnist", clients)
        problem = mlp_problem(d, n, per_client, self.hidden, dtype, self.backend)
        rows = problem.sample_rows(np.random.default_rng(2), b)
        W = self.backend.xp.broadcast_to(problem.init(0), (n, problem.n_params)).copy()
        out = self.backend.xp.empty_like(W)
        seconds = self.timer.best(partial(problem.client_grad, W, rows, out=out))
        h = self.hidden
        self.add(Row.make("gradient", f"mlp-h{h}", self.label("mnist", d, n, b), dtype, self.backend.name, seconds,
                          _mlp_flops(n, b, d, h), "GFLOP/s", "GEMM", self.timer.gemm_gflops(n, b, d, h, dtype)))

    def rounds(self, dtype, clients):
        from fedopt.regularizers import L1
        from fedopt.run import round_context

        itemsize = np.dtype(dtype).itemsize
        for shape_name in SHAPES:
            d, n, b, Q, per_client = self.shape(shape_name, clients)
            problem = logistic_problem(d, n, per_client, dtype, self.backend)
            floor = self.timer.copy_gbps(Q * n * b * d, dtype)
            for name in METHODS:
                algorithm = method(name, Q, b)
                # as fedopt.run runs them, from the set-up on: BLAS threads left spinning by the topology's
                # spectrum made the MLP DEPOSITUM rounds timed next 2x slower
                with round_context(self.backend):
                    state = algorithm.init(problem, L1(LAM), np.random.default_rng(1))
                    seconds = self.timer.best(partial(algorithm.round, state))
                peers = self.peer_times(problem, algorithm, state, seconds) if name == "fednmap" else {}
                self.add(Row.make("round", f"{name}-logistic-l1", self.label(shape_name, d, n, b, Q), dtype,
                                  self.backend.name, seconds, Q * n * b * d * itemsize, "GB/s", "copy", floor, peers))
        shape_name = "sweep" if self.quick else "mnist"
        d, n, b, Q, per_client = self.shape(shape_name, clients)
        h = self.hidden
        problem = mlp_problem(d, n, per_client, h, dtype, self.backend)
        floor = self.timer.gemm_gflops(n, b, d, h, dtype)
        for name in METHODS:
            algorithm = method(name, Q, b)
            with round_context(self.backend):
                state = algorithm.init(problem, L1(LAM), np.random.default_rng(1))
                seconds = self.timer.best(partial(algorithm.round, state), calls=5)
            peers = self.peer_times(problem, algorithm, state, seconds) if name == "fednmap" else {}
            self.add(Row.make("round", f"{name}-mlp-h{h}-l1", self.label(shape_name, d, n, b, Q), dtype,
                              self.backend.name, seconds, Q * _mlp_flops(n, b, d, h), "GFLOP/s", "GEMM", floor, peers))

    # ---- peers
    def peer_times(self, problem, algorithm, state, seconds) -> dict:
        """``{peer: {"seconds", "speedup"}}`` of the peers of a FedNMap logistic or MLP + l1 round (float64 only)."""
        if not self.peers or problem.dtype != np.float64:
            return {}
        peers = load_peers()
        if not peers:
            return {}
        mlp = (problem.hidden, problem.n_classes) if problem.name == "mlp" else None
        X, y = problem.dataset.X, problem.dataset.y if mlp else 2.0 * problem.dataset.y - 1  # class codes or +-1
        state = algorithm.round(state)  # nonzero corrections
        rows = problem.sample_rows(np.random.default_rng(3), algorithm.batch_size, steps=algorithm.local_steps)
        z, c = self.backend.to_numpy(state.z), self.backend.to_numpy(state.vars["c"])
        expected = self.backend.to_numpy(round_on_rows(algorithm, state, rows).z)
        times = {}
        for name, make in peers.items():
            peer_round = make(X, y, rows, z, c, lam=LAM, lr_local=algorithm.lr_local, lr_server=algorithm.lr_server,
                              gamma=algorithm.gamma, device="cuda" if self.backend.name == "gpu" else "cpu", mlp=mlp)
            if peer_round is None:
                continue
            z_peer = peer_round()
            if not np.allclose(z_peer, expected, rtol=1e-9, atol=1e-12):
                raise AssertionError(f"the {name} peer disagrees with fedopt's FedNMap round by "
                                     f"{np.abs(z_peer - expected).max():.3g}")
            peer_s = self.timer.best(peer_round, calls=3 if self.quick else 10)
            times[name] = {"seconds": peer_s, "speedup": peer_s / seconds}
        return times


# ------------------------------------------------------------------------------------ plain loops
def plain_prox(reg, Z, step, out) -> list:
    """Zero-argument calls of the plain loops (:mod:`fedopt.kernels.cpu.plain`) that compute
    ``reg.prox(Z, step, out=out)`` for the 2-D NumPy array ``Z``: the parallel and the serial
    compilation of each loop that fits ``reg``; empty when none does (per-coordinate box bounds,
    group labels, a ball's center, the nuclear norm)."""
    from fedopt import kernels as K
    from fedopt import regularizers as R
    from fedopt._backend import get_backend
    from fedopt.kernels.cpu import plain

    scalar = Z.dtype.type  # scalars in the data's dtype, so float32 data is processed in float32
    flat, flat_out = Z.reshape(-1), out.reshape(-1)
    form = reg._elementwise(step, get_backend("numba"), Z.dtype)
    if form is not None:
        kind, theta, w = form
        theta = [scalar(t) for t in theta]
        if kind == K.SOFT_WEIGHTED:
            taus = (theta[0] * np.asarray(w[0])).astype(Z.dtype)
            return [partial(loop, Z, taus, out) for loop in plain.soft_weighted]
        loops = {K.SOFT: plain.soft, K.CLIP: plain.clip, K.MCP: plain.firm, K.SCAD: plain.scad}
        return [partial(loop, flat, *theta, flat_out) for loop in loops.get(kind, ())]
    if isinstance(reg, R.GroupLasso) and np.ndim(reg.groups) == 0 and reg.weights is None:
        tau = scalar(step * reg.lam * math.sqrt(reg.groups))
        return [partial(loop, flat, reg.groups, tau, flat_out) for loop in plain.group_soft]
    if isinstance(reg, R.L2Ball) and reg.center is None:
        return [partial(loop, Z, scalar(reg.radius), out) for loop in (*plain.l2_ball_rows, *plain.l2_ball_columns)]
    if isinstance(reg, R.Simplex | R.L1Ball):
        use_abs = isinstance(reg, R.L1Ball)
        return [partial(loop, Z, scalar(reg.radius), use_abs, out)
                for loop in (*plain.simplex_sort, *plain.simplex_michelot)]
    return []


def plain_mix(W, V, out) -> list:
    """Zero-argument calls of ``out = W @ V``: the plain CSR loop (parallel and serial) and the dense
    BLAS product, the best plain choices for a sparse and for a dense ``W``."""
    from scipy import sparse

    from fedopt.kernels.cpu import plain

    csr = sparse.csr_matrix(W)
    weights, dense = csr.data.astype(V.dtype), W.astype(V.dtype)
    return [*(partial(loop, csr.indptr, csr.indices, weights, V, out) for loop in plain.mix_csr),
            partial(np.matmul, dense, V, out=out)]


def capture_kernel_call(backend, call):
    """A zero-argument call that repeats the first backend kernel of :data:`PROX_KERNELS` that ``call()``
    makes, with the same arguments: the kernel as the library calls it, without the checks and
    conversions of the public API. None when ``call`` makes none of them."""
    kernels, calls = backend.kernels, []
    originals = {name: getattr(kernels, name) for name in PROX_KERNELS if hasattr(kernels, name)}

    def recorder(kernel):
        def record(*args):
            calls.append(partial(kernel, *args))
            return kernel(*args)

        return record

    try:
        for name, kernel in originals.items():
            setattr(kernels, name, recorder(kernel))
        call()
    finally:
        for name, kernel in originals.items():
            setattr(kernels, name, kernel)
    return calls[0] if calls else None


def plain_normal_map_soft(Z, G, C, z_ref, x_ref, lr, gamma, tau, Z_out, X_out) -> list:
    """Zero-argument calls of the plain loops of the fused normal-map step with soft thresholding at
    ``tau`` (``L1(tau / gamma).normal_map_step``), rows or columns in the parallel loop."""
    from fedopt.kernels.cpu import plain

    scalar = Z.dtype.type
    args = (Z, G, C, z_ref, x_ref, scalar(lr), scalar(1.0 / gamma), scalar(tau), Z_out, X_out)
    return [partial(loop, *args) for loop in (*plain.normal_map_soft_rows, *plain.normal_map_soft_columns)]


def _mlp_flops(n, b, d, h, k=CLASSES) -> float:
    """Forward and backward of the one-hidden-layer network on ``n b`` samples."""
    return 2.0 * n * b * (2 * d * h + 3 * h * k)


def round_on_rows(algorithm, state, rows):
    """``algorithm.round(state)`` with its minibatch rows fixed to ``rows`` ``(Q, n, b)``."""
    problem = state.env.problem
    problem.sample_rows = lambda rng, batch, steps=None: rows
    try:
        return algorithm.round(state)
    finally:
        del problem.sample_rows


def load_peers() -> dict:
    """The peer round builders of ``bench/peers/`` in a source checkout: ``{name: make(...)}``.

    Each ``make(X, y, rows, z, c, lam, lr_local, lr_server, gamma, device, mlp)`` returns a
    zero-argument callable that runs one FedNMap round (logistic regression, or the MLP when
    ``mlp=(hidden, classes)``) and returns the next server point as a NumPy array, or None when
    the peer cannot run here (torch missing, no CUDA device).
    """
    root = Path(__file__).resolve().parent.parent / "bench"
    if not (root / "peers").is_dir():
        return {}
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from peers import numpy_fednmap, torch_fednmap

    def numpy_loop(X, y, rows, z, c, lam, lr_local, lr_server, gamma, device, mlp=None):
        corrections = list(c)
        grad = numpy_fednmap.logistic_grad if mlp is None else (
            lambda A, yb, x: numpy_fednmap.mlp_grad(A, yb, x, *mlp))
        return lambda: numpy_fednmap.fednmap_round(X, y, rows, z, corrections, lam, lr_local, lr_server, gamma,
                                                   grad)[0]

    return {"numpy_loop": numpy_loop, "torch_batched": torch_fednmap.fednmap_round_builder}


# ---------------------------------------------------------------------------------------- startup
def startup_seconds(repeats: int = 3, argv=("run", "--rounds", "10", "--n-clients", "5"), stream=None) -> dict:
    """Wall time of ``python -m fedopt run`` on a small problem: cold (a fresh ``NUMBA_CACHE_DIR``), then warm.

    The cold run compiles every kernel the run needs into the empty cache; the warm runs load them
    from it. Returns ``{"cold": seconds, "warm": [seconds, ...], "warm_best": seconds}``.
    """
    stream = sys.stdout if stream is None else stream
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        command = [sys.executable, "-m", "fedopt", *argv, "--out", os.path.join(cache, "history.csv")]

        def once():
            began = time.perf_counter()
            subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
            return time.perf_counter() - began

        cold = once()
        warm = [once() for _ in range(repeats)]
    result = {"command": "fedopt " + " ".join(argv), "cold": cold, "warm": warm, "warm_best": min(warm),
              "warm_median": statistics.median(warm)}
    print(f"`{result['command']}`: cold {cold:.2f} s (empty kernel cache), warm {min(warm):.2f} s best, "
          f"{result['warm_median']:.2f} s median of {repeats}", file=stream)
    return result


def import_seconds(modules=("numpy", "scipy.sparse", "numba", "sklearn", "fedopt", "fedopt.problems")) -> dict:
    """Import time of ``modules`` (each with what it imports first) as ``fedopt run`` loads its code.

    From ``python -X importtime``; a module imported inside another counts in both.
    """
    code = "import fedopt.cli, fedopt.problems, fedopt.sweep.execute, fedopt.kernels.cpu"
    err = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True,
                         check=True).stderr
    seconds = {}
    for line in err.splitlines():
        parts = [part.strip() for part in line.removeprefix("import time:").split("|")]
        if len(parts) == 3 and parts[1].isdigit() and parts[2] in modules and parts[2] not in seconds:
            seconds[parts[2]] = int(parts[1]) / 1e6
    return seconds


# -------------------------------------------------------------------------------------- reporting
HEADER = f"{'family':9s} {'name':24s} {'shape':32s} {'dtype':8s} {'time':>10s} {'rate':>16s} {'floor':>20s} " \
         f"{'% floor':>8s} {'kernel':>10s} {'plain':>10s} {'x plain':>8s}  peers"


def format_row(row: Row) -> str:
    peers = ", ".join(f"{v['speedup']:.1f}x {k}" for k, v in row.peers.items())
    plain = "" if math.isnan(row.plain_seconds) else (
        f"{_fmt_time(row.kernel_seconds):>10s} {_fmt_time(row.plain_seconds):>10s} {row.over_plain:8.2f}")
    return (f"{row.family:9s} {row.name:24s} {row.shape:32s} {row.dtype:8s} {_fmt_time(row.seconds):>10s} "
            f"{row.rate:9.2f} {row.unit:6s} {row.floor:>5s} {row.floor_rate:8.2f} {row.unit:6s} "
            f"{100 * row.ratio:7.0f}% {plain:30s}  {peers}").rstrip()


def _fmt_time(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"


def machine() -> dict:
    """What the figures depend on: the host, the library versions and the thread count."""
    import numba

    from fedopt._backend import cpu_model, host_cpu_name

    info = {"platform": platform.platform(), "processor": cpu_model(), "host_cpu": host_cpu_name(),
            "cpu_count": os.cpu_count(), "python": platform.python_version(), "numpy": np.__version__,
            "numba": numba.__version__, "numba_threads": numba.get_num_threads()}
    if "cupy" in sys.modules:
        cupy = sys.modules["cupy"]
        info["gpu"] = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"].decode()
        info["cupy"] = cupy.__version__
    try:
        from fedopt import __version__

        info["fedopt"] = __version__
    except ImportError:  # pragma: no cover
        pass
    return info


def write_json(path, rows: list[Row], backend: str, quick: bool) -> Path:
    """The rows with the machine and options, as strict JSON (for tracking figures over time): a
    time that was not measured (NaN: ``kernel_seconds`` and ``plain_seconds`` outside the prox and
    gossip rows) is null."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"created": time.strftime("%Y-%m-%dT%H:%M:%S"), "backend": backend, "quick": quick,
                "machine": machine(), "rows": [_finite(asdict(row)) for row in rows]}
    path.write_text(json.dumps(document, indent=1, allow_nan=False), encoding="utf-8")
    return path


def _finite(value):
    """``value`` with every non-finite float in it replaced by None."""
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def main(backend="numba", quick=False, dtypes=DTYPES, clients=None, families=None, peers=False, json_path=None,
         stream=None) -> list[Row]:
    """Measure the suite, print one line per row to ``stream`` (stdout) and write ``json_path``."""
    stream = sys.stdout if stream is None else stream
    suite = Suite(backend, quick, dtypes, clients, families, peers, stream)
    info = machine()
    where = f"{info['gpu']}, " if "gpu" in info else ""
    print(f"fedopt bench on {suite.backend.name}: {where}{info['processor']} ({info['host_cpu']}), "
          f"{info['cpu_count']} cores, numpy "
          f"{info['numpy']}, numba {info['numba']} ({info['numba_threads']} threads){', quick' if quick else ''}",
          file=stream)
    print("time = best time per call after a warm-up (calls under 20 us timed in loops); "
          "floor = same-process copy (GB/s) or batched GEMM (GFLOP/s); "
          "kernel = the backend kernel call alone; plain = the plainest Numba loop of the same operation; "
          "x plain = kernel / plain; peers = their time over fedopt's", file=stream)
    print(HEADER, file=stream, flush=True)
    rows = suite.run()
    if json_path:
        print(f"rows written to {write_json(json_path, rows, suite.backend.name, quick)}", file=stream)
    return rows


__all__ = ["DTYPES", "FAMILIES", "METHODS", "SHAPES", "Row", "Suite", "Timer", "capture_kernel_call", "format_row",
           "import_seconds", "load_peers", "machine", "main", "plain_mix", "plain_normal_map_soft", "plain_prox",
           "round_on_rows", "startup_seconds", "write_json"]
