"""Per-sample weights of the MLP (scikit-learn's ``sample_weight``).

* the weighted ``mlp_oracle`` of the Numba and batched NumPy backends against the reference,
  softmax and squared-error outputs, odd and even sizes, full passes and minibatches;
* integer weights give the loss and gradient of the data with rows repeated;
* a weighted FedNMap run steps array-wise on Numba and walks the NumPy backend's trajectory.

Float64 must agree with the reference to ~1e-10 and float32 to ~1e-5.
"""

import numpy as np
import pytest

import fedopt
from fedopt import kernels as K
from fedopt.datasets import from_client_ids
from fedopt.kernels import batched, cpu, reference
from fedopt.kernels.cpu import mlp as cpu_mlp
from fedopt.problems import MLP
from fedopt.regularizers import L1

#: Client sizes: a single row, odd and even ones, and one of more than a chunk (two passes).
OFFSETS = np.concatenate([[0], np.cumsum([1, 7, cpu_mlp.CHUNK + 37, 6])])


def tolerances(dtype):
    return dict(rtol=1e-10, atol=1e-12) if dtype == np.float64 else dict(rtol=1e-5, atol=1e-5)


def sample_weights(rng, m, dtype):
    """Weights in [0, 3), about a fifth of them zero."""
    return np.where(rng.random(m) < 0.2, 0, rng.uniform(0, 3, m)).astype(dtype)


def oracle(module, model, sample_weight, grad=True):
    """``module.mlp_oracle(*model, sample_weight, loss_out, grad_out)`` into new outputs (no gradient
    unless ``grad``); ``model`` is ``(X, y, offsets, W, rows, n_hidden, n_out, kind, scale)``."""
    W = model[3]
    n, p = len(model[2]) - 1, W.shape[1]
    return module.mlp_oracle(*model, sample_weight, np.empty(n, W.dtype),
                             np.empty((n, p) if grad else (0, 0), W.dtype))


# ---------------------------------------------------------------------------------- kernels
@pytest.mark.parametrize("dtype, parallel", [(np.float64, False), (np.float32, False), (np.float64, True)],
                         ids=["f64", "f32", "f64-parallel"])
@pytest.mark.parametrize("loss", ["softmax", "squared"])
def test_weighted_mlp_oracle_matches_the_reference(loss, dtype, parallel, cpu_variant):
    """Minibatches below and above the loop products' row limits, full passes, shared and
    per-client points; all-one weights give the unweighted oracle, and these weights do not."""
    cpu_variant(parallel)
    kind = K.SOFTMAX if loss == "softmax" else K.LEAST_SQUARES
    rng = np.random.default_rng(kind + 3)
    n, m = len(OFFSETS) - 1, OFFSETS[-1]
    for d, h, batch in ((7, 3, 5), (8, 4, 6), (9, 6, cpu_mlp.BACKWARD_LOOP_ROWS + 1), (40, 33, cpu_mlp.LOOP_ROWS + 1)):
        k = 3 if kind == K.SOFTMAX else 1
        X = rng.standard_normal((m, d)).astype(dtype)
        y = (rng.integers(0, k, m) if kind == K.SOFTMAX else 2 * rng.standard_normal(m)).astype(dtype)
        weights = sample_weights(rng, m, dtype)
        p = h * (d + 1) + k * (h + 1)
        minibatch = np.stack([rng.integers(OFFSETS[i], OFFSETS[i + 1], batch) for i in range(n)])
        for W in (rng.standard_normal((1, p)).astype(dtype), rng.standard_normal((n, p)).astype(dtype)):
            for rows in (minibatch, np.empty((n, 0), np.int64)):
                model = (X, y, OFFSETS, W, rows, h, k, kind, 0.7)
                expected = oracle(reference, model, weights)
                for module in (cpu, batched):
                    for a, b in zip(oracle(module, model, weights), expected, strict=True):
                        assert a.dtype == dtype
                        np.testing.assert_allclose(a, b, **tolerances(dtype))
                loss_only = oracle(cpu, model, weights, grad=False)[0]
                np.testing.assert_allclose(loss_only, expected[0], **tolerances(dtype))
                plain = oracle(reference, model, np.empty(0, dtype))
                for module in (reference, cpu, batched):
                    for a, b in zip(oracle(module, model, np.ones(m, dtype)), plain, strict=True):
                        np.testing.assert_allclose(a, b, **tolerances(dtype))
                assert not np.allclose(expected[1], plain[1])


