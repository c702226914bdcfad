"""``Masked(base, mask)``: the base regularizer on some coordinates, nothing on the others."""

import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import fedopt
from fedopt import regularizers as R
from fedopt.datasets import load_digits, partition
from fedopt.problems import MLP, Logistic, Softmax

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])

BASES = [R.L1(0.3), R.L1(0.3, weights=[1.0, 0.5, 2.0, 0.0]), R.ElasticNet(0.2, 0.7), R.ElasticNet(0.2, 0.0),
         R.MCP(0.4, gamma=3.0), R.SCAD(0.4), R.GroupLasso(0.3, groups=2), R.Zero()]
MASK = np.array([True, False, True, True, False, True])  # 4 penalized coordinates, 2 free

batches = hnp.arrays(np.float64, st.sampled_from([(6,), (1, 6), (3, 6)]),
                     elements=st.floats(-4, 4, allow_nan=False, allow_subnormal=False))
steps = st.floats(0.01, 1.9)  # below 1 / rho of every weakly convex base above


@pytest.mark.parametrize("base", BASES, ids=lambda b: type(b).__name__)
@SETTINGS
@given(z=batches, step=steps)
def test_prox_is_the_base_prox_on_the_mask_and_the_identity_elsewhere(base, z, step):
    reg = R.Masked(base, MASK)
    x = reg.prox(z, step)
    rows, out = np.atleast_2d(z), np.atleast_2d(x)
    np.testing.assert_array_equal(out[:, ~MASK], rows[:, ~MASK])
    np.testing.assert_allclose(out[:, MASK], base.prox(rows[:, MASK], step), rtol=0, atol=1e-12)
    reference = reg.prox(z, step, backend="numpy")  # the NumPy reference kernels
    np.testing.assert_allclose(x, reference, rtol=0, atol=1e-12)
    assert reg.value(z) == pytest.approx(base.value(rows[:, MASK]) if z.ndim == 2 else base.value(z[MASK]))


@pytest.mark.parametrize("base", [R.L1(0.3), R.ElasticNet(0.2, 0.7), R.GroupLasso(0.3, groups=2)],
                         ids=lambda b: type(b).__name__)
@SETTINGS
@given(z=hnp.arrays(np.float64, 6, elements=st.floats(-4, 4, allow_nan=False, allow_subnormal=False)), step=steps,
       seed=st.integers(0, 2**32 - 1))
def test_prox_minimises_the_moreau_objective(base, z, step, seed):
    """Convex base: ``x = prox(z)`` minimises ``phi(u) + ||u - z||^2 / (2 step)``, free coordinates included."""
    reg = R.Masked(base, MASK)
    x = reg.prox(z, step)

    def objective(u):
        return reg.value(u) + np.sum((u - z) ** 2) / (2 * step)

    rng = np.random.default_rng(seed)
    best = objective(x)
    for scale in (1e-3, 1e-1, 1.0):
        for u in x + scale * rng.normal(size=(20, 6)):
            assert objective(u) >= best - 1e-10
    # Moreau: prox_{step phi}(z) + step prox_{phi*/step}(z/step) = z, and the conjugate part is
    # in d phi(x); for L1 on the mask: |z - x| <= step lam on the penalized coordinates
    if isinstance(base, R.L1):
        assert np.all(np.abs((z - x)[MASK]) <= step * base.lam + 1e-12)
        assert np.all((z - x)[~MASK] == 0)


def test_weak_convexity_and_step_checks_are_the_base_ones():
    reg = R.Masked(R.MCP(0.1, gamma=2.0), MASK)
    assert reg.weak_convexity == 0.5
    assert reg.check_step(1.5) == 1.5
    with pytest.raises(ValueError, match="needs step \\* rho < 1"):
        reg.prox(np.zeros(6), 2.0)
    assert R.Masked(R.L1(1.0), MASK).weak_convexity == 0.0


