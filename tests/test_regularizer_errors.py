"""Input validation of the regularizer API, and the conversions and object protocols it promises.

Bad input raises a ``ValueError`` whose message names the offending argument; integer arrays are
converted to float64, float32 stays float32, ``out=z`` works in place, and regularizers pickle,
compare equal after a round trip and hash.
"""

import copy
import math
import pickle
import re

import numpy as np
import pytest

from fedopt import regularizers as R

NAN, INF = math.nan, math.inf


# ---- construction -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build, argument",
    [
        (lambda v: R.L1(v), "lam"),
        (lambda v: R.ElasticNet(l1=v), "l1"),
        (lambda v: R.ElasticNet(l2=v), "l2"),
        (lambda v: R.GroupLasso(v), "lam"),
        (lambda v: R.MCP(v), "lam"),
        (lambda v: R.SCAD(v), "lam"),
        (lambda v: R.Nuclear(v, shape=(2, 2)), "lam"),
    ],
    ids=["l1", "enet_l1", "enet_l2", "group", "mcp", "scad", "nuclear"],
)
@pytest.mark.parametrize("bad", [-1.0, -1e-300, NAN, INF, "strong", [1.0, 2.0]],
                         ids=["negative", "tiny_negative", "nan", "inf", "text", "list"])
def test_bad_strength_is_refused(build, argument, bad):
    """Negative, NaN, infinite or non-numeric strengths raise a ValueError naming the strength (float()'s
    own error named none)."""
    with pytest.raises(ValueError, match=rf"^{argument} must be a finite number >= 0"):
        build(bad)


@pytest.mark.parametrize(
    "weights, message",
    [
        ([1.0, -0.5, 2.0], r"weights must be >= 0"),
        ([1.0, NAN], r"weights contains NaN"),
        (np.ones((2, 2)), r"weights must be a scalar or a 1-D array"),
        (-1.0, r"weights must be >= 0"),
        ([1.0, INF], r"weights must be finite, got inf \(coordinate 1\); .* large finite weight"),
        (INF, r"weights must be finite, got inf; .* large finite weight"),
    ],
    ids=["negative", "nan", "2d", "negative_scalar", "inf", "inf_scalar"],
)
def test_bad_l1_weights(weights, message):
    """L1 weights must be >= 0, finite, and a scalar or a vector."""
    with pytest.raises(ValueError, match=message):
        R.L1(1.0, weights=weights)


def test_infinite_l1_weights_are_refused_on_every_route():
    """An infinite weight made the Numba prox and the value NaN (inf * 0); the masked form and
    ``make`` go through the same check."""
    with pytest.raises(ValueError, match=r"weights must be finite"):
        R.Masked(R.L1(1.0, weights=[1.0, INF]), np.array([True, True, False]))
    with pytest.raises(ValueError, match=r"weights must be finite"):
        R.make("l1", lam=0.0, weights=[INF, 1.0])


def test_l1_weights_of_wrong_length():
    """Weights whose length is not p are refused when the vectors arrive (prox and value)."""
    reg = R.L1(1.0, weights=np.ones(3))
    with pytest.raises(ValueError, match=r"weights has length 3 but the vectors have p=4"):
        reg.prox(np.ones(4), 0.5)
    with pytest.raises(ValueError, match=r"weights has length 3 but the vectors have p=4"):
        reg.value(np.ones((2, 4)))


@pytest.mark.parametrize(
    "groups",
    [[0.5, 1.5], [0.0, 1.0], [], np.array([[0, 1], [2, 3]]), ["a", "b"], [[0, 1], []], [[0.5], [1]]],
    ids=["fractional", "float_dtype", "empty", "2d_array", "strings", "empty_index_list", "fractional_index"],
)
def test_group_labels_must_be_integer_vectors(groups):
    """Group labels must be a non-empty 1-D array of integers, or index lists a non-empty list of them."""
    with pytest.raises(ValueError, match=r"groups must be an int block size, a non-empty 1-D array of integer group "
                                         r"labels, or a list of non-empty index lists"):
        R.GroupLasso(1.0, groups=groups)


