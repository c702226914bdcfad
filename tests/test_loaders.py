"""Loaders and generators: IDX and svmlight files written here come back intact; generators keep their promises."""

import gzip
import re
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import dump_svmlight_file
from threadpoolctl import threadpool_limits

from fedopt.datasets import (
    load_a9a,
    load_digits,
    load_mnist,
    load_svmlight,
    loaders,
    make_classification,
    make_fedprox_synthetic,
    make_mnist_like,
    make_sparse_regression,
)
from fedopt.datasets.loaders import MNIST_FILES, read_idx, write_idx


def sorted_rows(X):
    """The rows of a dense or sparse matrix in lexicographic order, to compare data up to the partition's shuffle."""
    X = X.toarray() if sp.issparse(X) else np.asarray(X)
    return X[np.lexsort(X.T[::-1])]


def write_mnist(folder, suffix="", n_train=40, n_test=12, seed=0):
    """Four small MNIST-format files in ``folder``: random 28x28 images, labels 0..9 in turn."""
    rng = np.random.default_rng(seed)
    arrays = {
        "train_images": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train_labels": (np.arange(n_train) % 10).astype(np.uint8),
        "test_images": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "test_labels": rng.integers(0, 10, n_test).astype(np.uint8),
    }
    folder.mkdir(parents=True, exist_ok=True)
    for role, array in arrays.items():
        write_idx(folder / (MNIST_FILES[role] + suffix), array)
    return arrays


# ------------------------------------------------------------------------------------------ IDX
@pytest.mark.parametrize("suffix", ["", ".gz"])
@pytest.mark.parametrize("dtype, shape", [("uint8", (5, 28, 28)), ("int8", (7,)), ("int16", (3, 4)),
                                          ("int32", (2, 3, 4)), ("float32", (6,)), ("float64", (2, 2, 2, 2))])
def test_idx_round_trip(tmp_path, suffix, dtype, shape):
    # Prepare
    rng = np.random.default_rng(0)
    array = (rng.normal(size=shape) * 100).astype(dtype)
    # Execute
    back = read_idx(write_idx(tmp_path / f"a.idx{suffix}", array))
    # Assert
    assert back.dtype == np.dtype(dtype) and back.shape == shape
    np.testing.assert_array_equal(back, array)
    assert back.flags.writeable


def test_idx_layout_is_big_endian_with_magic_number(tmp_path):
    write_idx(tmp_path / "labels", np.array([1, 2, 3], dtype=np.int32))
    write_idx(tmp_path / "labels.gz", np.array([1, 2, 3], dtype=np.int32))
    raw = (tmp_path / "labels").read_bytes()
    assert raw[:4] == bytes([0, 0, 0x0C, 1]) and raw[4:8] == (3).to_bytes(4, "big")
    assert raw[8:] == b"".join(i.to_bytes(4, "big") for i in (1, 2, 3))
    assert gzip.decompress((tmp_path / "labels.gz").read_bytes()) == raw


def good_idx():
    return bytes([0, 0, 0x08, 2]) + (2).to_bytes(4, "big") + (3).to_bytes(4, "big") + bytes(range(6))


@pytest.mark.parametrize("raw, match", [
    (b"", "magic number"),
    (b"\x00\x00", "magic number"),
    (b"\x01\x00\x08\x01" + bytes(8), "magic number"),  # first bytes must be zero
    (b"\x00\x00\x07\x01" + bytes(8), "magic number"),  # unknown element type
    (b"\x00\x00\x08\x00", "magic number"),  # no dimensions
    (bytes([0, 0, 0x08, 3]) + bytes(4), "truncated"),  # header shorter than 3 dimensions
    (good_idx()[:-1], "truncated"),
    (good_idx() + b"\x00", "longer than its header"),
    (b"\x1f\x8b\x08\x00garbage", "gzip"),
])
def test_malformed_idx_raises_a_clear_error(tmp_path, raw, match):
    (tmp_path / "bad").write_bytes(raw)
    with pytest.raises(ValueError, match=match):
        read_idx(tmp_path / "bad")