def test_element_wise_bases_keep_the_fused_kernels_and_others_run_row_wise():
    backend = fedopt.get_backend("numba")
    weighted = np.zeros(6)
    weighted[MASK] = [1.0, 0.5, 2.0, 0.0]
    for base, threshold, weights in ((R.L1(0.3), 0.15, MASK * 1.0), (R.ElasticNet(0.2, 0.0), 0.1, MASK * 1.0),
                                     (R.L1(0.3, weights=[1.0, 0.5, 2.0, 0.0]), 0.15, weighted)):
        kind, theta, w = R.Masked(base, MASK)._elementwise(0.5, backend, np.float64)
        assert kind == fedopt.kernels.SOFT_WEIGHTED and theta[0] == pytest.approx(threshold)
        np.testing.assert_array_equal(w, weights[None, :])
    kind, theta, w = R.Masked(R.ElasticNet(0.2, 0.7), MASK)._elementwise(0.5, backend, np.float64)
    assert kind == fedopt.kernels.SOFT_MASKED and theta == pytest.approx([0.1, 1 / 1.35])  # the shrink on MASK only
    np.testing.assert_array_equal(w, [MASK * 1.0, MASK * 1.0])
    for base, weighted in ((R.MCP(0.4), fedopt.kernels.MCP_WEIGHTED), (R.SCAD(0.4), fedopt.kernels.SCAD_WEIGHTED)):
        kind, theta, w = R.Masked(base, MASK)._elementwise(0.5, backend, np.float64)
        assert kind == weighted and np.array_equal(theta, base._elementwise(0.5, backend, np.float64)[1])
        np.testing.assert_array_equal(w, [MASK * 1.0])  # lam weighted 0 off the mask: the identity
    for base in (R.GroupLasso(0.3, groups=2), R.Box(-1.0, 1.0)):
        assert R.Masked(base, MASK)._elementwise(0.5, backend, np.float64) is None


def test_a_masked_l1_masked_again_is_l1_on_the_composed_mask():
    """``on_block(Masked(L1), problem, block)`` builds a Masked of a Masked; its prox read the base's
    ``weights``, which a Masked has none of."""
    inner = R.Masked(R.L1(0.5), np.array([True, True, False]))  # l1 on the first two of three
    outer = R.Masked(inner, np.array([True, False, True, True]))  # inner on coordinates 0, 2, 3
    z = np.full(4, 2.0)
    assert outer.value(z) == 2.0
    np.testing.assert_array_equal(outer.prox(z, 1.0), [1.5, 2.0, 1.5, 2.0])


OUTER = np.array([True, True, False, True, True, True, False])  # the inner Masked on 5 of 7 coordinates
INNER = np.array([True, False, True, True, True])  # the base on 4 of those 5
COMPOSED = np.array([True, False, False, True, True, True, False])  # the base's 4 coordinates among the 7


@pytest.mark.parametrize("base", [R.L1(0.3, weights=[1.0, 0.5, 2.0, 0.0]), R.L1(0.3), R.MCP(0.4, gamma=3.0),
                                  R.SCAD(0.4), R.ElasticNet(0.2, 0.7), R.GroupLasso(0.3, groups=2)],
                         ids=lambda b: type(b).__name__)
@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_nested_masks_are_the_base_on_the_composed_mask(base, backend):
    nested = R.Masked(R.Masked(base, INNER), OUTER)
    direct = R.Masked(base, COMPOSED)
    z = np.random.default_rng(1).uniform(-3, 3, (4, 7))
    for step in (0.3, 1.5):
        x = nested.prox(z, step, backend=backend)
        np.testing.assert_allclose(x, direct.prox(z, step, backend=backend), rtol=0, atol=1e-14)
        np.testing.assert_array_equal(x[:, ~COMPOSED], z[:, ~COMPOSED])
        if isinstance(base, R.L1):  # soft-thresholding at step * lam * w_j, w_j = 0 off the composed mask
            w = np.zeros(7)
            w[COMPOSED] = 1.0 if base.weights is None else base.weights
            expected = np.sign(z) * np.maximum(np.abs(z) - step * base.lam * w, 0)
            np.testing.assert_allclose(x, expected, rtol=0, atol=1e-14)
    np.testing.assert_allclose(nested.value(z), direct.value(z), rtol=1e-14)