@pytest.mark.parametrize("groups, match", [
    ([[0, 1], [1, 2]], "coordinate 1 is in more than one group"),
    ([[0, 3], [1]], "coordinate 2 is in no group"),
    ([[0, -1]], "coordinate -1"),
])
def test_group_index_lists_must_partition_the_coordinates(groups, match):
    with pytest.raises(ValueError, match=match):
        R.GroupLasso(1.0, groups=groups)


def test_group_index_lists_are_the_labels_of_their_positions():
    """celer's form of the groups: ``groups[g]`` lists group g's coordinates; weights follow that order."""
    z = np.random.default_rng(0).standard_normal((3, 6))
    listed = R.GroupLasso(0.4, groups=[[5, 0], [2, 3, 4, 1]], weights=[1.0, 2.0])
    np.testing.assert_array_equal(listed.groups, [0, 1, 1, 1, 1, 0])
    labelled = R.GroupLasso(0.4, groups=[0, 1, 1, 1, 1, 0], weights=[1.0, 2.0])
    np.testing.assert_array_equal(listed.prox(z, 0.7), labelled.prox(z, 0.7))
    assert listed.value(z[0]) == labelled.value(z[0])


@pytest.mark.parametrize("size", [0, -2, 2.5, float("nan"), "big"],
                         ids=["zero", "negative", "fractional", "nan", "word"])
def test_group_block_size_must_be_positive_integer(size):
    """A block size must be an integer >= 1."""
    with pytest.raises(ValueError, match=r"groups as a block size must be an integer >= 1"):
        R.GroupLasso(1.0, groups=size)


def test_group_dimension_mismatches():
    """Labels of the wrong length and a block size not dividing p are refused at prox time."""
    with pytest.raises(ValueError, match=r"groups puts 3 coordinates in groups but the vectors have p=4"):
        R.GroupLasso(1.0, groups=[0, 0, 1]).prox(np.ones(4), 0.5)
    with pytest.raises(ValueError, match=r"groups=3 \(block size\) does not divide p=4"):
        R.GroupLasso(1.0, groups=3).prox(np.ones((2, 4)), 0.5)
    with pytest.raises(ValueError, match=r"groups=3 \(block size\) does not divide p=4"):
        R.GroupLasso(1.0, groups=3).value(np.ones(4))


def test_group_weights_count_mismatch():
    """One weight per group: checked at construction for labels, at prox time for a block size."""
    with pytest.raises(ValueError, match=r"weights has 3 entries but groups defines 2 groups"):
        R.GroupLasso(1.0, groups=[5, 5, -1], weights=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match=r"weights has 3 entries, one per group"):
        R.GroupLasso(1.0, groups=2, weights=[1.0, 2.0, 3.0]).prox(np.ones(4), 0.5)


@pytest.mark.parametrize("weights", [[1.0, -1.0], [1.0, NAN]], ids=["negative", "nan"])
def test_group_weights_must_be_nonnegative(weights):
    """Group weights must be numbers >= 0."""
    with pytest.raises(ValueError, match=r"weights must be a 1-D array of finite numbers >= 0"):
        R.GroupLasso(1.0, groups=[0, 1], weights=weights)


@pytest.mark.parametrize(
    "lower, upper",
    [(1.0, 0.0), ([0.0, 2.0], [1.0, 1.0]), (0.5, [1.0, 0.0]), (INF, 0.0)],
    ids=["scalar", "vector", "mixed", "inf"],
)
def test_empty_box_is_refused(lower, upper):
    """A box with ``lower > upper`` somewhere is empty and refused."""
    with pytest.raises(ValueError, match=r"the box is empty: lower > upper"):
        R.Box(lower, upper)


