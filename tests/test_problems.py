"""Problems and their batched oracles: finite differences, backend parity, pooled losses, errors."""

import dataclasses
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.linear_model import LinearRegression
from sklearn.metrics import log_loss, r2_score

import fedopt
from fedopt import kernels as K
from fedopt.datasets import FederatedDataset, load_digits, partition
from fedopt.kernels import batched, reference
from fedopt.problems import MLP, LeastSquares, Logistic, Softmax
from fedopt.regularizers import L1


def dataset(kind, n_samples=91, d=7, n_clients=5, storage="dense", seed=0, n_classes=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_samples, d))
    if storage == "uint8":
        X = rng.integers(0, 256, size=(n_samples, d)).astype(np.uint8)
    elif storage == "csr":
        X = sp.random(n_samples, d, density=0.4, random_state=seed, format="csr", data_rvs=rng.standard_normal)
    scores = (X @ rng.normal(size=(d, n_classes))) if storage != "uint8" else rng.normal(size=(n_samples, n_classes))
    y = {"regression": scores[:, 0] + rng.normal(size=n_samples),
         "binary": (scores[:, 0] > 0).astype(int),
         "multiclass": scores.argmax(axis=1)}[kind]
    scale = 1 / 255 if storage == "uint8" else 1.0
    return partition(X, y, n_clients, "dirichlet" if kind != "regression" else "iid", alpha=1.0, seed=seed,
                     scale=scale, test_size=0.2)


def build(name, storage="dense", backend="numba", fit_intercept=True, weights="uniform", dtype=None, **kw):
    kind = {"least_squares": "regression", "logistic": "binary", "softmax": "multiclass", "mlp": "multiclass"}[name]
    ds = dataset(kind, storage=storage, **kw)
    if dtype is not None and storage != "uint8":
        ds = FederatedDataset(ds.X.astype(dtype), ds.y, ds.offsets, ds.X_test.astype(dtype), ds.y_test, ds.classes)
    if name == "mlp":
        return MLP(ds, hidden=4, weights=weights, backend=backend)
    cls = {"least_squares": LeastSquares, "logistic": Logistic, "softmax": Softmax}[name]
    return cls(ds, weights=weights, fit_intercept=fit_intercept, backend=backend)


NAMES = ["least_squares", "logistic", "softmax", "mlp"]


def random_point(problem, seed=0, spread=0.5):
    return np.random.default_rng(seed).normal(scale=spread, size=problem.n_params).astype(problem.dtype)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("fit_intercept", [False, True])
@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_gradient_matches_finite_differences(name, fit_intercept, backend):
    problem = build(name, backend=backend, fit_intercept=fit_intercept)
    x = random_point(problem)
    g = problem.grad(x)
    rng = np.random.default_rng(1)
    for _ in range(3):
        v = rng.normal(size=problem.n_params)
        h = 1e-6
        slope = (problem.loss(x + h * v) - problem.loss(x - h * v)) / (2 * h)
        assert slope == pytest.approx(g @ v, rel=1e-6, abs=1e-8)


@pytest.mark.parametrize("name", NAMES)
def test_minibatch_gradient_matches_finite_differences_per_client(name):
    problem = build(name)
    W = np.stack([random_point(problem, seed=i) for i in range(problem.n_clients)])
    rows = problem.sample_rows(np.random.default_rng(0), 6)
    grads = problem.client_grad(W, rows)
    V = np.random.default_rng(2).normal(size=W.shape)
    h = 1e-6
    slopes = (problem.client_loss(W + h * V, rows) - problem.client_loss(W - h * V, rows)) / (2 * h)
    np.testing.assert_allclose(slopes, (grads * V).sum(axis=1), rtol=1e-6, atol=1e-8)


def tolerances(dtype):
    return dict(rtol=1e-10, atol=1e-12) if dtype == np.float64 else dict(rtol=2e-5, atol=2e-6)


STORAGES = [("dense", np.float64), ("dense", np.float32), ("uint8", np.float32), ("csr", np.float64),
            ("csr", np.float32)]  # uint8 pixels compute in float32


