"""FedProx synthetic data at scale: fixed client sizes, float32 storage, chunked generation."""

import itertools

import numpy as np
import pytest

import fedopt.datasets.synthetic as synthetic
from fedopt.datasets import make_fedprox_synthetic

FIELDS = ("X", "y", "offsets", "X_test", "y_test")


def scale_set(**options):
    """2 000 clients of 20 samples in 20 dimensions, float32, all kept for training."""
    return make_fedprox_synthetic(**{"n_clients": 2000, "n_features": 20, "samples_per_client": 20,
                                     "dtype": "float32", "test_size": None, "seed": 0, **options})


def assert_same_data(a, b):
    for field in FIELDS:
        left, right = getattr(a, field), getattr(b, field)
        assert (left is None) == (right is None), field
        if left is not None:
            assert left.dtype == right.dtype, field
            np.testing.assert_array_equal(left, right, err_msg=field)


def test_fixed_sizes_in_float32_have_the_promised_shape():
    ds = scale_set()
    assert ds.X.dtype == np.float32 and ds.X.shape == (40_000, 20) and ds.dtype == np.float32
    np.testing.assert_array_equal(ds.offsets, 20 * np.arange(2001))
    assert ds.X_test is None and ds.y_test is None
    np.testing.assert_array_equal(ds.classes, np.arange(10))
    assert ds.y.min() >= 0 and ds.y.max() == 9
    assert ds.info["samples_per_client"] == 20
    assert ds.info["W"].shape == (2000, 10, 20) and ds.info["b"].shape == (2000, 10)
    assert ds.info["v"].shape == (2000, 20) and ds.info["W"].dtype == np.float64


def test_every_client_follows_its_own_model():
    ds = scale_set()
    W, b, v = ds.info["W"], ds.info["b"], ds.info["v"]
    x = ds.X.astype(np.float64).reshape(2000, 20, 20)
    # y = argmax(W_k x + b_k) on the stored (float32) features, for every sample of every client
    np.testing.assert_array_equal(np.argmax(x @ W.transpose(0, 2, 1) + b[:, None, :], axis=2).ravel(), ds.y)
    # x ~ N(v_k, diag(j^-1.2)): the residuals from each client's mean have the promised spread
    residual = (x - v[:, None, :]).reshape(-1, 20)
    np.testing.assert_allclose(residual.std(axis=0), np.arange(1, 21) ** -0.6, rtol=0.03)
    assert np.abs(residual.mean(axis=0)).max() < 0.01
    # the local models differ: u_k ~ N(0, alpha) shifts client k's entries
    assert 0.8 < ds.info["W"].mean(axis=(1, 2)).var() < 1.2
    # and the clients' labels are skewed (each client's model prefers a few classes)
    counts = ds.label_histogram()
    assert (counts.max(axis=1) / 20).mean() > 0.4


def test_the_seed_fixes_the_data_and_float32_rounds_float64():
    a, b, c = scale_set(seed=3), scale_set(seed=3), scale_set(seed=4)
    assert_same_data(a, b)
    assert not np.array_equal(a.X, c.X)
    wide = scale_set(seed=3, dtype="float64")
    assert wide.X.dtype == np.float64
    np.testing.assert_array_equal(a.X, wide.X.astype(np.float32))
    np.testing.assert_array_equal(a.info["W"], wide.info["W"])
    # the labels are those of the stored features: they can differ only where rounding crosses a tie
    assert (a.y == wide.y).mean() > 0.999