@pytest.mark.parametrize(
    "lower, upper, message",
    [
        (INF, INF, r"lower = \+inf,"),
        (-INF, -INF, r"upper = -inf,"),
        ([0.0, INF], [1.0, INF], r"lower = \+inf \(coordinate 1\),"),
        (-INF, [1.0, -INF], r"upper = -inf \(coordinate 1\),"),
    ],
    ids=["lower-inf", "upper-minus-inf", "vector-lower", "vector-upper"],
)
def test_box_with_no_real_point_is_refused(lower, upper, message):
    """A box with ``lower = +inf`` or ``upper = -inf`` somewhere has no real point (its prox gave inf
    iterates, which value() called infeasible) and is refused; infinite sides of a real box are fine."""
    with pytest.raises(ValueError, match=r"the box is empty: " + message + r" which no real x reaches; leave a side "
                                         r"unbounded with lower = -inf or upper = \+inf"):
        R.Box(lower, upper)
    assert R.Box(-INF, INF).value(np.zeros(2)) == 0
    assert R.NonNegative().value(np.zeros(2)) == 0


def test_box_bound_lengths():
    """Bounds of different lengths, bounds not matching p, and NaN bounds are refused."""
    with pytest.raises(ValueError, match=r"lower and upper have different lengths \(2 and 3\)"):
        R.Box([0.0, 0.0], [1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match=r"lower has length 3 but the vectors have p=4"):
        R.Box(np.zeros(3), 1.0).prox(np.ones(4), 0.5)
    with pytest.raises(ValueError, match=r"upper has length 3 but the vectors have p=4"):
        R.Box(0.0, np.ones(3)).prox(np.ones(4), 0.5)
    with pytest.raises(ValueError, match=r"lower contains NaN"):
        R.Box(NAN, 1.0)
    with pytest.raises(ValueError, match=r"upper contains NaN"):
        R.Box(0.0, [1.0, NAN])


@pytest.mark.parametrize("cls", [R.L2Ball, R.L1Ball, R.Simplex])
@pytest.mark.parametrize("radius", [0.0, -1.0, NAN, INF], ids=["zero", "negative", "nan", "inf"])
def test_bad_radius(cls, radius):
    """The radius of a ball or simplex must be finite and > 0."""
    with pytest.raises(ValueError, match=r"^radius must be a finite number > 0"):
        cls(radius)


def test_l2_ball_center():
    """The center must be finite and have p coordinates."""
    with pytest.raises(ValueError, match=r"center has length 3 but the vectors have p=4"):
        R.L2Ball(1.0, center=np.zeros(3)).prox(np.ones(4), 0.5)
    with pytest.raises(ValueError, match=r"center must be a 1-D array of finite numbers"):
        R.L2Ball(1.0, center=[0.0, NAN])
    with pytest.raises(ValueError, match=r"center must be a 1-D array of finite numbers"):
        R.L2Ball(1.0, center=np.zeros((2, 2)))


@pytest.mark.parametrize("a", [2.0, 1.5, -3.0, NAN, INF], ids=["two", "below_two", "negative", "nan", "inf"])
def test_scad_a_must_exceed_two(a):
    """SCAD needs a finite ``a > 2``."""
    with pytest.raises(ValueError, match=r"^a must be a finite number > 2"):
        R.SCAD(1.0, a=a)


@pytest.mark.parametrize("gamma", [0.0, -1.0, NAN, INF], ids=["zero", "negative", "nan", "inf"])
def test_mcp_gamma_must_be_positive(gamma):
    """MCP needs a finite ``gamma > 0``."""
    with pytest.raises(ValueError, match=r"^gamma must be a finite number > 0"):
        R.MCP(1.0, gamma=gamma)


@pytest.mark.parametrize("shape", [(2,), (0, 3), (2, -1), (2.5, 2), (1, 2, 3)],
                         ids=["one", "zero", "negative", "fractional", "three"])
def test_nuclear_shape_must_be_a_pair_of_positive_ints(shape):
    """``shape`` must be a pair of positive integers."""
    with pytest.raises(ValueError, match=r"shape must be a pair of positive integers"):
        R.Nuclear(1.0, shape=shape)


def test_nuclear_shape_must_match_p():
    """The matrix shape must hold exactly p entries."""
    with pytest.raises(ValueError, match=r"shape=\(2, 3\) holds 6 entries but the vectors have p=5"):
        R.Nuclear(1.0, shape=(2, 3)).prox(np.ones(5), 0.5)
    with pytest.raises(ValueError, match=r"shape=\(2, 3\) holds 6 entries but the vectors have p=5"):
        R.Nuclear(1.0, shape=(2, 3)).value(np.ones((2, 5)))


@pytest.mark.parametrize("run", ["run", "run_batch"])
def test_a_regularizer_that_does_not_fit_the_problem_is_refused_before_any_round(run):
    """fedopt.run and run_batch check the regularizer's own arrays against the problem's vector first;
    a matrix regularizer's error names the problem's matrix blocks."""
    import fedopt

    data = fedopt.datasets.make_classification(n_clients=3, n_samples=60, n_features=5, n_classes=3, seed=0,
                                                   n_informative=3)
    problem = fedopt.problems.Softmax(data, fit_intercept=True)  # coef (3, 5) and intercept (3,): p = 18
    go = {"run": lambda reg: fedopt.run("fedavg", problem, reg, rounds=1, seed=0),
          "run_batch": lambda reg: fedopt.run_batch("fedavg", problem, reg, rounds=1, seeds=[0, 1])}[run]
    with pytest.raises(ValueError, match=re.escape("shape=(5, 3) holds 15 entries but the vectors have p=18; put it "
                                                   "on a matrix block of Softmax (coef (3, 5))")):
        go(R.Nuclear(0.1, shape=(5, 3)))
    with pytest.raises(ValueError, match="weights has length 5 but the vectors have p=18"):
        go(R.L1(0.1, weights=np.ones(5)))
    assert R.on_block(R.Nuclear(0.1), problem, "coef").base.shape == (3, 5)
    go(R.on_block(R.Nuclear(0.1), problem, "coef"))  # the fix the message names


# ---- step ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("step", [0.0, -0.5, INF, NAN, -INF, "fast", [0.1, 0.2], np.full(2, 0.1)],
                         ids=["zero", "negative", "inf", "nan", "minus_inf", "text", "list", "array"])
