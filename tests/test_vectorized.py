"""The element-wise kernels' loops compile to SIMD code on x86-64.

A loop that stays scalar is still correct, so only its machine code shows it: a wraparound
select on a possibly negative index once kept every separable prox scalar on AVX-512 (8x
slower). The checks look for packed arithmetic (``subpd``, ``mulps``, ``vmaxpd``, ...), which
scalar code never uses: in each kind's loops of ``_prox_tiles_of`` compiled alone, in place and
not (the kind a literal, so that a branch, a call or an index check in its body that blocks
vectorization shows), and in the kernels as the library compiles them.
"""

from __future__ import annotations

import platform
import re

import numba
import numpy as np
import pytest
from numba import types

from fedopt import kernels as K
from fedopt.kernels.cpu import elementwise

pytestmark = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                                reason="checks x86-64 instructions")

PACKED = re.compile(r"\bv?(sub|mul|max|min)p[sd]\b")
KINDS = {"soft": K.SOFT, "soft_weighted": K.SOFT_WEIGHTED, "soft_masked": K.SOFT_MASKED, "clip": K.CLIP,
         "clip_vector": K.CLIP_VECTOR, "mcp": K.MCP, "scad": K.SCAD, "mcp_weighted": K.MCP_WEIGHTED,
         "scad_weighted": K.SCAD_WEIGHTED}
MATRIX, VECTOR, INDEX = types.float64[:, ::1], types.float64[::1], types.intp


def _assembly_alone(helper, *argument_types):
    """The machine code of an inlined helper of :mod:`~fedopt.kernels.cpu.elementwise` compiled on its
    own, fresh (uncached), for these argument types. Literal ones (the prox kind, ``in_place``) let
    Numba prune the other branches before it compiles: about 1.2 s a variant, where the helper
    inlined into a caller that passes a constant took 7-8 s (Numba copies a big callee's IR per call)."""
    compiled = numba.njit(cache=False, error_model="numpy")(helper.py_func)
    compiled.compile(argument_types)
    return "\n".join(compiled.inspect_asm().values())


def _prox_loops(kind, in_place):
    """The float64 loops of one prox kind: ``_prox_tiles_of(kind, theta, w, src, i0, i1, j0, j1, dst, in_place)``."""
    return _assembly_alone(elementwise._prox_tiles_of, types.IntegerLiteral(kind), VECTOR, MATRIX, MATRIX, INDEX,
                           INDEX, INDEX, INDEX, MATRIX, types.BooleanLiteral(in_place))


def test_a_pruned_kind_leaves_no_packed_arithmetic():
    """What makes the checks below specific to their kind: IDENTITY's loop copies (no arithmetic), and
    with the kind a literal no other kind's loop is compiled in."""
    assert not PACKED.search(_prox_loops(K.IDENTITY, False))


@pytest.mark.parametrize("in_place", [False, True], ids=["out", "in_place"])
@pytest.mark.parametrize("name", list(KINDS))
def test_separable_prox_loops_are_vectorized(name, in_place):  # float64; float32 in the kernels' test below
    assert PACKED.search(_prox_loops(KINDS[name], in_place)), f"the {name} loop compiled without packed arithmetic"


@pytest.mark.parametrize("in_place", [False, True], ids=["out", "in_place"])
def test_normal_map_step_loop_is_vectorized(in_place):
    assembly = _assembly_alone(elementwise._step_rows_of, MATRIX, MATRIX, MATRIX, VECTOR, VECTOR, types.float64,
                               types.float64, INDEX, INDEX, INDEX, INDEX, MATRIX, types.boolean, VECTOR, MATRIX,
                               types.BooleanLiteral(in_place))
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