def test_write_idx_refuses_what_idx_cannot_store(tmp_path):
    with pytest.raises(ValueError, match="dtype int64"):
        write_idx(tmp_path / "x", np.arange(3))
    assert not list(tmp_path.iterdir())  # nothing half-written


# ---------------------------------------------------------------------------------------- MNIST
@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_load_mnist_reads_the_idx_files(tmp_path, suffix):
    # Prepare
    arrays = write_mnist(tmp_path, suffix)
    # Execute
    ds = load_mnist(tmp_path, n_clients=4, partition="iid", seed=1)
    # Assert: raw pixels with the 1/255 scale, the official test set kept as it is
    assert ds.X.dtype == np.uint8 and ds.scale == pytest.approx(1 / 255) and ds.n_features == 784
    assert ds.n_clients == 4 and ds.n_samples == 40
    np.testing.assert_array_equal(ds.classes, np.arange(10))
    np.testing.assert_array_equal(ds.X_test, arrays["test_images"].reshape(12, 784))
    np.testing.assert_array_equal(ds.classes[ds.y_test], arrays["test_labels"])
    # every training image is there once, with its label
    pooled = np.column_stack([arrays["train_images"].reshape(40, 784), arrays["train_labels"]])
    placed = np.column_stack([ds.X, ds.classes[ds.y]])
    np.testing.assert_array_equal(sorted_rows(placed), sorted_rows(pooled))


def test_load_mnist_defaults_to_sorted_blocks_and_passes_partition_options(tmp_path):
    write_mnist(tmp_path)
    ds = load_mnist(tmp_path)  # sorted, 10 clients, 4 images of each digit
    assert ((ds.label_histogram() > 0).sum(axis=1) == 1).all()
    shards = load_mnist(tmp_path, n_clients=5, partition="shards", shards_per_client=2, name="tiny")
    assert shards.name == "tiny" and shards.n_clients == 5


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_load_mnist_float_storage_is_scaled_pixels(tmp_path, dtype):
    arrays = write_mnist(tmp_path)
    ds = load_mnist(tmp_path, dtype=dtype)
    assert ds.X.dtype == np.dtype(dtype) and ds.X_test.dtype == np.dtype(dtype) and ds.scale == 1.0
    np.testing.assert_allclose(ds.X_test, arrays["test_images"].reshape(12, -1) / 255.0, rtol=1e-6)
    uint8 = load_mnist(tmp_path)
    np.testing.assert_allclose(ds.features(), uint8.features(), rtol=1e-6)


def test_load_mnist_rejects_a_non_pixel_dtype(tmp_path):
    write_mnist(tmp_path)
    with pytest.raises(ValueError, match=r"dtype=int16 .*'uint8', 'float32' or 'float64'"):
        load_mnist(tmp_path, dtype="int16")


def test_load_mnist_rejects_files_that_do_not_fit(tmp_path):
    arrays = write_mnist(tmp_path)
    write_idx(tmp_path / MNIST_FILES["train_labels"], arrays["train_labels"][:-1])
    with pytest.raises(ValueError, match="40 images but 39 labels"):
        load_mnist(tmp_path)
    write_idx(tmp_path / MNIST_FILES["train_labels"], arrays["train_labels"].astype(np.int32))
    with pytest.raises(ValueError, match="uint8 labels"):
        load_mnist(tmp_path)


def test_load_mnist_refuses_test_size_as_the_test_images_are_the_test_split(tmp_path):
    write_mnist(tmp_path)
    with pytest.raises(ValueError, match=r"^test_size does not apply to MNIST: its official test images "
                                         r"\(t10k-images-idx3-ubyte\) are the test split; drop test_size"):
        load_mnist(tmp_path, n_clients=5, test_size=0.1)
    assert load_mnist(tmp_path, n_clients=5, test_size=None).X_test.shape == (12, 784)