@pytest.mark.parametrize("reg", [R.L1(1.0), R.Box(), R.GroupLasso(1.0), R.MCP(1.0)], ids=["l1", "box", "group", "mcp"])
def test_bad_step(reg, step):
    """``step`` must be finite and > 0, for the prox and for the normal-map step's ``gamma``."""
    with pytest.raises(ValueError, match=r"^step must be a finite number > 0"):
        reg.prox(np.ones(4), step)
    with pytest.raises(ValueError, match=r"^gamma must be a finite number > 0"):
        reg.normal_map_step(np.ones(4), np.ones(4), np.ones(4), np.ones(4), 0.1, step)


@pytest.mark.parametrize(
    "reg, largest",
    [(R.MCP(1.0, gamma=2.0), "2"), (R.SCAD(1.0, a=3.7), "2.7"), (R.SCAD(0.3, a=2.5), "1.5"),
     (R.MCP(0.0, gamma=0.25), "0.25")],
    ids=["mcp", "scad", "scad_small_a", "mcp_lam0"],
)
def test_weakly_convex_step_too_large(reg, largest):
    """``step * rho >= 1`` is refused, and the message gives the largest allowed step ``1 / rho``."""
    limit = float(largest)
    assert reg.check_step(limit * 0.999) == limit * 0.999
    for step in (limit * (1 + 1e-12), limit * 1.5, 1e6):
        message = rf"step={re.escape(format(step, 'g'))} is too large .* use step < {largest}$"
        with pytest.raises(ValueError, match=message):
            reg.prox(np.ones(3), step)
    with pytest.raises(ValueError, match=rf"^gamma=.* use gamma < {largest}$"):
        reg.normal_map_step(np.ones(3), np.ones(3), np.ones(3), np.ones(3), 0.1, limit * 1.01)


