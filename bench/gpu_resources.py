"""Registers, spills and shared memory of the Numba-CUDA kernels, compiled for a GPU without one.

Each kernel of :mod:`fedopt.kernels.gpu.local_steps` (at the block shapes its launcher picks) and
of :mod:`fedopt.kernels.gpu.rows` is compiled to PTX by Numba-CUDA's NVVM for ``--cc`` (default
9.0, the H100 and H200), then assembled by ``ptxas -v``, whose report is printed: registers a
thread, spill stores and loads, static shared memory, and the blocks a multiprocessor can hold
by its 65 536 registers (allocated 256 a warp at a time) and 2 048 threads. A kernel that does
not compile fails here, before any device time is spent. Timings need the device
(``bench/bench_gpu_rounds.py``).

Needs the CUDA compilers as wheels, no GPU and no driver::

    pip install "numba-cuda[cu13]" nvidia-cuda-nvcc
    NUMBA_ENABLE_CUDASIM=0 python bench/gpu_resources.py [--cc 9.0] [--ptxas PATH]
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import types

import numpy as np

#: A multiprocessor's registers, their allocation unit (a warp's), and its threads (sm_80, sm_90).
REGISTERS_PER_SM, REGISTER_UNIT, THREADS_PER_SM = 65_536, 256, 2048


def blocks_per_sm(registers: int, threads: int) -> int:
    """Blocks of ``threads`` that fit on a multiprocessor by registers and threads (shared memory aside)."""
    per_warp = -(-registers * 32 // REGISTER_UNIT) * REGISTER_UNIT
    return min(REGISTERS_PER_SM // (per_warp * (threads // 32)), THREADS_PER_SM // threads)


def _ptxas(explicit: str | None) -> str:
    """``ptxas``: the one given, that of the ``nvidia-cuda-nvcc`` wheel (of the NVVM's CUDA
    release: an older one refuses newer PTX), or the one on PATH."""
    wheels = glob.glob(os.path.join(sysconfig.get_paths()["purelib"], "nvidia", "*", "bin", "ptxas"))
    found = explicit or (wheels[0] if wheels else shutil.which("ptxas"))
    if not found:
        sys.exit("ptxas not found: pip install nvidia-cuda-nvcc, or pass --ptxas PATH")
    return found


def _compile_without_a_device(cc):
    """Numba-CUDA compiles the device functions a kernel calls for the current device's compute
    capability; without a device, name ``cc`` instead (the one internal this script relies on)."""
    import numba.cuda.dispatcher as dispatcher

    if not dispatcher.cuda.is_available():
        dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=cc)


def _cases():
    """``(name, python function, signature, launch bounds or None, threads)`` of every kernel."""
    from numba import types as nt

    from fedopt.kernels.gpu import local_steps, rows

    def array(dtype, ndim):
        return nt.Array(dtype, ndim, "C")

    f64, f32, i64, u8, b1 = nt.float64, nt.float32, nt.int64, nt.uint8, nt.boolean
    for features, real in ((f64, f64), (f32, f32), (u8, f32)):
        for threads, per_thread in ((256, 4), (256, 1), (64, 1), (32, 1)):
            kernel = local_steps._build(threads, local_steps.DEFAULT_TILE, per_thread, real is f32)
            signature = (array(features, 2), array(real, 1), array(i64, 1), array(i64, 1), array(i64, 3), i64, f64,
                         b1, array(real, 2), array(f64, 1), i64, array(f64, 3), array(real, 2), array(real, 2),
                         array(real, 2), b1)
            name = f"local_steps X={features} state={real} NT={threads} KD={per_thread}"
            yield name, kernel.py_func, signature, (threads, local_steps.MIN_BLOCKS_PER_SM), threads
    for real in (f64, f32):  # launched with MAX_AUTO_BLOCK threads on long rows; shared memory is dynamic
        z = array(real, 2)
        for name, kernel, signature in (
            ("l2_ball", rows._l2_ball_kernel, (z, array(real, 1), f64, z)),
            ("group", rows._group_kernel, (z, array(i64, 1), array(i64, 1), array(f64, 1), f64, z)),
            ("michelot", rows._michelot_kernel, (z, f64, b1, z)),
        ):
            yield f"{name} {real}", kernel.py_func, signature, None, rows.MAX_AUTO_BLOCK


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cc", default="9.0", help="compute capability, e.g. 9.0 (H100, H200) or 8.0 (A100)")
    parser.add_argument("--ptxas", default=None, help="the ptxas to use (default: PATH, then the wheel's)")
    args = parser.parse_args(argv)
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        sys.exit("the CUDA simulator compiles nothing: run with NUMBA_ENABLE_CUDASIM=0")
    cc = tuple(int(part) for part in args.cc.split("."))
    ptxas = _ptxas(args.ptxas)
    if not hasattr(np, "row_stack"):  # see fedopt._backend: numba-cuda <= 0.30.4 on NumPy 2.5
        np.row_stack = np.vstack
    from numba.cuda import compile_ptx

    _compile_without_a_device(cc)
    arch = f"sm_{cc[0]}{cc[1]}"
    print(f"{arch}, {subprocess.run([ptxas, '--version'], capture_output=True, text=True).stdout.splitlines()[-1]}")
    print(f"{'kernel':<52} {'regs':>5} {'spill st/ld':>12} {'smem':>8} {'blocks/SM':>10}")
    failed = 0
    with tempfile.TemporaryDirectory() as folder:
        for name, function, signature, bounds, threads in _cases():
            try:
                options = {"launch_bounds": bounds} if bounds else {}
                ptx, _ = compile_ptx(function, signature, cc=cc, **options)
            except Exception as err:  # a kernel that does not compile for the device: the point of this script
                failed += 1
                print(f"{name:<52} FAILS TO COMPILE: {type(err).__name__}: {err}")
                continue
            path = os.path.join(folder, "kernel.ptx")
            with open(path, "w") as handle:
                handle.write(ptx)
            assembled = subprocess.run([ptxas, f"-arch={arch}", "-v", path, "-o", os.devnull], capture_output=True,
                                       text=True)
            report = assembled.stderr
            if assembled.returncode:
                failed += 1
                print(f"{name:<52} ptxas fails: {report.strip()}")
                continue
            registers = int(re.search(r"Used (\d+) registers", report).group(1))
            spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", report).groups()
            shared = re.search(r"(\d+) bytes smem", report)
            blocks = blocks_per_sm(registers, threads)
            print(f"{name:<52} {registers:>5} {'/'.join(spills):>12} {shared.group(1) if shared else '0':>8} "
                  f"{blocks:>10}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
