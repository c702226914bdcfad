"""FederatedDataset and the partitioners: every sample placed once, the promised skew, seeds, errors."""

import numpy as np
import pytest
import scipy.sparse as sp

from fedopt.datasets import FederatedDataset, from_client_ids, load_digits, partition


def labelled(n=600, k=10, seed=0, d=5):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    X = rng.normal(size=(n, d)) + y[:, None]  # row content identifies the sample
    return X, y


def placed_rows(ds, X):
    """For each row of the dataset, the index of the pooled sample it came from."""
    lookup = {row.tobytes(): i for i, row in enumerate(X)}
    return np.array([lookup[row.tobytes()] for row in ds.X])


@pytest.mark.parametrize("scheme", ["iid", "sorted", "dirichlet", "shards"])
@pytest.mark.parametrize("n_clients", [1, 7, 10, 33])
def test_every_sample_is_placed_exactly_once(scheme, n_clients):
    X, y = labelled()
    ds = partition(X, y, n_clients, scheme, alpha=0.3, seed=1)
    assert ds.n_clients == n_clients and ds.n_samples == len(y)
    assert (ds.client_sizes >= 1).all()
    rows = placed_rows(ds, X)
    np.testing.assert_array_equal(np.sort(rows), np.arange(len(y)))
    np.testing.assert_array_equal(ds.classes[ds.y], y[rows])  # labels travel with their rows


@pytest.mark.parametrize("scheme", ["iid", "dirichlet", "shards"])
def test_seed_reproduces_and_changes_the_partition(scheme):
    X, y = labelled()
    a, b = (partition(X, y, 10, scheme, seed=3) for _ in range(2))
    c = partition(X, y, 10, scheme, seed=4)
    np.testing.assert_array_equal(a.X, b.X)
    np.testing.assert_array_equal(a.offsets, b.offsets)
    assert not np.array_equal(a.X, c.X)


@pytest.mark.parametrize("n_clients", [10, 11, 13, 20, 37, 60])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sorted_gives_at_most_two_labels_per_client(n_clients, seed):
    # Unbalanced classes: some are smaller than a block, which equal blocks alone would straddle.
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(10), rng.integers(5, 120, 10))
    X = rng.normal(size=(len(y), 3))
    ds = partition(X, y, n_clients, "sorted")
    labels_per_client = (ds.label_histogram() > 0).sum(axis=1)
    assert labels_per_client.max() <= 2
    # blocks stay contiguous in label order and near-equal where the labels allow it
    assert (np.diff(ds.y) >= 0).all()
    assert ds.client_sizes.max() <= 2 * len(y) / n_clients + 120


def test_sorted_is_the_papers_equal_blocks_when_labels_allow():
    y = np.repeat(np.arange(10), 60)  # 600 samples, 20 clients: blocks of 30 never straddle 3 labels
    X = np.arange(600.0)[:, None]
    ds = partition(X, y, 20, "sorted")
    np.testing.assert_array_equal(ds.client_sizes, np.full(20, 30))
    np.testing.assert_array_equal(ds.X[:, 0], np.arange(600.0))  # stable sort keeps the order


def test_sorted_keeps_equal_blocks_whose_cut_sits_on_a_label_boundary():
    # Blocks of 15 hold labels [0], [0, 1], [1], [1, 2], [3, 4]: the cut at 60 separates labels 2
    # and 3 at once, so nothing needs to move (a cut used to move to 50, giving 20 and 10).
    y = np.repeat(np.arange(5), [22, 28, 10, 4, 11])
    ds = partition(np.arange(75.0)[:, None], y, 5, "sorted")
    np.testing.assert_array_equal(ds.client_sizes, np.full(5, 15))


def test_sorted_returns_equal_blocks_whenever_they_hold_two_labels_at_most():
    rng = np.random.default_rng(0)
    for _ in range(300):
        n_clients = int(rng.integers(3, 12))
        n = n_clients * int(rng.integers(2, 8)) + int(rng.integers(0, n_clients))
        equal = np.round(np.arange(n_clients + 1) * (n / n_clients)).astype(int)
        # labels end on some equal cuts (one cut there separates two labels) and at random places
        ends = np.union1d(rng.choice(equal[1:-1], int(rng.integers(1, n_clients)), replace=False),
                          rng.integers(1, n, int(rng.integers(1, n_clients))))
        ends = np.sort(rng.choice(ends, min(len(ends), n_clients - 1), replace=False))
        y = np.repeat(np.arange(len(ends) + 1), np.diff(np.r_[0, ends, n]))
        ds = partition(np.zeros((n, 1)), y, n_clients, "sorted")
        assert (ds.client_sizes >= 1).all()
        assert (ds.label_histogram() > 0).sum(axis=1).max() <= 2
        if max(len(np.unique(block)) for block in np.split(y, equal[1:-1])) <= 2:
            np.testing.assert_array_equal(ds.offsets, equal)


def test_sorted_on_digits_matches_the_issue_promise():
    ds = load_digits(n_clients=10, partition="sorted")
    assert (ds.label_histogram() > 0).sum(axis=1).max() <= 2
    assert ds.X_test is not None and ds.X.max() <= 1.0


