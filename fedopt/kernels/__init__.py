"""Compiled hot loops: arrays in, arrays out, no policy.

Three modules implement the same functions with the same signatures:

* :mod:`fedopt.kernels.reference` -- plain NumPy, the readable ground truth and test oracle;
* :mod:`fedopt.kernels.cpu` -- Numba ``@njit`` kernels (fused, one pass, ``prange`` where it pays);
* :mod:`fedopt.kernels.gpu` -- CuPy element-wise kernels and Numba-CUDA kernels.

Conventions shared by all three
-------------------------------
* Arrays are 2-D and C-contiguous, one row per client: ``z`` has shape ``(n, p)``; a single
  vector is passed as a ``(1, p)`` view. Rows are independent.
* float32 or float64, the same dtype for every array argument of one call (``theta`` excepted).
* Every kernel writes into ``out`` (which may be the input itself) and returns it.
* NaN and inf propagate: a prox of a NaN coordinate is NaN, so that divergence stays visible.

Prox functions (``prox_{step * phi}`` of a regularizer ``phi``)
----------------------------------------------------------------
``prox_elementwise(z, kind, theta, w, out)``
    Separable regularizers, one code path selected by ``kind`` (the constants below), scalar
    parameters in the float64 vector ``theta`` (already multiplied by the step) and
    per-coordinate parameters in the rows of ``w`` (shape ``(k, p)``; ``(0, 0)`` when unused).
``prox_group(z, starts, order, tau, scale, out)``
    Block soft-thresholding: coordinates ``order[starts[g]:starts[g+1]]`` form group ``g``
    (``order`` of length 0 means the identity permutation), each shrunk by
    ``scale * max(0, 1 - tau[g] / ||z_g||)``.
``project_l2_ball(z, center, radius, out)``
    Projection of each row on ``{x : ||x - center|| <= radius}``; ``center`` has length p or 0
    (the origin).
``project_simplex(z, radius, out)`` / ``project_l1_ball(z, radius, out)``
    Projection of each row on ``{x >= 0, sum x = radius}`` / ``{||x||_1 <= radius}``; a row with
    a non-finite entry becomes all NaN.
``prox_nuclear(z, n_rows, tau, out)``
    Singular-value soft-thresholding of each row read as an ``(n_rows, p // n_rows)`` matrix in
    C order, by a LAPACK/cuSOLVER SVD.

Fused normal-map step (the FedNMap local step)
----------------------------------------------
``normal_map_step(z, g, c, z_ref, x_ref, eta, inv_gamma, kind, theta, w, z_out, x_out)``
    ``z_out = z - eta * (g + (z_ref - x_ref) * inv_gamma + c)`` and
    ``x_out = prox_elementwise(z_out)`` in one pass. ``z``, ``g``, ``z_out``, ``x_out`` are
    ``(n, p)``; ``c`` is ``(n, p)`` or ``(0, 0)`` (absent); ``z_ref`` and ``x_ref`` are ``(p,)``,
    shared by all rows. Non-separable regularizers pass ``kind=IDENTITY`` and apply their own
    prox afterwards.

Model oracles (the batched client losses and gradients of :mod:`fedopt.problems`)
---------------------------------------------------------------------------------
Client ``i`` owns rows ``offsets[i]:offsets[i+1]`` of ``X`` (C-contiguous float32, float64 or
uint8 features, scaled by ``scale``; CSR on the CPU backends). ``offsets`` may instead be an int64
``(2, n)`` array of client bounds: client ``i`` owns rows ``offsets[0, i]:offsets[1, i]``, and
several clients may own the same rows in any order (``R`` independent runs of the same clients
stacked as ``n = R * n0`` client rows); :func:`client_bounds` reads both forms. A third row, if
any, is the order in which the CPU kernels visit the clients (a permutation of ``range(n)``:
clients that own the same rows one after another, so those rows stay in cache); it changes no
result. ``rows`` is an int64 ``(n, b)`` array of global row indices, one minibatch per client
drawn on the host, or ``(n, 0)`` for all of each client's rows. ``W`` is ``(n, p)`` (one point
per client) or ``(1, p)`` (one shared point). Each oracle writes the mean loss of client ``i`` to
``loss_out[i]`` and its gradient to ``grad_out[i]``; an empty ``loss_out`` (shape ``(0,)``) or
``grad_out`` (``(0, 0)``) is skipped. ``y`` holds targets in the dtype of ``W``: values, ``+-1``
or class codes.

``linear_oracle(X, y, offsets, W, rows, kind, n_out, scale, fit_intercept, sample_weight, loss_out, grad_out)``
    A linear model with ``n_out`` outputs: ``W[i]`` is the ``(n_out, d)`` coefficients in C order,
    then ``n_out`` intercepts when ``fit_intercept``; ``kind`` is LEAST_SQUARES, LOGISTIC or
    SOFTMAX (below). ``sample_weight`` is indexed by global row like ``y`` (in the dtype of ``W``;
    length 0 for none) and multiplies each sample's loss and ``dloss/dmargin``, so client ``i``
    gets ``mean_r(s_r loss_r)`` and its gradient. The fused loops below take no weights.
``mlp_oracle(X, y, offsets, W, rows, n_hidden, n_out, kind, scale, sample_weight, loss_out, grad_out)``
    One hidden sigmoid layer and ``k = n_out`` outputs, ``W[i] = [W1 (h, d), b1, W2 (k, h), b2]``;
    ``kind`` is SOFTMAX (cross-entropy, ``y`` class codes) or LEAST_SQUARES (``n_out = 1``,
    ``(o - y)^2 / 2``, ``y`` the targets). ``sample_weight`` as in ``linear_oracle``: it
    multiplies each sample's loss and ``dloss/doutput``; the fused MLP loops take no weights.

The fused local loop (:mod:`.reference`, :mod:`.cpu` and :mod:`.gpu`)
----------------------------------------------------------------------
``local_steps_linear(X, y, offsets, rows, kind, n_out, scale, fit_intercept, D, lr, prox_kind, thetas, w, Z, P,
center=None)``
    All local steps of a round for a linear model, ``rows`` of shape ``(Q, n, b)`` (or
    ``(Q, n, 0)`` for full local gradients): for each step ``l`` and client ``i``,
    ``Z[i] -= lr * (grad f_i(P[i]) + D[i])`` and ``P[i] = prox(Z[i])`` with the separable prox
    ``prox_kind`` at parameters ``thetas[l]`` (IDENTITY copies; ``P`` may be ``Z`` itself).
    ``D`` is ``(n, p)`` or ``(0, 0)``. ``lr`` is a scalar or a length-``n`` vector (client ``i``
    steps by ``lr[i]``); ``thetas`` is ``(Q, k)``, shared, or ``(Q, n, k)`` (client ``i`` uses
    ``thetas[l, i]``). On the CPU this is one ``prange`` over clients whose Q steps run serially
    in cache; on the GPU one thread block per client, for dense single-output models whose state
    fits in shared memory. ``center`` (``d`` feature means) steps on the rows ``X - center``
    (the problems' ``center``): the CPU kernel for CSR ``X`` without forming them. A kernel may
    return None for a case it does not cover, and the caller then steps array-wise.
``local_steps_mlp(X, y, offsets, rows, n_hidden, n_out, kind, scale, D, lr, prox_kind, thetas, w, Z, P)``
    The same for the MLP of ``mlp_oracle`` (CPU only: one ``prange`` task per client, BLAS
    products on buffers that stay in cache).
``tracking_steps(X, y, offsets, rows, kind, n_out, scale, fit_intercept, node_scale, gamma, alpha, beta,
nesterov, tracking, prox_kind, theta, w, P, NU, MU, Y, G, adapt_first=True, adapt_after=False, center=None)``
    DEPOSITUM's iterations without gossip for a linear model (reference and CPU), ``rows`` of
    shape ``(T, n, b)`` or ``(T, n, 0)``: per node and iteration, the momentum ``NU`` (and ``MU``
    with ``nesterov``; else ``MU`` is ``(0, 0)``) on the tracker ``Y``, ``P = prox(P - alpha NU)``
    with the separable prox ``prox_kind`` at ``theta``, the gradient ``node_scale[i] grad f_i(P[i])``
    into ``G`` and, with ``tracking``, ``Y += beta (G_new - G)`` (else ``Y = G_new``). ``gamma``,
    ``alpha`` and ``beta`` are scalars or length-``n`` vectors (node ``i`` uses entry ``i``), ``theta``
    ``(k,)`` or ``(n, k)``. Two trailing options split an iteration around a gossip of ``P``:
    ``adapt_first=False`` starts the first iteration at its gradient (its momentum and prox ran in
    the call before), ``adapt_after=True`` ends the call with one more iteration's momentum and prox;
    ``center`` as in ``local_steps_linear``.
``tracking_steps_mlp(X, y, offsets, rows, n_hidden, n_out, kind, scale, node_scale, gamma, alpha, beta,
nesterov, tracking, prox_kind, theta, w, P, NU, MU, Y, G, adapt_first=True, adapt_after=False)``
    The same for the MLP of ``mlp_oracle`` (reference and CPU).

Gossip over neighbour lists (CPU only: :mod:`.reference` and :mod:`.cpu`)
-------------------------------------------------------------------------
``mix_sparse(indptr, indices, weights, V, out)``
    ``out = W @ V`` for a sparse mixing matrix ``W`` in CSR form (node ``i``'s neighbours and
    itself at ``indices[indptr[i]:indptr[i+1]]``), ``V`` and ``out`` ``(n, p)``, ``out`` not ``V``.
    The GPU backend multiplies by a ``cupyx.scipy.sparse`` matrix instead.
"""