def test_missing_mnist_files_say_where_and_mention_download(tmp_path):
    write_mnist(tmp_path)
    (tmp_path / MNIST_FILES["test_labels"]).unlink()
    with pytest.raises(FileNotFoundError, match="download=True") as error:
        load_mnist(tmp_path)
    assert str(tmp_path) in str(error.value) and MNIST_FILES["test_labels"] in str(error.value)
    assert MNIST_FILES["train_images"] not in str(error.value)


def test_mnist_cache_honours_fedopt_data_and_cache_dir(tmp_path, monkeypatch):
    # Prepare: files in $FEDOPT_DATA/mnist
    monkeypatch.setenv("FEDOPT_DATA", str(tmp_path / "env"))
    arrays = write_mnist(tmp_path / "env" / "mnist", ".gz")
    # Execute / Assert: path=None finds them there
    ds = load_mnist(n_clients=2)
    np.testing.assert_array_equal(ds.X_test, arrays["test_images"].reshape(12, -1))
    # an explicit cache_dir wins over the environment
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "explicit" / "mnist")):
        load_mnist(cache_dir=tmp_path / "explicit")
    monkeypatch.delenv("FEDOPT_DATA")
    assert loaders.data_home() == Path("~/.cache/fedopt").expanduser()


# ------------------------------------------------------------------------------------- svmlight
def a9a_like(n, n_features, rng, last_column=True):
    """Binary sparse features and -1/+1 labels, like LIBSVM's a9a."""
    X = (rng.random((n, n_features)) < 0.3).astype(np.float64)
    X[:, -1] = 1.0 if last_column else 0.0
    y = np.where(rng.random(n) < 0.4, 1.0, -1.0)
    return sp.csr_matrix(X), y


def test_svmlight_round_trip_with_test_file(tmp_path):
    # Prepare: the test file never uses the last feature, as a9a.t lacks a9a's 123rd
    rng = np.random.default_rng(0)
    X, y = a9a_like(120, 15, rng)
    X_test, y_test = a9a_like(30, 15, rng, last_column=False)
    dump_svmlight_file(X, y, str(tmp_path / "a9a"), zero_based=False)
    dump_svmlight_file(X_test, y_test, str(tmp_path / "a9a.t"), zero_based=False)
    # Execute
    ds = load_svmlight(tmp_path / "a9a", n_clients=4, test_path=tmp_path / "a9a.t", seed=0)
    # Assert
    assert ds.is_sparse and sp.issparse(ds.X_test) and ds.X.format == "csr"
    assert ds.n_features == 15 and ds.X_test.shape == (30, 15) and ds.n_clients == 4
    np.testing.assert_array_equal(ds.classes, [-1.0, 1.0])
    np.testing.assert_array_equal(ds.X_test.toarray(), X_test.toarray())
    np.testing.assert_array_equal(ds.classes[ds.y_test], y_test)
    pooled = np.column_stack([X.toarray(), y])
    placed = np.column_stack([ds.X.toarray(), ds.classes[ds.y]])
    np.testing.assert_array_equal(sorted_rows(placed), sorted_rows(pooled))
    assert ds.name == "a9a/iid/4"


def test_svmlight_keeps_real_values_and_regression_targets(tmp_path):
    rng = np.random.default_rng(1)
    X = sp.random(50, 8, density=0.4, format="csr", random_state=1)
    X.data = rng.normal(size=X.nnz)
    y = rng.normal(size=50)
    dump_svmlight_file(X, y, str(tmp_path / "reg.svm"), zero_based=False)
    ds = load_svmlight(tmp_path / "reg.svm", n_clients=5, partition="sorted", n_features=10, dense=True)
    assert ds.classes is None and isinstance(ds.X, np.ndarray) and ds.n_features == 10
    assert (np.diff(ds.y) >= 0).all()  # sorted by target value
    pooled = np.column_stack([np.pad(X.toarray(), ((0, 0), (0, 2))), y])
    np.testing.assert_allclose(sorted_rows(np.column_stack([ds.X, ds.y])), sorted_rows(pooled), rtol=1e-15)


SVMLIGHT_GOOD = "+1 1:1 5:1\n-1 2:1\n"