def test_dirichlet_skew_grows_as_alpha_shrinks():
    X, y = labelled(n=3000)

    def skew(alpha):
        hist = partition(X, y, 10, "dirichlet", alpha=alpha, seed=0).label_histogram()
        shares = hist / hist.sum(axis=1, keepdims=True)
        return np.abs(shares - 0.1).sum(axis=1).mean()

    assert skew(0.05) > skew(1.0) > skew(100.0)
    assert skew(100.0) < 0.15


def test_dirichlet_respects_min_samples():
    X, y = labelled(n=2000)
    ds = partition(X, y, 20, "dirichlet", alpha=0.3, min_samples=25, seed=0)
    assert ds.client_sizes.min() >= 25


def test_shards_give_each_client_its_shards():
    X, y = labelled(n=1000)
    ds = partition(X, y, 25, "shards", shards_per_client=2, seed=0)
    assert (ds.client_sizes == 40).all()
    assert (ds.label_histogram() > 0).sum(axis=1).max() <= 4


def test_regression_targets_and_test_split():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(200, 4)), rng.normal(size=200)
    ds = partition(X, y, 5, "sorted", test_size=0.25, seed=0)
    assert ds.classes is None and ds.n_classes == 0
    assert ds.X_test.shape == (50, 4) and ds.n_samples == 150
    assert (np.diff(ds.y) >= 0).all()  # sorted by target value
    pooled = np.sort(np.concatenate([ds.y, ds.y_test]))
    np.testing.assert_array_equal(pooled, np.sort(y))


def test_stratified_test_split_keeps_class_shares():
    X, y = labelled(n=1000)
    ds = partition(X, y, 4, "iid", test_size=0.2, seed=0)
    train, test = np.bincount(ds.y, minlength=10), np.bincount(ds.y_test, minlength=10)
    np.testing.assert_allclose(test / (train + test), 0.2, atol=0.02)


@pytest.mark.parametrize(("sizes", "test_size"), [((3,) * 50, 0.2), ((5,) * 40, 0.1), ((2,) * 100, 0.2),
                                                   ((3,) * 10, 0.5), ((7, 5, 3, 1), 0.3)])
def test_a_stratified_split_holds_out_the_fraction_of_small_classes(sizes, test_size):
    """Each class held out round(test_size n_c): 50 of 150 rows for 0.2 of 50 classes of 3, and none of
    200 for 0.1 of 40 classes of 5 (halves rounded to even), which was refused as an empty split."""
    y = np.repeat(np.arange(len(sizes)), sizes)
    X = np.arange(len(y), dtype=float)[:, None]
    ds = partition(X, y, 2, "iid", test_size=test_size, seed=0)
    assert len(ds.y_test) == round(test_size * len(y))
    held = np.bincount(ds.y_test, minlength=len(sizes))
    assert (np.abs(held - test_size * np.array(sizes)) < 1).all()  # each class within a row of its share
    np.testing.assert_array_equal(np.sort(np.concatenate([ds.X[:, 0], ds.X_test[:, 0]])), X[:, 0])


def test_string_labels_and_given_test_split():
    X, y = labelled(n=100, k=3)
    names = np.array(["cat", "dog", "eel"])[y]
    ds = partition(X, names, 4, "iid", test=(X[:10], names[:10]), seed=0)
    assert list(ds.classes) == ["cat", "dog", "eel"]
    np.testing.assert_array_equal(ds.classes[ds.y_test], names[:10])
    with pytest.raises(ValueError, match="not seen"):
        partition(X, names, 4, test=(X[:2], ["cat", "fox"]))


def test_from_client_ids_groups_samples_by_id():
    X, y = labelled(n=50, k=2)
    clients = np.random.default_rng(0).choice(["b", "a", "c"], 50)
    ds = from_client_ids(X, y, clients)
    assert ds.n_clients == 3
    for i, name in enumerate(["a", "b", "c"]):
        np.testing.assert_array_equal(ds.client(i)[0], X[clients == name])


def test_sparse_and_uint8_storage():
    X, y = labelled(n=60, k=2)
    ds = partition(sp.csr_matrix(np.where(X > 1, X, 0)), y, 3, seed=0)
    assert ds.is_sparse and ds.X.format == "csr" and ds.dtype == np.float64
    pixels = np.random.default_rng(0).integers(0, 256, (60, 4)).astype(np.uint8)
    ds = partition(pixels, y, 3, scale=1 / 255, seed=0)
    assert ds.X.dtype == np.uint8 and ds.dtype == np.float32
    assert ds.features().max() <= 1.0 and ds.features().dtype == np.float32
    ds = partition(X, y, 3, dtype="float32", seed=0)
    assert ds.X.dtype == np.float32


