"""Shared machinery of the CPU kernel benchmarks (pytest-benchmark).

What every benchmark reports, besides pytest-benchmark's own statistics (``extra_info``, and a
compact table at the end of the session):

* ``bytes``: the operator's minimal memory traffic (the table of section 1.3 of the performance
  spec), so that ``gbps = bytes / min time`` is the achieved bandwidth;
* ``copy_gbps``: the bandwidth of ``np.copyto(dst, src)`` on arrays of the same size and dtype,
  measured in this process (best of N single calls, ``2 * p * itemsize`` bytes), and
  ``pct_copy = gbps / copy_gbps``;
* ``numpy_s`` and ``x_numpy``: the best time of the best pure-NumPy expression of the same
  operator, and the kernel's speed-up over it (where there is one);
* ``plain_s`` and ``x_plain``: the best time of the plainest Numba loops of the same operation
  (:mod:`fedopt.kernels.cpu.plain`, parallel and serial), and the time of the backend kernel
  call the public call makes (``kernel_s``, without the API's checks) over it.

Targets (CPU): at every size, separable proxes and the fused normal-map step at most 1.25x the
plain loop and row proxes at most 2x; at p = 1e7, at least 70 % of the copy bandwidth and at
least 5x the NumPy expression. The summary table flags the rows that miss them. Nothing is
asserted on timings.

Files named ``bench_*.py`` under ``bench/`` are collected by :func:`pytest_collect_file` below,
so no ``python_files`` override is needed. Run from the repository root::

    python -m pytest bench --benchmark-enable --benchmark-only -q -p no:cacheprovider
    python -m pytest bench --benchmark-enable --benchmark-only -q -p no:cacheprovider --bench-sizes=1e3,1e5

Sizes can also be restricted with ``FEDOPT_BENCH_SIZES=1e3,1e5``. Without ``--benchmark-enable``
(``pyproject.toml`` adds ``--benchmark-disable``) every benchmark runs once, as a smoke test.
"""

from __future__ import annotations

import fnmatch
import math
import os
import time
from dataclasses import dataclass

import numpy as np
import pytest

SIZES_ENV = "FEDOPT_BENCH_SIZES"

#: p at and above which the acceptance targets apply.
TARGET_P = 10_000_000
TARGET_PCT_COPY = 0.70
TARGET_X_NUMPY = 5.0
#: Kernel time over the plain loop: separable proxes and the normal-map step, row proxes.
TARGET_X_PLAIN = 1.25
TARGET_X_PLAIN_ROWS = 2.0


# ---- collection --------------------------------------------------------------------------------
def pytest_addoption(parser):
    group = parser.getgroup("fedopt-bench", "fedopt benchmarks")
    group.addoption(
        "--bench-sizes",
        default=None,
        help=f"comma-separated vector lengths p to benchmark, e.g. 1e3,1e5 (default: all; env {SIZES_ENV})",
    )


def pytest_collect_file(file_path, parent):
    """Collect ``bench_*.py`` as test modules (the project's ``python_files`` only matches ``test_*.py``)."""
    if file_path.suffix != ".py" or not fnmatch.fnmatch(file_path.name, "bench_*.py"):
        return None
    # The python plugin already collects files given on the command line and files matching
    # python_files (e.g. with -o python_files=bench_*.py): do not collect them twice.
    if parent.session.isinitpath(file_path):
        return None
    if any(fnmatch.fnmatch(file_path.name, pattern) for pattern in parent.config.getini("python_files")):
        return None
    return pytest.Module.from_parent(parent, path=file_path)


def parse_sizes(text: str | None) -> set[int] | None:
    """``"1e3, 1e5"`` -> ``{1000, 100000}``; None or empty -> None (all sizes)."""
    if not text or not text.strip():
        return None
    try:
        return {int(float(part)) for part in text.replace(";", ",").split(",") if part.strip()}
    except ValueError:
        raise pytest.UsageError(f"--bench-sizes / {SIZES_ENV} must be comma-separated numbers like 1e3,1e5, "
                                f"got {text!r}") from None


def pytest_collection_modifyitems(config, items):
    """Deselect the benchmarks whose parameter ``p`` is not among the requested sizes."""
    sizes = parse_sizes(config.getoption("--bench-sizes", default=None) or os.environ.get(SIZES_ENV))
    if sizes is None:
        return
    here = os.path.dirname(os.path.abspath(__file__))
    kept, dropped = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        in_bench = str(item.path).startswith(here + os.sep)
        if in_bench and "p" in params and int(params["p"]) not in sizes:
            dropped.append(item)
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


# ---- naming and timing helpers -----------------------------------------------------------------
def fmt_p(p: int) -> str:
    """1000 -> '1e3', 10_000_000 -> '1e7', 90_000 -> '9e4', 12345 -> '12345'."""
    exponent = math.floor(math.log10(p)) if p > 0 else 0
    mantissa = p / 10**exponent
    if mantissa == int(mantissa):
        return f"{int(mantissa)}e{exponent}" if mantissa != 1 else f"1e{exponent}"
    return str(p)