@pytest.mark.parametrize("base", [R.L1(0.05), R.ElasticNet(0.05, 0.2), R.MCP(0.05)], ids=lambda b: type(b).__name__)
def test_fednmap_with_a_masked_regularizer_walks_the_same_path_on_every_loop_and_backend(base, monkeypatch):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 5))
    y = (X @ rng.normal(size=5) + rng.normal(size=200) > 0).astype(int)

    def problem(backend):
        return Logistic(partition(X, y, 4, "sorted"), weights="samples", fit_intercept=True, backend=backend)

    reg = R.Masked(base, np.array([True] * 5 + [False]))
    kw = dict(rounds=4, local_steps=3, lr_local=0.3, gamma=1.0, batch_size=8, seed=5)
    fused = fedopt.run("fednmap", problem("numba"), reg, **kw)
    reference = fedopt.run("fednmap", problem("numpy"), reg, **kw)
    stepwise_problem = problem("numba")
    monkeypatch.setattr(stepwise_problem, "fused_local_steps", lambda *args: False)
    stepwise = fedopt.run("fednmap", stepwise_problem, reg, **kw)
    np.testing.assert_allclose(fused.x, reference.x, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(stepwise.x, reference.x, rtol=1e-10, atol=1e-12)
    assert fused.x[-1] != 0  # the intercept is free


def test_normal_map_step_of_a_row_wise_base():
    reg = R.Masked(R.ElasticNet(0.2, 0.7), MASK)
    rng = np.random.default_rng(3)
    z, g, z_ref, x_ref = rng.normal(size=(3, 6)), rng.normal(size=(3, 6)), rng.normal(size=6), rng.normal(size=6)
    z_new, x_new = reg.normal_map_step(z, g, z_ref, x_ref, lr=0.1, gamma=0.5)
    expected = z - 0.1 * (g + (z_ref - x_ref) / 0.5)
    np.testing.assert_allclose(z_new, expected, atol=1e-14)
    np.testing.assert_allclose(x_new, reg.prox(expected, 0.5), atol=1e-14)


def test_construction_equality_pickling_and_errors():
    reg = R.Masked(R.ElasticNet(0.2, 0.7), MASK)
    assert reg == R.Masked(R.ElasticNet(0.2, 0.7), MASK.copy())
    assert reg != R.Masked(R.ElasticNet(0.2, 0.7), ~MASK)
    assert reg != R.Masked(R.ElasticNet(0.3, 0.7), MASK)
    assert hash(reg) == hash(R.Masked(R.ElasticNet(0.2, 0.7), MASK.copy()))
    assert pickle.loads(pickle.dumps(reg)) == reg
    assert R.make("masked", base=R.L1(1.0), mask=[True, False]) == R.Masked(R.L1(1.0), np.array([True, False]))
    assert "masked" in R.available()
    with pytest.raises(ValueError, match="mask must be a 1-D boolean array"):
        R.Masked(R.L1(1.0), [1, 0, 1])
    with pytest.raises(TypeError, match="base must be a fedopt regularizer"):
        R.Masked("l1", MASK)
    with pytest.raises(ValueError, match="mask has length 6 but the vectors have p=5"):
        reg.prox(np.zeros(5), 1.0)
    with pytest.raises(ValueError, match="weights has length 4 but the vectors have p=3"):
        R.Masked(R.L1(1.0, weights=[1.0, 1.0, 1.0, 1.0]), np.array([True, True, True, False])).prox(np.zeros(4), 1.0)


def test_on_block_puts_a_nuclear_norm_on_the_first_layer_of_an_mlp_only():
    problem = MLP(load_digits(n_clients=2), hidden=5)
    reg = R.on_block(R.Nuclear(0.1), problem, "W1")
    assert isinstance(reg, R.Masked) and reg.base.shape == (5, 64) and reg.mask.sum() == 5 * 64
    x = problem.init(0)
    y = reg.prox(x, 2.0)
    W1, *rest = problem.unpack(y)
    before = np.linalg.svd(problem.unpack(x)[0], compute_uv=False)
    np.testing.assert_allclose(np.linalg.svd(W1, compute_uv=False), np.maximum(before - 0.2, 0), atol=1e-12)
    for new, old in zip(rest, problem.unpack(x)[1:], strict=True):
        np.testing.assert_array_equal(new, old)
    assert reg.value(y) == pytest.approx(0.1 * np.maximum(before - 0.2, 0).sum())


def test_on_block_refuses_unknown_blocks_and_a_matrix_norm_on_a_vector():
    mlp = MLP(load_digits(n_clients=2), hidden=5)
    with pytest.raises(ValueError, match=r"block='W3' is not a parameter block of MLP; choose one of W1, b1, W2, b2"):
        R.on_block(R.L1(0.1), mlp, "W3")
    with pytest.raises(ValueError, match=r"block='b1' is a vector.*choose a matrix block \(W1, W2\)"):
        R.on_block(R.Nuclear(0.1), mlp, "b1")
    softmax = Softmax(load_digits(n_clients=2), fit_intercept=True)
    assert R.on_block(R.L1(0.1), softmax, "intercept").mask.sum() == 10


def _catalogue():
    """Every regularizer of test_regularizer_errors (vectors of 6), then Masked of each separable one
    (and of an elastic net without its l2 part) on 6 of 8 coordinates."""
    from test_regularizer_errors import all_regularizers

    regs = {**all_regularizers(), "elasticnet_l2_0": R.ElasticNet(0.3, 0.0)}
    backend = fedopt.get_backend("numba")
    mask = np.array([True, True, False, True, True, True, False, True])
    separable = {f"masked_{name}": R.Masked(reg, mask) for name, reg in regs.items()
                 if reg._elementwise(0.5, backend, np.float64) is not None}
    return {**regs, **separable}


CATALOGUE = _catalogue()


@pytest.mark.parametrize("name", CATALOGUE)
def test_the_form_of_the_prox_does_not_depend_on_the_step(name):
    """run_batch groups runs by their prox form read at step 0 (batch._prox_groups): the kind and the
    weights must be those of every real step."""
    reg, backend = CATALOGUE[name], fedopt.get_backend("numba")
    at_zero = reg.separable([0.0], backend, np.float64)
    for step in (0.15, 0.5, 1.0):
        form = reg.separable([step], backend, np.float64)
        assert (form is None) == (at_zero is None)
        if form is not None:
            assert form[0] == at_zero[0]
            np.testing.assert_array_equal(form[2], at_zero[2])


def test_a_batch_of_a_masked_elastic_net_and_a_masked_l1_equals_the_single_runs():
    """Masked(ElasticNet) (SOFT_MASKED) and Masked(L1) (SOFT_WEIGHTED) batch apart, each on
    fedopt.run's fused kernels: bit for bit."""
    problem = MLP(load_digits(n_clients=4, partition="iid", seed=0), hidden=8)
    regs = [R.on_block(R.ElasticNet(0.01, 0.5), problem, "W1"), R.on_block(R.L1(0.01), problem, "W1")]
    kw = dict(rounds=3, local_steps=3, lr_local=0.05, lr_server=1.0, batch_size=16, gamma=1.0)
    results = fedopt.run_batch("fednmap", problem, regs, seeds=[0, 0], **kw)
    for reg, result in zip(regs, results, strict=True):
        np.testing.assert_array_equal(result.x, fedopt.run("fednmap", problem, reg, seed=0, **kw).x)


def test_the_repr_shows_the_base_and_the_mask_size_not_the_mask():
    problem = MLP(load_digits(n_clients=2), hidden=8)
    reg = R.on_block(R.MCP(0.01, gamma=3.0), problem, "W1")
    assert repr(reg) == "Masked(MCP(lam=0.01, gamma=3.0), 512 of 610 coordinates)"
    with pytest.raises(ValueError) as info:
        fedopt.run("fednmap", problem, reg, rounds=1, gamma=4.0, local_steps=2, lr_local=0.1)
    message = str(info.value)
    assert len(message) < 300 and "True" not in message
    assert message.startswith("gamma=4 is too large for Masked(MCP(lam=0.01, gamma=3.0), 512 of 610 coordinates)")
    assert message.endswith("so use gamma < 3")


def test_a_base_sized_for_the_whole_vector_is_refused_by_on_block_with_the_block_size():
    problem = MLP(load_digits(n_clients=2), hidden=8)  # p = 610, W1 holds 512
    for base, what in ((R.L1(0.01, weights=np.ones(610)), "weights has length 610"),
                       (R.GroupLasso(0.01, groups=np.arange(610) % 64), "groups puts 610 coordinates")):
        with pytest.raises(ValueError, match=rf"^Masked applies {type(base).__name__} to the 512 masked coordinates "
                                             rf"of p=610 only, so its own arrays must fit those 512 \(the block\), "
                                             rf"not the whole vector: {what}"):
            R.on_block(base, problem, "W1")
        mask = np.zeros(610, dtype=bool)
        mask[:512] = True
        with pytest.raises(ValueError, match="must fit those 512"):  # Masked itself, at the first prox
            R.Masked(base, mask).prox(np.zeros(610), 0.1)
    assert R.on_block(R.L1(0.01, weights=np.ones(512)), problem, "W1").base.weights.shape == (512,)