@pytest.mark.parametrize(
    "content, reason",
    [
        ("+1 1:1 5:1\n-1 2:1 200:1\n", "n_features was set to 123, but input file contains 200 features"),
        ("+1 0:1 5:1\n-1 2:1\n", "Invalid index 0"),
        ("+1 1:1 5:1\n-1 2:1 3:x\n", "could not convert string to float: b'x'"),
        ("\x89PNG\r\n\x1a\n binary junk \x00\x01\x02", "could not convert string to float"),
    ],
    ids=["feature_beyond_123", "index_0", "bad_value", "binary"],
)
@pytest.mark.parametrize("bad", ["a9a", "a9a.t"])
def test_a9a_names_the_file_that_does_not_parse(tmp_path, bad, content, reason):
    """scikit-learn reads both files at once and its errors name neither."""
    for name in ("a9a", "a9a.t"):
        tmp_path.joinpath(name).write_text(content if name == bad else SVMLIGHT_GOOD)
    message = rf"^{re.escape(str(tmp_path / bad))} is not a valid LIBSVM/svmlight file \({re.escape(reason)}"
    with pytest.raises(ValueError, match=message) as error:
        load_a9a(tmp_path, n_clients=1)
    assert isinstance(error.value.__cause__, ValueError)  # scikit-learn's own error


def test_svmlight_files_that_only_fail_together_are_both_named(tmp_path):
    # An index 0 in the training file makes both files 0-based, and the test file's index 3 then
    # needs a fourth feature; each file alone fits n_features=3.
    train, test = tmp_path / "train.svm", tmp_path / "test.svm"
    train.write_text("+1 0:1\n-1 1:1\n")
    test.write_text("+1 3:1\n-1 1:1\n")
    with pytest.raises(ValueError, match=rf"^{re.escape(f'{train} and {test}')} are not valid .* together \("
                                         r"n_features was set to 3"):
        load_svmlight(train, n_clients=1, test_path=test, n_features=3)


@pytest.mark.parametrize("empty", ["train.svm", "test.svm"])
def test_an_empty_svmlight_file_is_named(tmp_path, empty):
    for name in ("train.svm", "test.svm"):
        tmp_path.joinpath(name).write_text("" if name == empty else SVMLIGHT_GOOD)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(tmp_path / empty))} holds no samples"):
        load_svmlight(tmp_path / "train.svm", n_clients=1, test_path=tmp_path / "test.svm")


def test_a9a_and_a_test_file_refuse_test_size(tmp_path):
    # Prepare
    train, test = tmp_path / "a9a", tmp_path / "a9a.t"
    train.write_text(SVMLIGHT_GOOD * 2)
    test.write_text(SVMLIGHT_GOOD)
    # Execute / Assert: the test file is the test split
    with pytest.raises(ValueError, match=r"^test_size does not apply to a9a: a9a\.t is the test split; drop test_size"):
        load_a9a(tmp_path, n_clients=1, test_size=0.5)
    with pytest.raises(ValueError, match=rf"^test_size does not apply to {re.escape(str(train))} with test_path: "
                                         rf"{re.escape(str(test))} is the test split; drop test_size"):
        load_svmlight(train, n_clients=1, test_path=test, test_size=0.5)
    # without a test file, test_size holds out part of the training file
    ds = load_svmlight(train, n_clients=1, test_size=0.5, seed=0)
    assert ds.n_samples == 2 and ds.X_test.shape[0] == 2


def test_a9a_with_one_label_is_not_a9a(tmp_path):
    # The test file's -1 is no class of the training file: the partition would refuse it first.
    tmp_path.joinpath("a9a").write_text("+1 1:1 5:1\n+1 2:1\n")
    tmp_path.joinpath("a9a.t").write_text(SVMLIGHT_GOOD)
    with pytest.raises(ValueError, match=r"a9a holds 1 distinct labels, a9a has two \(-1/\+1\); the file is not a9a"):
        load_a9a(tmp_path, n_clients=1)