def dtype_tag(dtype) -> str:
    return {np.dtype(np.float64): "f64", np.dtype(np.float32): "f32"}.get(np.dtype(dtype), np.dtype(dtype).name)


def rounds_for(p: int) -> int:
    """Timed rounds of one benchmark: many for tiny vectors, about 15 for vectors in DRAM."""
    if p <= 10_000:
        return 2000
    if p <= 1_000_000:
        return 200
    return 15


def best_time(fn, rounds: int, budget_s: float = 1.5) -> float:
    """Best wall time of single calls of ``fn()``, after one untimed warm-up call.

    Stops after ``rounds`` timed calls or once ``budget_s`` seconds have gone by, whichever comes
    first, but always times at least one call. The same method (perf_counter around one call) as
    ``benchmark.pedantic(..., iterations=1)``.
    """
    fn()
    best = math.inf
    start = time.perf_counter()
    for _ in range(max(1, rounds)):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
        if time.perf_counter() - start > budget_s:
            break
    return best


# ---- same-process copy bandwidth ---------------------------------------------------------------
class CopyBandwidth:
    """``np.copyto(dst, src)`` bandwidth per (p, dtype), measured once per session, lazily."""

    def __init__(self):
        self._cache: dict[tuple[int, np.dtype], tuple[float, float]] = {}

    def time(self, p: int, dtype) -> float:
        return self._measure(p, dtype)[0]

    def gbps(self, p: int, dtype) -> float:
        return self._measure(p, dtype)[1]

    def _measure(self, p, dtype):
        key = (int(p), np.dtype(dtype))
        if key not in self._cache:
            src = np.random.default_rng(0).standard_normal(p).astype(dtype)
            dst = np.empty_like(src)
            np.copyto(dst, src)  # first touch of dst's pages
            seconds = best_time(lambda: np.copyto(dst, src), rounds=rounds_for(p), budget_s=2.0)
            self._cache[key] = (seconds, 2 * p * key[1].itemsize / seconds / 1e9)
        return self._cache[key]


@pytest.fixture(scope="session")
def copy_bandwidth() -> CopyBandwidth:
    return CopyBandwidth()


# ---- results -----------------------------------------------------------------------------------
@dataclass
class Row:
    name: str
    p: int
    dtype: str
    seconds: float
    gbps: float | None
    copy_gbps: float | None
    numpy_s: float | None
    note: str = ""
    prox_targets: bool = True
    plain_s: float | None = None
    plain_target: float = TARGET_X_PLAIN
    kernel_s: float | None = None

    @property
    def pct_copy(self):
        return None if self.gbps is None or not self.copy_gbps else self.gbps / self.copy_gbps

    @property
    def x_numpy(self):
        return None if self.numpy_s is None else self.numpy_s / self.seconds

    @property
    def x_plain(self):
        return None if self.plain_s is None else (self.kernel_s or self.seconds) / self.plain_s

    @property
    def target(self) -> str:
        """The prox kernels' targets; other benchmarks state their own in ``note``."""
        if not self.prox_targets:
            return ""
        misses = []
        if self.x_plain is not None and self.x_plain > self.plain_target:
            misses.append("plain")
        if self.p >= TARGET_P and self.pct_copy is not None and self.pct_copy < TARGET_PCT_COPY:
            misses.append("bw")
        if self.p >= TARGET_P and self.x_numpy is not None and self.x_numpy < TARGET_X_NUMPY:
            misses.append("x5")
        return "MISS " + ",".join(misses) if misses else "ok"


_ROWS: list[Row] = []