#: The functions every kernel module (reference, cpu, gpu) provides, with the signatures above.
KERNEL_NAMES = (
    "linear_oracle",
    "mlp_oracle",
    "normal_map_step",
    "project_l1_ball",
    "project_l2_ball",
    "project_simplex",
    "prox_elementwise",
    "prox_group",
    "prox_nuclear",
)


def client_bounds(offsets):
    """``(starts, ends)``, views of ``offsets``: client ``i`` owns rows ``starts[i]:ends[i]``.

    ``offsets`` is monotone of length ``n + 1`` (``offsets[:-1], offsets[1:]``) or ``(2, n)``
    or ``(3, n)`` (``offsets[0], offsets[1]``; the third row is the visiting order); NumPy, CuPy
    or Numba device arrays alike.
    """
    if offsets.ndim == 2:
        return offsets[0], offsets[1]
    return offsets[:-1], offsets[1:]


# Codes of the separable prox kernels, and the layout of ``theta`` / ``w`` for each.
IDENTITY = 0  # x = v
SOFT = 1  # theta = (tau, scale): x = scale * sign(v) * max(|v| - tau, 0)
SOFT_WEIGHTED = 2  # theta = (tau, scale), w[0] = weights: threshold tau * w[0, j]
CLIP = 3  # theta = (lo, hi): x = clip(v, lo, hi)
CLIP_VECTOR = 4  # w[0] = lower bounds, w[1] = upper bounds
MCP = 5  # theta = (tau, knee, inv): 0 | sign(v)(|v| - tau) * inv | v, split at tau and knee
SCAD = 6  # theta = (tau, knee1, knee2, shift, inv): soft | sign(v)(|v| - shift) * inv | v
# theta = (tau, scale), w[0] = weights, w[1] = a 0/1 mask: SOFT_WEIGHTED where w[1, j] is 1, the
# threshold alone where it is 0 (scale 1): an elastic net on some coordinates only (Masked)
SOFT_MASKED = 7
# MCP and SCAD with lam weighted per coordinate by w[0] (every threshold scales with lam; a weight
# of 0 is the identity): MCP or SCAD on some coordinates only (Masked)
MCP_WEIGHTED = 8
SCAD_WEIGHTED = 9