@pytest.mark.parametrize("options", [
    {"samples_per_client": 20, "test_size": 0.25},
    {"samples_per_client": 7, "test_size": None, "iid": True},
    {"test_size": 0.2},  # the paper's sizes
])
def test_chunk_boundaries_inside_the_data_change_nothing(monkeypatch, options):
    options = {"n_clients": 60, "n_features": 20, "dtype": "float32", "seed": 5, **options}
    whole = make_fedprox_synthetic(**options)
    assert whole.n_samples * 20 < synthetic._CHUNK_VALUES  # one chunk
    # chunks of about 3 clients of 20 samples: boundaries fall between and beside many clients
    monkeypatch.setattr(synthetic, "_CHUNK_VALUES", 20 * 61)
    assert len(list(synthetic._chunks(np.full(60, 20), 61))) == 20
    chunked = make_fedprox_synthetic(**options)
    assert_same_data(whole, chunked)
    for key in "Wbv":
        np.testing.assert_array_equal(whole.info[key], chunked.info[key])


def test_chunks_cover_every_client_once():
    sizes = np.array([5, 1, 1, 40, 2, 2, 2, 9])
    chunks = list(synthetic._chunks(sizes, 6))
    assert chunks[0][0] == 0 and chunks[-1][1] == len(sizes)
    assert all(lo < hi for lo, hi in chunks) and all(a[1] == b[0] for a, b in itertools.pairwise(chunks))
    # clients start at rows 0, 5, 6, 7, 47, 49, 51, 53: windows [0, 6), [6, 12), [42, 48), [48, 54)
    assert chunks == [(0, 2), (2, 4), (4, 5), (5, 8)]


def test_fixed_sizes_hold_out_each_clients_last_samples():
    full = scale_set(n_clients=300, samples_per_client=10)
    split = scale_set(n_clients=300, samples_per_client=10, test_size=0.3)
    assert split.n_samples == 300 * 7 and len(split.y_test) == 300 * 3 and split.X_test.dtype == np.float32
    np.testing.assert_array_equal(split.offsets, 7 * np.arange(301))
    rows = full.X.reshape(300, 10, 20)
    np.testing.assert_array_equal(split.X.reshape(300, 7, 20), rows[:, :7])
    np.testing.assert_array_equal(split.X_test.reshape(300, 3, 20), rows[:, 7:])
    np.testing.assert_array_equal(split.y_test.reshape(300, 3), full.y.reshape(300, 10)[:, 7:])
    # rounded per client, and at least one training sample each
    tiny = scale_set(n_clients=50, samples_per_client=2, test_size=0.9)
    assert (tiny.client_sizes == 1).all() and len(tiny.y_test) == 50
    none = scale_set(n_clients=50, samples_per_client=3, test_size=0.0)
    assert none.X_test is None and (none.client_sizes == 3).all()


def test_models_are_kept_only_while_small(monkeypatch):
    kept = scale_set(n_clients=100)
    dropped = scale_set(n_clients=100, keep_models=False)
    assert_same_data(kept, dropped)
    assert "W" not in dropped.info and {"alpha", "beta", "iid", "samples_per_client"} <= set(dropped.info)
    monkeypatch.setattr(synthetic, "_KEEP_MODELS_MAX", 100 * 10 * 20 - 1)
    assert "W" not in scale_set(n_clients=100).info
    assert_same_data(kept, forced := scale_set(n_clients=100, keep_models=True))
    np.testing.assert_array_equal(kept.info["W"], forced.info["W"])


def test_iid_clients_share_one_model():
    ds = scale_set(n_clients=50, iid=True)
    assert (ds.info["W"] == ds.info["W"][0]).all() and (ds.info["v"] == 0).all()
    assert ds.name == "fedprox_synthetic_iid/50"


def test_scale_options_reject_bad_arguments():
    with pytest.raises(ValueError, match="dtype must be 'float64' or 'float32'"):
        make_fedprox_synthetic(dtype="uint8")
    with pytest.raises(ValueError, match="samples_per_client must be an integer >= 1"):
        make_fedprox_synthetic(samples_per_client=0, test_size=None)
    with pytest.raises(ValueError, match="samples_per_client must be an integer >= 2"):
        make_fedprox_synthetic(samples_per_client=1)  # a test split needs a second sample