@pytest.mark.parametrize(
    "reg, limit",
    [(R.MCP(1.0, gamma=49.0), 49.0), (R.MCP(0.5, gamma=98.0), 98.0), (R.MCP(2.0, gamma=103.0), 103.0),
     (R.SCAD(1.0, a=2.27), 2.27 - 1), (R.SCAD(0.5, a=2.29), 2.29 - 1),
     (R.Masked(R.MCP(1.0, gamma=49.0), np.array([True, False, True])), 49.0),
     (R.Masked(R.Masked(R.SCAD(1.0, a=2.27), np.array([True, True])), np.array([True, False, True])), 2.27 - 1)],
    ids=["mcp49", "mcp98", "mcp103", "scad2.27", "scad2.29", "masked_mcp49", "masked_masked_scad2.27"],
)
def test_a_step_exactly_at_the_limit_is_refused_where_step_times_rho_rounds_below_one(reg, limit):
    """For these gamma (MCP) and a - 1 (SCAD), ``limit * (1 / limit)`` rounds to 0.9999999999999999: a step
    of exactly the limit passed a test of ``step * rho < 1`` and the prox divided by zero."""
    assert limit * reg.weak_convexity < 1
    z = np.array([0.5, 2.0, 200.0])
    with pytest.raises(ValueError, match=rf"^step={limit:g} is too large .* use step < {limit:g}$"):
        reg.check_step(limit)
    with pytest.raises(ValueError, match=rf"^step={limit:g} is too large"):
        reg.prox(z, limit)
    with pytest.raises(ValueError, match=rf"^gamma={limit:g} is too large .* use gamma < {limit:g}$"):
        reg.normal_map_step(z, z, z, z, 0.1, limit)
    below = np.nextafter(limit, 0)
    assert np.isfinite(reg.prox(z, below)).all()
    assert reg.step_limit == limit


def test_a_method_without_gamma_measures_at_a_step_the_penalty_allows():
    """metric_gamma defaults to 1, or to 1 / (2 rho) where rho >= 1 (it was refused as 'metric_gamma=1 is too
    large', an argument the user never gave)."""
    import fedopt

    data = fedopt.datasets.make_classification(n_clients=3, n_samples=60, n_features=5, seed=0)
    problem, sharp, mild = fedopt.problems.Logistic(data), R.MCP(0.01, gamma=0.5), R.MCP(0.01, gamma=2.0)
    assert fedopt.run("fedavg", problem, sharp, rounds=1, lr_local=0.02).metric_gamma == 0.25
    assert [r.metric_gamma for r in fedopt.run_batch("fedavg", problem, [sharp, mild], rounds=1, seeds=[0, 1],
                                                      lr_local=0.02)] == [0.25, 1.0]
    assert fedopt.run("fednmap", problem, sharp, rounds=1, lr_local=0.02, gamma=0.4).metric_gamma == 0.4
    with pytest.raises(ValueError, match="metric_gamma=1 is too large"):
        fedopt.run("fedavg", problem, sharp, rounds=1, lr_local=0.02, metric_gamma=1.0)


# ---- arrays -------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(2, 2, 2), (1, 1, 3, 1)], ids=["3d", "4d"])
def test_input_must_be_vector_or_batch(shape):
    """Anything but ``(p,)`` or ``(n, p)`` is refused, and the message gives the shape received."""
    z = np.ones(shape)
    message = rf"expected a vector \(p,\) or a batch \(n_clients, p\), got an array of shape {re_shape(shape)}"
    with pytest.raises(ValueError, match=message):
        R.L1(1.0).prox(z, 0.5)
    with pytest.raises(ValueError, match=r"expected a vector \(p,\) or a batch"):
        R.GroupLasso(1.0).prox(z, 0.5)
    with pytest.raises(ValueError, match=r"expected a vector \(p,\) or a batch"):
        R.L1(1.0).value(z)


def re_shape(shape):
    """The regex of a shape tuple as NumPy prints it."""
    return re.escape(str(tuple(shape)))