# Losses of the model oracles (``linear_oracle``'s ``kind``; the MLP's takes LEAST_SQUARES and SOFTMAX).
LEAST_SQUARES = 0  # (m - y)^2 / 2, one output
LOGISTIC = 1  # log(1 + exp(-y m)), y = +-1, one output
SOFTMAX = 2  # logsumexp(m) - m[y], y = class code, one output per class

#: The row kernels (l2 ball, group lasso) take a row's (or group's) sum of squares when it lies in
#: this range; outside it the sum may have overflowed to inf or lost its entries to underflow
#: (squares of magnitudes below about 1e-154 are subnormal or 0), and the norm is computed again
#: from the entries divided by the largest of them (zero rows take that path too).
SQUARES_MIN, SQUARES_MAX = 2.0**-960, 2.0**960

#: The simplex and l1-ball kernels project a row whose largest entry (in magnitude) exceeds this
#: many radii in coordinates shifted by that entry. Unshifted, ``z - tau`` with ``tau`` near
#: ``max(z)`` keeps no digit below the spacing of ``max(z)``: beyond 2**16 radii more than 2**-36
#: of the radius is lost, and at ``max(z) = 1e16`` all of a unit radius ([1e16, 1e16, 0] projected
#: to 0, not [0.5, 0.5, 0]). The shifted threshold keeps the radius's digits.
SHIFT_RATIO = 2.0**16

KIND_NAMES = {
    IDENTITY: "identity",
    SOFT: "soft",
    SOFT_WEIGHTED: "soft_weighted",
    CLIP: "clip",
    CLIP_VECTOR: "clip_vector",
    MCP: "mcp",
    SCAD: "scad",
    SOFT_MASKED: "soft_masked",
    MCP_WEIGHTED: "mcp_weighted",
    SCAD_WEIGHTED: "scad_weighted",
}