# ---------------------------------------------------------------------------------- problems
def weighted_data(loss, seed=0):
    """``X, y, clients, s``: 4 clients of odd and even sizes, integer weights 0..3."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(41, 5))
    y = (X @ rng.normal(size=(5, 3))).argmax(axis=1) if loss == "cross_entropy" else X @ rng.normal(size=5)
    clients = np.repeat(np.arange(4), [9, 12, 7, 13])
    return X, y, clients, rng.integers(0, 4, len(y))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("loss", ["cross_entropy", "squared"])
def test_integer_weights_equal_repeated_rows(loss, backend):
    """``MLP(weights="samples")`` on integer weights has the loss and gradient of the data with
    each row repeated its weight's number of times (a zero weight drops the row)."""
    X, y, clients, s = weighted_data(loss)
    weighted = MLP(from_client_ids(X, y, clients, sample_weight=s), hidden=4, weights="samples", backend=backend,
                   loss=loss)
    repeated = MLP(from_client_ids(np.repeat(X, s, axis=0), np.repeat(y, s), np.repeat(clients, s)), hidden=4,
                   weights="samples", backend=backend, loss=loss)
    assert weighted.has_sample_weight and not repeated.has_sample_weight
    for seed in range(3):
        x = weighted.init(seed)
        assert weighted.loss(x) == pytest.approx(repeated.loss(x), rel=1e-12, abs=1e-12)
        np.testing.assert_allclose(weighted.backend.to_numpy(weighted.grad(x)),
                                   repeated.backend.to_numpy(repeated.grad(x)), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("batch_size", [5, None], ids=["minibatch", "full"])
def test_weighted_fednmap_steps_array_wise_on_numba_as_on_numpy(batch_size, monkeypatch):
    """The fused local steps decline a weighted MLP; the array-wise steps through the weighted
    oracle walk the NumPy backend's trajectory, and the objective decreases."""
    X, y, clients, _ = weighted_data("cross_entropy", seed=1)
    s = np.random.default_rng(2).uniform(0.2, 3.0, len(y))
    kw = dict(rounds=4, local_steps=3, lr_local=0.5, gamma=2.0, batch_size=batch_size, seed=4)

    def run(backend):
        problem = MLP(from_client_ids(X, y, clients, sample_weight=s), hidden=4, weights="samples", backend=backend)
        models = []
        result = fedopt.run("fednmap", problem, L1(0.001), **kw,
                            callback=lambda state, row: models.append(problem.backend.to_numpy(state.x).copy()))
        return problem, result, np.array(models)

    calls = []
    fused = MLP.fused_local_steps
    monkeypatch.setattr(MLP, "fused_local_steps", lambda *args: calls.append(fused(*args)) or calls[-1])
    problem, numba_result, numba_models = run("numba")
    assert problem.backend.name == "numba" and calls and not any(calls)
    _, numpy_result, numpy_models = run("numpy")
    assert np.abs(np.diff(numba_models, axis=0)).max() > 1e-4  # the rounds move
    np.testing.assert_allclose(numba_models, numpy_models, rtol=1e-10, atol=1e-12)
    objective = np.asarray(numba_result.history["objective"])
    np.testing.assert_allclose(objective, np.asarray(numpy_result.history["objective"]), rtol=1e-10)
    assert objective[-1] < objective[0]