class KernelBench:
    """Runs one benchmark through pytest-benchmark and records what the summary table shows."""

    def __init__(self, benchmark, copy_bandwidth: CopyBandwidth, name: str):
        self.benchmark = benchmark
        self.copy = copy_bandwidth
        self.name = name

    @property
    def enabled(self) -> bool:
        return not self.benchmark.disabled

    @property
    def min_s(self) -> float | None:
        """The benchmark's best time so far, None when benchmarks are disabled or nothing ran."""
        stats = getattr(self.benchmark, "stats", None)
        return stats.stats.min if self.enabled and stats is not None and stats.stats else None

    def run(self, fn, p: int, rounds: int | None = None):
        """``benchmark.pedantic(fn)``: one warm-up call (Numba compiles there), then timed single calls."""
        return self.benchmark.pedantic(fn, warmup_rounds=1, rounds=rounds or rounds_for(p), iterations=1)

    def numpy_time(self, fn, p: int) -> float | None:
        """Best time of the NumPy expression ``fn()``; None (and a single call) when benchmarks are disabled."""
        if not self.enabled:
            fn()
            return None
        return best_time(fn, rounds=max(3, rounds_for(p) // 2))

    def plain_time(self, loops, p: int, check=None) -> float | None:
        """Best time of the best of the plain ``loops`` (zero-argument calls); ``check()`` runs after
        each loop's first call (untimed). None without loops or when benchmarks are disabled."""
        times = []
        for loop in loops:
            loop()
            if check is not None:
                check()
            if self.enabled:
                times.append(best_time(loop, rounds=max(3, rounds_for(p) // 2)))
        return min(times) if times else None

    def record(
        self,
        p: int,
        dtype,
        nbytes: int | None,
        numpy_s: float | None = None,
        note: str = "",
        copy_p: int | None = None,
        extra: dict | None = None,
        prox_targets: bool = True,
        plain_s: float | None = None,
        plain_target: float = TARGET_X_PLAIN,
        kernel_s: float | None = None,
    ):
        """Fill ``benchmark.extra_info`` and add a row to the summary table (nothing when disabled).

        ``nbytes`` None means no bandwidth figure (compute-bound operators). ``copy_p`` is the
        number of elements of the copy baseline (default ``p``); ``extra`` goes to ``extra_info``;
        ``prox_targets=False`` leaves the prox kernels' targets out of the table (state others in
        ``note``); ``plain_s`` is the plain loop's time, held to ``plain_target`` against ``kernel_s``
        (the backend kernel call alone; default the benchmark's own time).
        """
        seconds = self.min_s
        if seconds is None:
            return
        info = self.benchmark.extra_info
        info.update(extra or {})
        info.update(p=int(p), dtype=np.dtype(dtype).name, min_s=seconds)
        gbps = copy_gbps = None
        if nbytes is not None:
            gbps = nbytes / seconds / 1e9
            copy_gbps = self.copy.gbps(copy_p or p, dtype)
            info.update(
                bytes=int(nbytes),
                gbps=round(gbps, 3),
                copy_gbps=round(copy_gbps, 3),
                copy_s=self.copy.time(copy_p or p, dtype),
                pct_copy=round(gbps / copy_gbps, 4),
            )
        if numpy_s is not None:
            info.update(numpy_s=numpy_s, x_numpy=round(numpy_s / seconds, 3))
        if plain_s is not None:
            info.update(plain_s=plain_s, kernel_s=kernel_s, x_plain=round((kernel_s or seconds) / plain_s, 3))
        if note:
            info["note"] = note
        _ROWS.append(Row(self.name, int(p), dtype_tag(dtype), seconds, gbps, copy_gbps, numpy_s, note, prox_targets,
                         plain_s, plain_target, kernel_s))


@pytest.fixture
def kbench(request, benchmark, copy_bandwidth) -> KernelBench:
    """A :class:`KernelBench` named after the test's parameter id (``l1-p1e7-f64``)."""
    callspec = getattr(request.node, "callspec", None)
    return KernelBench(benchmark, copy_bandwidth, callspec.id if callspec else request.node.name)


# ---- summary table -----------------------------------------------------------------------------
def _fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def summary_lines(rows: list[Row]) -> list[str]:
    header = ("name", "p", "dtype", "time", "GB/s", "copy GB/s", "% copy", "NumPy", "x NumPy", "kernel", "plain",
              "x plain", "target", "note")
    table = [header]
    for r in rows:
        table.append(
            (
                r.name,
                fmt_p(r.p),
                r.dtype,
                _fmt_time(r.seconds),
                _fmt(r.gbps, ".1f"),
                _fmt(r.copy_gbps, ".1f"),
                "-" if r.pct_copy is None else f"{100 * r.pct_copy:.0f}%",
                _fmt_time(r.numpy_s),
                _fmt(r.x_numpy, ".1f"),
                _fmt_time(r.kernel_s),
                _fmt_time(r.plain_s),
                _fmt(r.x_plain, ".2f"),
                r.target,
                r.note,
            )
        )
    widths = [max(len(row[k]) for row in table) for k in range(len(header))]
    right = {1, 3, 4, 5, 6, 7, 8, 9, 10, 11}
    lines = []
    for n, row in enumerate(table):
        cells = [cell.rjust(w) if k in right else cell.ljust(w)
                 for k, (cell, w) in enumerate(zip(row, widths, strict=True))]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not _ROWS:
        return
    tr = terminalreporter
    tr.section("fedopt kernel bandwidth summary")
    tr.write_line(
        "time = min over rounds; GB/s = minimal traffic / time; copy = np.copyto in this process; "
        "kernel = the backend kernel call alone; plain = the plainest Numba loop (x plain = kernel / plain); "
        f"targets: x plain <= {TARGET_X_PLAIN:g} (row proxes {TARGET_X_PLAIN_ROWS:g}), and at p >= {fmt_p(TARGET_P)} "
        f">= {TARGET_PCT_COPY:.0%} of copy and >= {TARGET_X_NUMPY:g}x NumPy"
    )
    for line in summary_lines(_ROWS):
        tr.write_line(line)