@pytest.mark.parametrize("make", [
    lambda X, y, **options: partition(X, y, 3, **options),
    lambda X, y, **options: from_client_ids(X, y, np.arange(len(y)) % 3, **options),
], ids=["partition", "from_client_ids"])
def test_a_test_split_unlike_uint8_pixels_names_x_test(make):
    # Prepare: uint8 training pixels kept raw
    y = np.arange(60) % 3
    pixels = np.random.default_rng(0).integers(0, 256, (60, 4)).astype(np.uint8)
    # Execute / Assert: raw test pixels of another integer type are stored as uint8
    ds = make(pixels, y, test=(pixels[:10].astype(np.int64), y[:10]), scale=1 / 255)
    assert ds.X.dtype == ds.X_test.dtype == np.uint8
    # test pixels already divided by 255, or sparse, are refused naming X_test, not a dtype never passed
    for X_test in (pixels[:10] / 255, sp.csr_matrix(pixels[:10])):
        with pytest.raises(ValueError, match=r"^X_test must be stored like X \(dense uint8 pixels 0\.\.255\); "
                                             "scale both the same way"):
            make(pixels, y, test=(X_test, y[:10]))


@pytest.mark.parametrize("bad, match", [
    (lambda X, y: partition(np.where(np.arange(X.size).reshape(X.shape) == 7, np.nan, X), y, 3), "X contains NaN"),
    (lambda X, y: partition(X, np.where(np.arange(len(y)) == 3, np.inf, y + 0.5), 3), "y contains NaN or inf"),
    (lambda X, y: partition(X, y[:-1], 3), "y has 59 entries but X has 60 rows"),
    (lambda X, y: partition(X, y, 61), "n_clients=61 is more than the 60"),
    (lambda X, y: partition(X, y, 0), "n_clients must be an integer >= 1"),
    (lambda X, y: partition(X, y, 2.5), "n_clients must be an integer >= 1, got 2.5"),
    (lambda X, y: partition(X, y, 3, "random"), "scheme='random' is unknown"),
    (lambda X, y: partition(X, y + 0.5, 3, "dirichlet"), "needs class labels"),
    (lambda X, y: partition(X, y, 3, "dirichlet", alpha=-1), "alpha must be"),
    (lambda X, y: partition(X, y, 30, "dirichlet", alpha=1e-3, min_samples=2), "no Dirichlet"),
    (lambda X, y: partition(X, y, 8, "dirichlet", alpha=1e-2, min_samples=-1, seed=0),
     "min_samples must be an integer >= 1, got -1"),
    (lambda X, y: partition(X, y, 3, "dirichlet", min_samples=0), "min_samples must be an integer >= 1, got 0"),
    (lambda X, y: partition(X, y, 3, "shards", shards_per_client=40),
     "shards_per_client=40 needs 120 shards .* use at most 1 clients"),
    (lambda X, y: partition(X, y, 3, "shards", shards_per_client=0), "shards_per_client must be an integer >= 1"),
    (lambda X, y: partition(X, y, 3, test_size=1.5), "test_size must be"),
    (lambda X, y: partition(X, y, 3, test_size="half"), r"test_size must be in \(0, 1\), got 'half'"),
    (lambda X, y: partition(X[:, 0], y, 3), "X must be a 2-D array"),
    (lambda X, y: partition(X, y, 3, dtype="uint8"), "dtype='uint8' needs integer"),
    (lambda X, y: partition(X, y, 3, dtype="int16"), "not a storage dtype"),
    (lambda X, y: FederatedDataset(X, y, [0, 30, 30, 60], classes=np.arange(10)), "client 1 is empty"),
    (lambda X, y: FederatedDataset(X, y, [0, 30, 50], classes=np.arange(10)), "end at n_samples=60"),
    (lambda X, y: FederatedDataset(X, y + 20, [0, 60], classes=np.arange(10)), "class codes 0..9"),
    (lambda X, y: FederatedDataset(X, y, [0, 60], X_test=X[:, :2], y_test=y, classes=np.arange(10)), "X_test has 2"),
    (lambda X, y: FederatedDataset(X, y, [0, 60], scale=0), "scale must be"),
    (lambda X, y: from_client_ids(X, y, [0, 1]), "one client id per sample"),
    (lambda X, y: from_client_ids(X, y, np.r_[np.arange(59) % 3, np.nan]), r"no id for sample 59 \(nan\)"),
    (lambda X, y: from_client_ids(X, y, [None] + [1] * 59), r"no id for sample 0 \(None\)"),
    (lambda X, y: from_client_ids(X, y, np.array([1, "a"] * 30, object)), "one sortable kind"),
    (lambda X, y: partition(sp.csr_matrix(X * 1j), y, 3), "X must hold real numbers, got dtype complex128"),
    (lambda X, y: partition(X, np.array(["a", None] * 30, object), 3), "class labels y mix the types NoneType, str"),
])
def test_bad_input_names_the_argument(bad, match):
    X, y = labelled(n=60)
    with pytest.raises(ValueError, match=match):
        bad(X, y)


def test_repr_and_client_access():
    ds = load_digits(n_clients=5)
    assert "5 clients" in repr(ds) and "10 classes" in repr(ds)
    X0, y0 = ds.client(0)
    assert X0.shape[0] == ds.client_sizes[0] == len(y0)
    np.testing.assert_array_equal(ds.owner[ds.offsets[2]:ds.offsets[3]], 2)
    with pytest.raises(IndexError):
        ds.client(5)
