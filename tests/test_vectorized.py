"""The element-wise kernels' loops compile to SIMD code on x86-64.

A loop that stays scalar is still correct, so only its machine code shows it: a wraparound
select on a possibly negative index once kept every separable prox scalar on AVX-512 (8x
slower). The checks look for packed arithmetic (``subpd``, ``mulps``, ``vmaxpd``, ...), which
scalar code never uses: in each kind's loop of ``_prox_tile`` compiled alone (the kind a
constant, so that a branch, a call or an index check in its body that blocks vectorization
shows), and in the kernels as the library compiles them.
"""

from __future__ import annotations

import platform
import re

import numba
import numpy as np
import pytest

from fedopt import kernels as K
from fedopt.kernels.cpu import elementwise

pytestmark = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                                reason="checks x86-64 instructions")

PACKED = re.compile(r"\bv?(sub|mul|max|min)p[sd]\b")
KINDS = {"soft": K.SOFT, "soft_weighted": K.SOFT_WEIGHTED, "clip": K.CLIP, "clip_vector": K.CLIP_VECTOR,
         "mcp": K.MCP, "scad": K.SCAD}


def _tile_of(kind):
    @numba.njit(cache=False, error_model="numpy")
    def tile(theta, w, z, out):
        elementwise._prox_tile(kind, theta, w, z, 0, z.shape[0], 0, z.shape[1], out)

    return tile


@pytest.mark.parametrize("name", list(KINDS))
def test_separable_prox_loops_are_vectorized(name, dtype=np.float64):  # float32: in the kernels' test below
    tile = _tile_of(KINDS[name])
    z = np.linspace(-2, 2, 64, dtype=dtype).reshape(2, 32)
    theta, w = np.array([0.5, 1.5, 1.2, 0.7, 1.1], dtype), np.ones((2, 32), dtype)
    tile(theta, w, z, np.empty_like(z))
    assembly = "\n".join(tile.inspect_asm().values())
    assert PACKED.search(assembly), f"the {name} loop compiled without packed arithmetic"


def test_normal_map_step_loop_is_vectorized():
    z = np.ones((2, 32))
    step = numba.njit(cache=False, error_model="numpy")(elementwise._step_rows.py_func)  # a fresh, uncached copy
    step(z, z, z, z[0], z[0], 0.1, 2.0, 0, 2, 0, 32, np.empty_like(z), True, np.array([0.5, 1.0]), np.empty_like(z))
    assembly = "\n".join(step.inspect_asm().values())
    assert PACKED.search(assembly), "the normal-map step compiled without packed arithmetic"


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("kernel", ["prox_elementwise_kernel", "normal_map_kernel"])
def test_kernels_are_vectorized(kernel, dtype):
    """The serial variant compiled as the library compiles it (without reference counts). Its kinds'
    loops vectorized give 75 packed instructions (the normal-map kernel 117-129, znver4); with
    each row taken through a select between ``a[i]`` and ``a[i, j0:j1]``, most went scalar (15) and
    soft-thresholding 1e4 elements took 6x the plain loop."""
    fresh = numba.njit(cache=False, error_model="numpy", _nrt=False)(getattr(elementwise, kernel).serial.py_func)
    # float64 parameters, as the regularizers pass them: the kernels cast them to the data's dtype
    z, theta, w = np.ones((2, 32), dtype), np.array([0.5, 1.0]), np.empty((0, 0), dtype)
    if kernel == "prox_elementwise_kernel":
        fresh(z, K.SOFT, theta, w, np.empty_like(z), 1)
    else:
        fresh(z, z, z, z[0], z[0], dtype(0.1), dtype(2.0), K.SOFT, theta, w, np.empty_like(z), np.empty_like(z), 1)
    assembly = "\n".join(fresh.inspect_asm().values())
    assert len(PACKED.findall(assembly)) >= 40, f"{kernel} compiled with little packed arithmetic"