@pytest.mark.parametrize(
    "out, message",
    [
        (np.empty(5),
         r"out must be a ndarray of shape \(2, 4\) and dtype float64 like the input, got ndarray of shape \(5,\)"),
        (np.empty((4, 2)), r"out must be a ndarray of shape \(2, 4\)"),
        (np.empty((2, 4), dtype=np.float32), r"out must be .* dtype float64 .* dtype float32"),
        (np.empty((2, 8))[:, ::2], r"out must be C-contiguous"),
        (np.empty((4, 2)).T, r"out must be C-contiguous"),
        ([[0.0] * 4] * 2, r"out must be a ndarray .* got list"),
    ],
    ids=["size", "shape", "dtype", "strided", "fortran", "list"],
)
@pytest.mark.parametrize("reg", [R.L1(1.0), R.L2Ball(1.0)], ids=["separable", "rowwise"])
def test_bad_out(reg, out, message):
    """``out`` must match the input's type, shape and dtype and be C-contiguous."""
    with pytest.raises(ValueError, match=message):
        reg.prox(np.ones((2, 4)), 0.5, out=out)


def test_normal_map_step_operand_shapes():
    """``grad``, ``correction``, ``z_ref``, ``x_ref`` and the outputs must fit ``z``; ``lr`` must be > 0."""
    reg, z = R.L1(0.1), np.ones((3, 4))
    ok = dict(grad=np.ones((3, 4)), z_ref=np.ones(4), x_ref=np.ones(4), lr=0.1, gamma=0.5)
    reg.normal_map_step(z, **ok)  # the control call succeeds
    cases = [
        (dict(grad=np.ones((3, 5))), r"grad must have shape \(3, 4\), got \(3, 5\)"),
        (dict(grad=np.ones((2, 4))), r"grad must have shape \(3, 4\), got \(2, 4\)"),
        (dict(grad=np.ones(4)), r"grad must have shape \(3, 4\), got \(4,\)"),
        (dict(correction=np.ones((3, 3))), r"correction must have shape \(3, 4\)"),
        (dict(z_ref=np.ones(5)), r"z_ref must have shape \(4,\)"),
        (dict(x_ref=np.ones((1, 4))), r"x_ref must have shape \(4,\)"),
        (dict(z_out=np.empty((3, 5))), r"z_out must be a ndarray of shape \(3, 4\)"),
        (dict(x_out=np.empty((3, 4), dtype=np.float32)),
         r"x_out must be a ndarray of shape \(3, 4\) and dtype float64"),
        (dict(lr=0.0), r"lr must be a finite number > 0"),
        (dict(lr=NAN), r"lr must be a finite number > 0"),
    ]
    for change, message in cases:
        with pytest.raises(ValueError, match=message):
            reg.normal_map_step(z, **(ok | change))


# ---- make ---------------------------------------------------------------------------------------


def test_make_unknown_name():
    """An unknown name is refused, and the message lists the known ones."""
    with pytest.raises(ValueError, match=r"regularizer 'lasso2' is unknown; choose one of .*elasticnet.*group_lasso"):
        R.make("lasso2")


@pytest.mark.parametrize(("spelling", "name"), [("elastic_net", "elasticnet"), ("ElasticNet", "elasticnet"),
                                                ("group-lasso", "group_lasso"), ("GroupLasso", "group_lasso"),
                                                ("L1Ball", "l1_ball"), ("MCP", "mcp")])
def test_names_ignore_case_underscores_and_hyphens(spelling, name):
    assert R.canonical(spelling) == name and R.make(spelling).name == name


def test_a_list_is_a_vector_and_complex_values_are_refused():
    np.testing.assert_allclose(R.L1(0.5).prox([1.0, -2.0, 0.25], 1.0), [0.5, -1.5, 0.0])
    with pytest.raises(TypeError, match=r"complex values \(complex128\) are not supported"):
        R.L1(0.5).prox(np.ones(3, dtype=complex), 1.0)