@pytest.mark.parametrize("name, storage, dtype", [(name, storage, dtype) for name in NAMES
                                                  for storage, dtype in STORAGES if (name, storage) != ("mlp", "csr")])
@pytest.mark.parametrize("n_samples, d", [(91, 7), (120, 8)])
def test_numba_matches_the_reference(name, storage, n_samples, d, dtype):
    ref, fast = (build(name, storage, b, n_samples=n_samples, d=d, dtype=dtype) for b in ("numpy", "numba"))
    assert ref.dtype == fast.dtype == dtype
    W = np.stack([random_point(ref, seed=i) for i in range(ref.n_clients)])
    rows = ref.sample_rows(np.random.default_rng(0), 5)
    for args in ((W, rows), (W, None), (W[0], rows), (W[0], None)):
        loss_ref, grad_ref = ref.client_loss_grad(*args)
        loss, grad = fast.client_loss_grad(*args)
        assert loss.dtype == grad.dtype == dtype
        np.testing.assert_allclose(loss, loss_ref, **tolerances(dtype))
        np.testing.assert_allclose(grad, grad_ref, **tolerances(dtype))


@pytest.mark.parametrize("oracle", ["linear", "mlp"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_batched_kernels_match_the_reference(oracle, dtype):
    """The GPU backend's batched products, run here on NumPy arrays."""
    rng = np.random.default_rng(0)
    offsets = np.array([0, 9, 10, 31, 50])
    X = rng.normal(size=(50, 6)).astype(dtype)
    rows_sets = [np.empty((4, 0), np.int64), np.stack([rng.integers(offsets[i], offsets[i + 1], 7) for i in range(4)])]
    cases = ([(kind, n_out, fit) for kind, n_out in ((K.LEAST_SQUARES, 1), (K.LOGISTIC, 1), (K.SOFTMAX, 3))
              for fit in (False, True)] if oracle == "linear" else [(5, 3, None)])
    for case in cases:
        if oracle == "linear":
            kind, n_out, fit = case
            y = [rng.normal(size=50), np.sign(rng.normal(size=50)), rng.integers(0, 3, 50)][kind].astype(dtype)
            p = n_out * (6 + fit)
            args = (kind, n_out, 0.5, fit, np.empty(0, dtype))
        else:
            y, p = rng.integers(0, 3, 50).astype(dtype), 5 * 7 + 3 * 6
            args = (5, 3, K.SOFTMAX, 0.5, np.empty(0, dtype))
        for n_w in (1, 4):
            W = rng.normal(size=(n_w, p)).astype(dtype)
            for rows in rows_sets:
                results = []
                for module in (reference, batched):
                    loss, grad = np.zeros(4, dtype), np.zeros((4, p), dtype)
                    getattr(module, f"{oracle}_oracle")(X, y, offsets, W, rows, *args, loss, grad)
                    results.append((loss, grad))
                np.testing.assert_allclose(results[1][0], results[0][0], **tolerances(dtype))
                np.testing.assert_allclose(results[1][1], results[0][1], **tolerances(dtype))


@pytest.mark.parallel
def test_parallel_kernel_matches_the_reference():
    # 8 clients x 64 rows x 300 features: enough work for the prange variant
    ref, fast = (build("softmax", backend=b, n_samples=2000, d=300, n_clients=8) for b in ("numpy", "numba"))
    W = np.stack([random_point(ref, seed=i, spread=0.05) for i in range(8)])
    rows = ref.sample_rows(np.random.default_rng(0), 64)
    np.testing.assert_allclose(fast.client_grad(W, rows), ref.client_grad(W, rows), rtol=1e-10, atol=1e-12)


@pytest.mark.parallel
@pytest.mark.parametrize("name, storage", [("logistic", "dense"), ("softmax", "dense"), ("logistic", "csr-centered")])
def test_parallel_fused_local_steps_match_the_reference(name, storage):
    # 8 clients x 2 steps x 64 rows x 300 features: enough work for the prange variant
    from fedopt.kernels.cpu import _jit

    ref, fast = (build(name, backend=b, n_samples=2000, d=300, n_clients=8) for b in ("numpy", "numba"))
    if storage == "csr-centered":  # the same rows as CSR, centered inside the kernel
        mu = ref.dataset.X.mean(axis=0)
        ref = type(ref)(dataclasses.replace(ref.dataset, X=ref.dataset.X - mu), fit_intercept=True, backend="numpy")
        data = fast.dataset
        csr = dataclasses.replace(data, X=sp.csr_matrix(data.X), X_test=sp.csr_matrix(data.X_test))
        fast = type(fast)(csr, fit_intercept=True, center=mu, backend="numba")
    rows = ref.sample_rows(np.random.default_rng(0), 64, steps=2)
    assert rows.size * 300 >= _jit.PARALLEL_MIN_WORK
    start = np.stack([random_point(ref, seed=i, spread=0.05) for i in range(8)])
    shift = np.random.default_rng(1).normal(size=start.shape) * 0.01
    thetas = np.tile([1e-3, 1.0], (2, 1))  # soft-thresholding at 1e-3
    Z, P = start.copy(), start.copy()
    assert fast.fused_local_steps(rows, shift, 0.1, K.SOFT, thetas, np.empty((0, 0)), Z, P)
    Z_ref, P_ref = start.copy(), start.copy()
    for step in range(2):  # one oracle call and one prox per step
        Z_ref -= 0.1 * (ref.client_grad(P_ref, rows[step]) + shift)
        P_ref = np.sign(Z_ref) * np.maximum(np.abs(Z_ref) - 1e-3, 0)
    np.testing.assert_allclose(Z, Z_ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(P, P_ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("name", ["least_squares", "logistic", "softmax"])
@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("weighted", [False, True])
def test_center_gives_the_problem_of_centered_rows_on_sparse_ones(backend, name, fit_intercept, weighted):
    """``center=mu`` on CSR rows is the problem of the dense rows ``X - mu``: losses, full and minibatch
    gradients, margins, smoothness and a round's local steps (fused where the backend can), while
    the rows stay sparse (the estimators' centering)."""
    rng = np.random.default_rng(0)
    X = (rng.random((91, 7)) < 0.3) * rng.random((91, 7))  # odd sizes
    y = {"least_squares": rng.standard_normal(91), "logistic": rng.integers(0, 2, 91),
         "softmax": rng.integers(0, 3, 91)}[name]
    options = {"sample_weight": rng.random(91) + 0.5} if weighted else {}
    sparse = partition(sp.csr_matrix(X), y, 3, "iid", seed=0, **options)
    mu = np.asarray(sparse.X.mean(axis=0)).ravel()
    dense = partition(X, y, 3, "iid", seed=0, **options)
    dense = dataclasses.replace(dense, X=dense.X - mu)
    cls = {"least_squares": LeastSquares, "logistic": Logistic, "softmax": Softmax}[name]
    centered = cls(sparse, fit_intercept=fit_intercept, center=mu, backend=backend)
    plain = cls(dense, fit_intercept=fit_intercept, backend=backend)
    assert sp.issparse(centered.dataset.X) and centered.n_params == plain.n_params
    x, W = rng.standard_normal(plain.n_params), rng.standard_normal((3, plain.n_params))
    rows = plain.sample_rows(np.random.default_rng(1), 4)
    assert centered.loss(x) == pytest.approx(plain.loss(x), rel=1e-12)
    np.testing.assert_allclose(centered.grad(x), plain.grad(x), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(centered.client_grad(W, rows), plain.client_grad(W, rows), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(centered.decision_function(x), plain.decision_function(x), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(centered.smoothness(), plain.smoothness(), rtol=1e-8)
    minibatches, shift = plain.sample_rows(np.random.default_rng(2), 4, steps=3), 0.1 * W
    for rows in (minibatches, None):  # full local gradients with None
        Z, P, Z_ref, P_ref = W.copy(), W.copy(), W.copy(), W.copy()
        fused = centered.fused_local_steps(rows, shift, 0.1, K.SOFT, np.tile([1e-2, 1.0], (3, 1)),
                                           np.empty((0, 0)), Z, P)
        assert fused != weighted  # the fused kernels take no sample weights
        for step in range(3 if fused else 0):
            Z_ref -= 0.1 * (plain.client_grad(P_ref, None if rows is None else rows[step]) + shift)
            P_ref = np.sign(Z_ref) * np.maximum(np.abs(Z_ref) - 1e-2, 0)
        np.testing.assert_allclose(Z, Z_ref, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(P, P_ref, rtol=1e-10, atol=1e-12)
    depositum = {"rounds": 2, "comm_period": 3, "batch_size": 4, "lr": 0.05}  # the tracking steps, fused or not
    np.testing.assert_allclose(fedopt.run("depositum", centered, L1(1e-2), **depositum).x,
                               fedopt.run("depositum", plain, L1(1e-2), **depositum).x, rtol=1e-10, atol=1e-12)
    assert centered.on("numpy").center is centered.center
    with pytest.raises(ValueError, match=r"one finite mean per feature, shape \(7,\), got shape \(6,\)"):
        cls(sparse, center=mu[:6])


def test_samples_weights_give_the_pooled_scikit_learn_losses():
    for name, loss_of in [
        ("logistic", lambda p, x, X, y: log_loss(y, 1 / (1 + np.exp(-(X @ x[:-1] + x[-1]))))),
        ("softmax", lambda p, x, X, y: log_loss(y, _softmax(X @ x[:-3].reshape(3, -1).T + x[-3:]), labels=range(3))),
        ("mlp", lambda p, x, X, y: log_loss(y, _softmax(p.decision_function(x)), labels=range(3))),
        ("least_squares", lambda p, x, X, y: 0.5 * np.mean((X @ x[:-1] + x[-1] - y) ** 2)),
    ]:
        problem = build(name, weights="samples")
        assert len(set(problem.dataset.client_sizes)) > 1  # unequal clients: uniform weights would differ
        x = random_point(problem)
        X, y = problem.dataset.X, problem.dataset.y
        assert problem.loss(x) == pytest.approx(loss_of(problem, x, X, y), rel=1e-12)
        uniform = build(name, weights="uniform")
        assert abs(uniform.loss(x) - problem.loss(x)) > 1e-6


def _softmax(M):
    E = np.exp(M - M.max(axis=1, keepdims=True))
    return E / E.sum(axis=1, keepdims=True)


def test_least_squares_gradient_vanishes_at_the_pooled_optimum():
    problem = build("least_squares", weights="samples")
    fit = LinearRegression().fit(problem.dataset.X, problem.dataset.y)
    x = np.concatenate([fit.coef_, [fit.intercept_]])
    assert np.linalg.norm(problem.grad(x)) < 1e-12
    X_test, y_test = problem.dataset.X_test, problem.dataset.y_test
    assert problem.score(x) == pytest.approx(r2_score(y_test, fit.predict(X_test)), rel=1e-12)
    with pytest.raises(ValueError, match="regression"):
        problem.accuracy(x)


def test_accuracy_on_test_and_train_splits():
    problem = Softmax(load_digits(n_clients=4), fit_intercept=True)
    x = random_point(problem, spread=0.1)
    scores = problem.decision_function(x, problem.dataset.X_test)
    expected = np.mean(scores.argmax(axis=1) == problem.dataset.y_test)
    assert problem.accuracy(x) == pytest.approx(expected)
    train = np.mean(problem.decision_function(x).argmax(axis=1) == problem.dataset.y)
    assert problem.accuracy(x, test=False) == pytest.approx(train)
    logistic = build("logistic")
    xl = random_point(logistic)
    margins = logistic.decision_function(xl, logistic.dataset.X_test)[:, 0]
    assert logistic.accuracy(xl) == pytest.approx(np.mean((margins > 0) == (logistic.dataset.y_test == 1)))


def test_sample_rows_stay_in_each_client_and_follow_the_seed():
    problem = build("logistic")
    rows = problem.sample_rows(np.random.default_rng(7), 16, steps=3)
    assert rows.shape == (3, problem.n_clients, 16) and rows.dtype == np.int64
    owner = problem.dataset.owner
    np.testing.assert_array_equal(owner[rows], np.broadcast_to(np.arange(problem.n_clients)[:, None], rows.shape))
    np.testing.assert_array_equal(rows, problem.sample_rows(np.random.default_rng(7), 16, steps=3))


def test_mlp_layout_and_seeded_init():
    problem = build("mlp")
    d, h, k = problem.n_features, problem.hidden, problem.n_classes
    assert problem.n_params == h * (d + 1) + k * (h + 1)
    x = problem.init(3)
    np.testing.assert_array_equal(x, problem.init(3))
    assert not np.array_equal(x, problem.init(4))
    W1, _b1, W2, b2 = problem.unpack(x)
    assert W1.shape == (h, d) and b2.shape == (k,)
    assert np.abs(W1).max() <= 1 / np.sqrt(d) and np.abs(W2).max() <= 1 / np.sqrt(h)
    assert np.abs(W1).max() > 0.5 / np.sqrt(d)


def test_smoothness_bounds_the_gradient_change():
    for name in ("least_squares", "logistic", "softmax"):
        problem = build(name, storage="csr" if name == "logistic" else "dense")
        L = problem.smoothness()
        assert L.shape == (problem.n_clients,) and (L > 0).all()
        rng = np.random.default_rng(0)
        for _ in range(5):
            a, b = random_point(problem, rng.integers(1000)), random_point(problem, rng.integers(1000))
            change = np.linalg.norm(problem.client_grad(a) - problem.client_grad(b), axis=1)
            assert (change <= L * np.linalg.norm(a - b) * (1 + 1e-9)).all()
    # least squares: the bound is attained (the largest singular value is exact)
    problem = build("least_squares", fit_intercept=False)
    X0 = problem.dataset.client(0)[0]
    assert problem.smoothness()[0] == pytest.approx(np.linalg.norm(X0, 2) ** 2 / X0.shape[0], rel=1e-8)


@pytest.mark.parametrize("mean", [1.0, 1 + 2**-52])
def test_centered_rows_of_constant_features_have_smoothness_zero(mean):
    """Sparse rows that equal their center, exactly or to rounding (a mean of ones computed as
    ``1 + eps``), have smoothness 0: neither that of the rounding noise of ``X - mu`` (1e-31, whose
    ``1 / L`` steps the estimators took) nor an ARPACK error."""
    X = sp.csr_matrix(np.c_[np.ones((50, 2)), np.full(50, 0.7)])
    data = partition(X, np.arange(50.0), 3, "iid", seed=0)
    mu = [mean, mean, 0.7]
    np.testing.assert_array_equal(LeastSquares(data, center=mu).smoothness(), 0.0)
    np.testing.assert_allclose(LeastSquares(data, center=mu, fit_intercept=True).smoothness(), 1.0, rtol=1e-12)


def test_r2_of_constant_test_targets_follows_scikit_learn():
    """R^2 on constant targets is scikit-learn's: 1 for a perfect fit, 0 otherwise, with no division by zero."""
    rng = np.random.default_rng(0)
    X, X_test = rng.standard_normal((20, 2)), rng.standard_normal((5, 2))
    data = FederatedDataset(X, X @ [1.0, 2.0], np.array([0, 10, 20]), X_test=X_test, y_test=np.full(5, 3.0))
    problem = LeastSquares(data, fit_intercept=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for x in ([1.0, 2.0, 0.0], [0.0, 0.0, 3.0]):
            expected = r2_score(data.y_test, X_test @ x[:2] + x[2])
            assert problem.score(np.array(x)) == expected
        assert expected == 1.0  # the constant prediction 3
        mlp = MLP(data, hidden=2, loss="squared")
        assert mlp.score(mlp.init(0)) == r2_score(data.y_test, mlp.decision_function(mlp.init(0), X_test)[:, 0]) == 0.0


def test_labels_that_do_not_fit_the_problem():
    with pytest.raises(ValueError, match=r"Logistic is binary.*3 classes.*Softmax"):
        Logistic(dataset("multiclass"))
    with pytest.raises(ValueError, match="Logistic is binary"):
        Logistic(dataset("regression"))
    with pytest.raises(ValueError, match="Softmax needs class labels"):
        Softmax(dataset("regression"))
    with pytest.raises(ValueError, match=r"needs class labels.*loss='squared'"):
        MLP(dataset("regression"))
    one_class = partition(np.random.default_rng(0).normal(size=(30, 3)), np.full(30, 7), 2)  # one class, 7
    for make, model in ((Softmax, "Softmax"), (lambda ds: MLP(ds, hidden=2), r"MLP\(loss='cross_entropy'\)")):
        with pytest.raises(ValueError, match=rf"^{model} needs at least two classes, .* only one class, 7;"):
            make(one_class)
    X = np.random.default_rng(0).normal(size=(20, 2))
    with pytest.raises(ValueError, match="LeastSquares needs numeric targets"):
        LeastSquares(partition(X, np.array(["a", "b"] * 10), 2))


def test_bad_oracle_input_names_the_argument():
    problem = build("logistic")
    p, n = problem.n_params, problem.n_clients
    with pytest.raises(ValueError, match="W must have shape"):
        problem.client_grad(np.zeros((n + 1, p)))
    with pytest.raises(ValueError, match="x must have shape"):
        problem.loss(np.zeros(p + 1))
    with pytest.raises(ValueError, match="rows must be an integer array"):
        problem.client_grad(np.zeros(p), np.zeros((n, 3)))
    with pytest.raises(ValueError, match="rows holds indices outside"):
        problem.client_grad(np.zeros(p), np.full((n, 3), 10_000))
    with pytest.raises(ValueError, match="batch_size must be"):
        problem.sample_rows(np.random.default_rng(0), 0)
    with pytest.raises(ValueError, match="grad_out must be"):
        problem.client_loss_grad(np.zeros(p), grad_out=np.zeros((n, p), np.float32))
    with pytest.raises(ValueError, match="weights='pooled' is unknown"):
        Logistic(problem.dataset, weights="pooled")
    with pytest.raises(ValueError, match="sum to 1"):
        Logistic(problem.dataset, weights=np.ones(n))
    with pytest.raises(TypeError, match="FederatedDataset"):
        Logistic((np.zeros((3, 2)), np.zeros(3)))
    for hidden in (0, 2.5):  # 2.5 was truncated to 2 hidden units
        with pytest.raises(ValueError, match=f"hidden must be an integer >= 1, got {hidden}"):
            MLP(dataset("multiclass"), hidden=hidden)
    with pytest.raises(ValueError, match="the MLP takes dense features"):
        MLP(dataset("multiclass", storage="csr"))


def test_grad_out_is_reused_and_nan_propagates():
    problem = build("softmax")
    out = np.empty((problem.n_clients, problem.n_params))
    assert problem.client_grad(np.zeros(problem.n_params), out=out) is out
    x = random_point(problem)
    x[0] = np.nan
    assert np.isnan(problem.loss(x)) and np.isnan(problem.grad(x)).all()


@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
def test_gpu_matches_the_reference(name):
    import cupy

    ref, gpu = (build(name, backend=b) for b in ("numpy", "gpu"))
    W = np.stack([random_point(ref, seed=i) for i in range(ref.n_clients)])
    rows = ref.sample_rows(np.random.default_rng(0), 5)
    for args in ((W, rows), (W, None)):
        loss, grad = gpu.client_loss_grad(cupy.asarray(args[0]), args[1])
        loss_ref, grad_ref = ref.client_loss_grad(*args)
        np.testing.assert_allclose(cupy.asnumpy(loss), loss_ref, **tolerances(np.float64))
        np.testing.assert_allclose(cupy.asnumpy(grad), grad_ref, **tolerances(np.float64))
    assert gpu.accuracy(W[0]) == pytest.approx(ref.accuracy(W[0])) if name != "least_squares" else True