# ----------------------------------------------------------------------------------- generators
GENERATORS = {
    "sparse_regression": lambda seed: make_sparse_regression(200, 30, 4, n_clients=5, seed=seed, test_size=0.2),
    "classification": lambda seed: make_classification(300, 10, 3, n_clients=4, seed=seed),
    "fedprox": lambda seed: make_fedprox_synthetic(n_clients=8, seed=seed),
    "mnist_like": lambda seed: make_mnist_like(400, n_clients=5, seed=seed),
}
SHAPES = {"sparse_regression": (160, 30, 40), "classification": (240, 10, 60), "mnist_like": (320, 784, 80)}


@pytest.mark.parametrize("name", GENERATORS)
def test_generators_are_seeded_and_shaped(name):
    a, b, c = GENERATORS[name](3), GENERATORS[name](3), GENERATORS[name](4)
    for field in ("X", "y", "offsets", "X_test", "y_test"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert not np.array_equal(a.y, c.y) or not np.array_equal(a.X, c.X)
    assert a.X_test is not None and a.X_test.shape[1] == a.n_features
    if name in SHAPES:
        assert (a.n_samples, a.n_features, len(a.y_test)) == SHAPES[name]


def test_every_loader_takes_a_name():
    assert load_digits(n_clients=2, name="mine").name == "mine"
    assert make_mnist_like(200, n_clients=2, name="mine").name == "mine"


def test_sparse_regression_has_the_promised_support():
    ds = make_sparse_regression(400, 50, 5, noise=0.1, seed=1)
    coef, support = ds.info["coef"], ds.info["support"]
    assert len(support) == 5 and (np.diff(support) > 0).all()
    np.testing.assert_array_equal(np.flatnonzero(coef), support)
    assert np.abs(coef[support]).min() >= 1.0 and np.abs(coef).max() <= 2.0
    # the targets are the linear model plus noise of the stated size
    residual = ds.y - ds.X @ coef
    assert 0.08 < residual.std() < 0.12


def test_lasso_recovers_the_support_and_least_squares_the_coefficients():
    from sklearn.linear_model import Lasso

    ds = make_sparse_regression(400, 50, 5, noise=0.1, seed=2, n_clients=8, partition="sorted")
    lasso = Lasso(alpha=0.1).fit(ds.X, ds.y)
    np.testing.assert_array_equal(np.flatnonzero(lasso.coef_), ds.info["support"])
    least_squares = np.linalg.lstsq(ds.X, ds.y, rcond=None)[0]
    assert np.abs(least_squares - ds.info["coef"]).max() < 0.05


def test_sparse_regression_rejects_bad_arguments():
    with pytest.raises(ValueError, match="n_informative=20 is more than n_features=10"):
        make_sparse_regression(n_features=10, n_informative=20)
    with pytest.raises(ValueError, match="noise"):
        make_sparse_regression(noise=-1)


def test_make_classification_routes_options():
    ds = make_classification(500, 12, n_classes=4, n_clients=5, class_sep=3.0, alpha=0.05, seed=0)
    assert ds.n_classes == 4 and ds.n_features == 12 and ds.n_clients == 5
    assert ds.n_samples + len(ds.y_test) == 500 and len(ds.y_test) == 100
    skewed = (ds.label_histogram() > 0).sum(axis=1).mean()
    even = make_classification(500, 12, n_classes=4, n_clients=5, alpha=100.0, seed=0)
    assert skewed < (even.label_histogram() > 0).sum(axis=1).mean() == 4
    with pytest.raises(ValueError, match=r"unknown option.*n_informatve"):
        make_classification(n_informatve=3)
    with pytest.raises(ValueError, match="n_classes must be an integer >= 2, got 1"):  # one class made a data set
        make_classification(n_classes=1)


def label_skew(ds):
    """Mean total-variation distance between each client's label distribution and the pooled one."""
    counts = ds.label_histogram().astype(float)
    local = counts / counts.sum(axis=1, keepdims=True)
    return 0.5 * np.abs(local - counts.sum(axis=0) / counts.sum()).sum(axis=1).mean()


def feature_mean_spread(ds):
    """Spread across clients of each client's mean feature value."""
    return np.std([ds.client(i)[0].mean() for i in range(ds.n_clients)])


def test_fedprox_synthetic_sizes_labels_and_test_split():
    ds = make_fedprox_synthetic(n_clients=30, seed=0)
    sizes = ds.client_sizes
    assert ds.n_clients == 30 and ds.n_features == 60
    np.testing.assert_array_equal(ds.classes, np.arange(10))
    assert sizes.min() >= 40 and sizes.max() <= 2000 * 0.8 + 1  # 50..2000 samples, a fifth held out
    assert sizes.max() > 4 * sizes.min()  # power-law sizes, not equal ones
    assert ds.y.min() >= 0 and ds.y.max() < 10 and ds.y_test.min() >= 0 and ds.y_test.max() < 10
    assert abs(len(ds.y_test) / (len(ds.y_test) + ds.n_samples) - 0.2) < 0.01
    assert ds.info["W"].shape == (30, 10, 60) and ds.info["b"].shape == (30, 10)
    # the labels are the argmax of each client's own linear model
    W, b = ds.info["W"], ds.info["b"]
    for k in (0, 7):
        X_k, y_k = ds.client(k)
        np.testing.assert_array_equal(np.argmax(X_k @ W[k].T + b[k], axis=1), y_k)


def test_fedprox_beta_spreads_the_clients_features_and_iid_removes_the_skew():
    calm, spread = make_fedprox_synthetic(0.0, 0.0, seed=1), make_fedprox_synthetic(0.0, 4.0, seed=1)
    assert feature_mean_spread(spread) > 5 * feature_mean_spread(calm)
    iid = make_fedprox_synthetic(iid=True, seed=1)
    assert (iid.info["W"] == iid.info["W"][0]).all()
    assert label_skew(iid) < 0.25 < 0.6 < label_skew(calm)


def test_fedprox_alpha_moves_the_models_but_not_the_labels():
    # u_k adds the same amount to every logit of a sample, so it cancels in the argmax.
    small, large = make_fedprox_synthetic(0.0, 1.0, seed=3), make_fedprox_synthetic(5.0, 1.0, seed=3)
    assert np.abs(large.info["W"].mean(axis=(1, 2))).mean() > 1.0 > np.abs(small.info["W"].mean(axis=(1, 2))).mean()
    np.testing.assert_array_equal(small.X, large.X)
    np.testing.assert_array_equal(small.y, large.y)


def test_fedprox_rejects_bad_arguments():
    with pytest.raises(ValueError, match="alpha must be a finite variance"):
        make_fedprox_synthetic(alpha=-1.0)
    with pytest.raises(ValueError, match="max_samples must be an integer >= 50"):
        make_fedprox_synthetic(max_samples=10)


def test_mnist_like_is_uint8_pixels_a_linear_model_learns():
    from sklearn.linear_model import LogisticRegression

    ds = make_mnist_like(1500, n_clients=10, seed=0)
    assert ds.X.dtype == np.uint8 and ds.n_features == 784 and ds.scale == pytest.approx(1 / 255)
    assert ds.n_classes == 10 and (np.bincount(ds.y_test) == 30).all()
    assert 0.4 < (ds.X == 0).mean() < 0.9 and ds.X.max() == 255  # dark background, saturated strokes
    assert ((ds.label_histogram() > 0).sum(axis=1) == 1).all()  # sorted by default
    with threadpool_limits(1):  # BLAS threads only add overhead at this size
        model = LogisticRegression(C=0.1, max_iter=200).fit(ds.features(), ds.y)
    assert model.score(ds.features(ds.X_test), ds.y_test) > 0.75  # chance is 0.1; about 0.9 in fact


def test_mnist_like_float_storage():
    raw, scaled = make_mnist_like(200, seed=5), make_mnist_like(200, seed=5, dtype="float32")
    assert scaled.X.dtype == np.float32 and scaled.scale == 1.0 and scaled.X.max() <= 1.0
    np.testing.assert_allclose(scaled.features(), raw.features(), rtol=1e-6)