@pytest.mark.parametrize(
    "name, params, message",
    [
        ("l1", dict(alpha=1.0), r"'alpha'.*L1 accepts \['lam', 'weights'\]"),
        ("scad", dict(gamma=3.0), r"'gamma'.*SCAD accepts \['lam', 'a'\]"),
        ("nonnegative", dict(lower=0.0), r"'lower'.*NonNegative accepts no parameters"),
        ("zero", dict(lam=1.0), r"'lam'.*Zero accepts no parameters"),
    ],
    ids=["l1", "scad", "nonnegative", "zero"],
)
def test_make_unknown_parameter(name, params, message):
    """An unknown parameter is refused with a ValueError naming it and listing the accepted ones."""
    with pytest.raises(ValueError, match=message):
        R.make(name, **params)


def test_masked_by_name_says_how_to_mask_a_regularizer_from_a_config():
    """``masked`` is listed among the names, but its base is an object that no name or config builds."""
    message = (r"^base must be a fedopt regularizer, got NoneType: Masked takes a regularizer object .* put it on a "
               r"parameter block of the problem with block = \"W1\" in \[run.regularizer\] "
               r"\(--set regularizer.block=W1 .*on_block\); Masked accepts")
    with pytest.raises(ValueError, match=message):
        R.make("masked")


def test_make_builds_and_validates():
    """``make`` is case- and hyphen-insensitive and still validates the values."""
    assert R.make("L2-Ball", radius=2.0) == R.L2Ball(2.0)
    assert R.make("group-lasso", lam=0.5, groups=2) == R.GroupLasso(0.5, groups=2)
    with pytest.raises(ValueError, match=r"^lam must be a finite number >= 0"):
        R.make("mcp", lam=-1.0)


# ---- conversions, in place, pickling ------------------------------------------------------------


def all_regularizers(p=6):
    """One instance of every regularizer for vectors of length 6, array parameters included."""
    rng = np.random.default_rng(0)
    return {
        "zero": R.Zero(),
        "l1": R.L1(0.4),
        "l1_weighted": R.L1(0.4, weights=rng.uniform(0, 2, p)),
        "elasticnet": R.ElasticNet(0.3, 0.8),
        "group_blocks": R.GroupLasso(0.5, groups=2),
        "group_labels": R.GroupLasso(0.5, groups=[2, 0, 2, 1, 0, 7], weights=[1.0, 0.0, 2.0, 0.5]),
        "box": R.Box(-0.4, 0.6),
        "box_vector": R.Box(-rng.uniform(0, 1, p), rng.uniform(0, 1, p)),
        "nonnegative": R.NonNegative(),
        "l2_ball": R.L2Ball(1.3, center=rng.standard_normal(p)),
        "l1_ball": R.L1Ball(1.5),
        "simplex": R.Simplex(2.0),
        "mcp": R.MCP(0.6, gamma=2.5),
        "scad": R.SCAD(0.5, a=3.7),
        "nuclear": R.Nuclear(0.5, shape=(2, 3)),
    }


NAMES = list(all_regularizers())


@pytest.mark.parametrize("name", NAMES)
def test_integer_input_is_converted_to_float64(name):
    """Integer arrays work and give exactly the float64 result of the same values (prox and value)."""
    reg = all_regularizers()[name]
    z_int = np.array([[3, -1, 0, 2, -4, 1], [0, 0, 5, -2, 1, 1]])
    x = reg.prox(z_int, 0.7)
    assert x.dtype == np.float64
    np.testing.assert_array_equal(x, reg.prox(z_int.astype(np.float64), 0.7))
    np.testing.assert_array_equal(reg.prox(z_int[0], 0.7), x[0])
    np.testing.assert_allclose(reg.value(z_int), reg.value(z_int.astype(np.float64)), rtol=1e-15, atol=0)


def test_integer_input_known_values():
    """A hand-checked case: soft-thresholding of ``[3, -1, 0]`` by 0.5 is ``[2.5, -0.5, 0]``."""
    x = R.L1(0.5).prox(np.array([3, -1, 0]), 1.0)
    assert x.dtype == np.float64
    np.testing.assert_allclose(x, [2.5, -0.5, 0.0], rtol=0, atol=0)


@pytest.mark.parametrize("name", NAMES)
def test_float32_stays_float32(name):
    """float32 in, float32 out (prox and normal-map step), close to the float64 result."""
    reg = all_regularizers()[name]
    z = np.random.default_rng(1).standard_normal((3, 6)) * 2
    z32 = z.astype(np.float32)
    x32 = reg.prox(z32, 0.7)
    assert x32.dtype == np.float32 and x32.shape == z.shape
    np.testing.assert_allclose(x32, reg.prox(z32.astype(np.float64), 0.7), rtol=1e-5, atol=1e-5)
    z_new, x_new = reg.normal_map_step(z32, z32 * 0.5, z32[0], x32[0], 0.1, 0.7)
    assert z_new.dtype == np.float32 and x_new.dtype == np.float32


@pytest.mark.parametrize("shape", [(6,), (4, 6)], ids=["vector", "batch"])
@pytest.mark.parametrize("name", NAMES)
def test_out_is_z_in_place(name, shape):
    """``prox(z, step, out=z)`` overwrites ``z`` with exactly the out-of-place result and returns it."""
    reg = all_regularizers()[name]
    z = np.random.default_rng(2).standard_normal(shape) * 2
    expected = reg.prox(z, 0.7)
    inplace = z.copy()
    assert reg.prox(inplace, 0.7, out=inplace) is inplace
    np.testing.assert_array_equal(inplace, expected)
    out = np.full(shape, np.nan)
    assert reg.prox(z, 0.7, out=out) is out
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("name", NAMES)
def test_pickle_equality_and_hash(name):
    """Regularizers pickle (caches dropped), compare equal after a round trip, hash alike, and still work."""
    reg = all_regularizers()[name]
    z = np.random.default_rng(3).standard_normal((2, 6))
    expected = reg.prox(z, 0.7)  # fills the per-backend caches before pickling
    clone = pickle.loads(pickle.dumps(reg))
    assert type(clone) is type(reg)
    assert clone == reg
    assert (clone != reg) is False
    assert hash(clone) == hash(reg)
    assert not any(key.startswith("_") for key in vars(clone)), "caches must not be pickled"
    np.testing.assert_array_equal(clone.prox(z, 0.7), expected)
    assert copy.deepcopy(reg) == reg
    assert {reg: 1}[clone] == 1  # usable as a dict key


def test_equality_distinguishes_parameters_and_types():
    """Equal parameters compare equal; different values, array contents or types do not."""
    assert R.L1(0.5, weights=[1.0, 2.0]) == R.L1(0.5, weights=np.array([1.0, 2.0]))
    assert hash(R.L1(0.5, weights=[1.0, 2.0])) == hash(R.L1(0.5, weights=[1.0, 2.0]))
    assert R.L1(0.5, weights=[1.0, 2.0]) != R.L1(0.5, weights=[1.0, 3.0])
    assert R.L1(0.5) != R.L1(0.6)
    assert R.L1(0.5) != R.L1(0.5, weights=[1.0, 1.0])
    assert R.GroupLasso(1.0, groups=2) != R.GroupLasso(1.0, groups=[0, 0, 1, 1])
    assert R.ElasticNet(0.5, 0.0) != R.L1(0.5)
    assert R.NonNegative() != R.Box(0.0, INF)
    assert R.MCP(1.0, gamma=3.0) != R.SCAD(1.0, a=3.0)


def test_regularizers_are_frozen_and_arrays_read_only():
    """Parameters cannot be reassigned, and array parameters cannot be modified in place."""
    reg = R.L1(0.5, weights=[1.0, 2.0])
    with pytest.raises(AttributeError):
        reg.lam = 1.0
    with pytest.raises(ValueError, match="read-only"):
        reg.weights[0] = 5.0
    source = np.array([1.0, 2.0])
    box = R.Box(-source, source)
    source[0] = 100.0  # the caller's array is copied, not aliased
    assert box.upper[0] == 1.0


def test_group_weights_must_be_finite():
    """Infinite group weights are refused, as the error message promises ("finite numbers >= 0")."""
    with pytest.raises(ValueError, match=r"weights must be a 1-D array of finite numbers >= 0"):
        R.GroupLasso(1.0, groups=[0, 1], weights=[1.0, INF])
