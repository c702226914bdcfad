"""The papers' data sets offline: Fashion-MNIST and a9a from local files, the catalog of what is cached."""

import bz2
import gzip
import io

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import dump_svmlight_file
from test_loaders import write_mnist

from fedopt.datasets import PAPER_DATA, catalog, load_a9a, load_fashion_mnist, load_mnist, loaders
from fedopt.datasets.loaders import A9A_FILES, MNIST_FILES
from fedopt.problems import Logistic


def write_fashion(folder, suffix="", n_train=20, n_test=10, seed=0):
    """Four small Fashion-MNIST files in ``folder`` (the MNIST format): random 28x28 images."""
    return write_mnist(folder, suffix, n_train=n_train, n_test=n_test, seed=seed)


def write_a9a(folder, n_train=12, n_test=6, seed=0, suffix=""):
    """Tiny a9a-like files: a few of the 123 binary features, labels -1/+1; the test file lacks feature 123."""
    rng = np.random.default_rng(seed)
    X = np.zeros((n_train, 123))
    X[:, [0, 4, 50, 122]] = rng.random((n_train, 4)) < 0.5
    X[0, 122] = 1.0
    y = np.where(np.arange(n_train) % 3 == 0, 1, -1)
    X_test = np.zeros((n_test, 123))
    X_test[:, [1, 4, 60]] = rng.random((n_test, 3)) < 0.5
    y_test = np.where(np.arange(n_test) % 2 == 0, 1, -1)
    folder.mkdir(parents=True, exist_ok=True)
    compress = {"": bytes, ".gz": gzip.compress, ".bz2": bz2.compress}[suffix]
    for name, features, labels in (("a9a", X, y), ("a9a.t", X_test[:, :122], y_test)):
        text = io.BytesIO()
        dump_svmlight_file(sp.csr_matrix(features), labels, text, zero_based=False)
        (folder / (name + suffix)).write_bytes(compress(text.getvalue()))
    return X, y, X_test, y_test


def fake_openml(pixels, labels, calls):
    """A stand-in for ``sklearn.datasets.fetch_openml`` that records its calls in ``calls``."""
    from sklearn.utils import Bunch

    def fetch_openml(name, **kwargs):
        calls.append((name, kwargs))
        return Bunch(data=pixels, target=labels)

    return fetch_openml


# --------------------------------------------------------------------------------- Fashion-MNIST
@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_load_fashion_mnist_reads_the_idx_files(tmp_path, suffix):
    arrays = write_fashion(tmp_path, suffix)
    ds = load_fashion_mnist(tmp_path, n_clients=5)
    assert ds.X.dtype == np.uint8 and ds.scale == pytest.approx(1 / 255) and ds.X.shape == (20, 784)
    assert ds.n_clients == 5 and ds.name == "fashion_mnist/sorted/5"
    np.testing.assert_array_equal(ds.classes, np.arange(10))
    np.testing.assert_array_equal(ds.X_test, arrays["test_images"].reshape(10, 784))
    np.testing.assert_array_equal(ds.classes[ds.y_test], arrays["test_labels"])
    assert ((ds.label_histogram() > 0).sum(axis=1) <= 2).all()  # sorted blocks by default
    scaled = load_fashion_mnist(tmp_path, n_clients=2, partition="iid", dtype="float32", name="tiny")
    assert scaled.name == "tiny" and scaled.X.dtype == np.float32 and scaled.X.max() <= 1.0


def test_fashion_mnist_and_mnist_keep_to_their_own_folders(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDOPT_DATA", str(tmp_path))
    arrays = write_fashion(tmp_path / "fashion-mnist", ".gz")
    ds = load_fashion_mnist(n_clients=2)
    np.testing.assert_array_equal(ds.X_test, arrays["test_images"].reshape(10, -1))
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "mnist")):
        load_mnist()


def test_missing_fashion_mnist_files_name_the_folder_files_and_ways_to_get_them(tmp_path):
    write_fashion(tmp_path)
    (tmp_path / MNIST_FILES["train_labels"]).unlink()
    with pytest.raises(FileNotFoundError) as error:
        load_fashion_mnist(tmp_path)
    message = str(error.value)
    assert message.startswith("Fashion-MNIST files") and str(tmp_path) in message
    assert MNIST_FILES["train_labels"] in message and MNIST_FILES["train_images"] not in message
    for way in ("path=", "download=True", "fedopt data download fashion_mnist"):
        assert way in message
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "empty" / "fashion-mnist")):
        load_fashion_mnist(cache_dir=tmp_path / "empty")


@pytest.mark.parametrize("load, openml_name, folder, n_train, via_env", [
    (load_mnist, "mnist_784", "mnist", 60, True), (load_fashion_mnist, "Fashion-MNIST", "fashion-mnist", 20, False)])
def test_download_saves_idx_files_once_then_works_offline(load, openml_name, folder, n_train, via_env, tmp_path,
                                                          monkeypatch):
    # Prepare: a stand-in for OpenML's data set (float pixels, string labels; train rows first), the cache
    # named by FEDOPT_DATA or by cache_dir
    import sklearn.datasets

    rng = np.random.default_rng(0)
    n = n_train + 10
    pixels = rng.integers(0, 256, (n, 784)).astype(np.float64)
    labels = np.array([str(i % 10) for i in range(n)], dtype=object)
    calls = []
    monkeypatch.setattr(sklearn.datasets, "fetch_openml", fake_openml(pixels, labels, calls))
    monkeypatch.setattr(loaders, "_MNIST_TRAIN_SIZE", n_train)
    if via_env:
        monkeypatch.setenv("FEDOPT_DATA", str(tmp_path))
    where = {} if via_env else {"cache_dir": tmp_path}
    # Execute
    ds = load(n_clients=2, download=True, **where)
    # Assert: fetched once by its OpenML name into the cache, saved as gzipped IDX, then read without fetching
    assert [name for name, _ in calls] == [openml_name] and calls[0][1]["version"] == 1
    assert calls[0][1]["data_home"] == str(tmp_path)
    saved = sorted(p.name for p in (tmp_path / folder).iterdir())
    assert saved == sorted(f + ".gz" for f in MNIST_FILES.values())
    assert ds.n_samples == n_train and ds.X_test.shape == (10, 784)
    np.testing.assert_array_equal(ds.X_test, pixels[n_train:].astype(np.uint8))
    np.testing.assert_array_equal(ds.classes[ds.y_test], np.arange(n_train, n) % 10)
    offline, again = load(n_clients=2, **where), load(n_clients=2, download=True, **where)
    assert len(calls) == 1
    np.testing.assert_array_equal(offline.X, ds.X)
    np.testing.assert_array_equal(again.X, ds.X)


def test_download_refuses_what_is_not_28x28_images(tmp_path, monkeypatch):
    import sklearn.datasets

    monkeypatch.setattr(sklearn.datasets, "fetch_openml", fake_openml(np.zeros((30, 100)), np.zeros(30), []))
    monkeypatch.setattr(loaders, "_MNIST_TRAIN_SIZE", 20)
    with pytest.raises(ValueError, match="28x28"):
        load_fashion_mnist(cache_dir=tmp_path, download=True)
    assert not (tmp_path / "fashion-mnist").exists()


def test_a_download_without_network_says_how_to_place_the_files_by_hand(tmp_path, monkeypatch):
    import urllib.error

    import sklearn.datasets

    def offline(name, **kwargs):
        raise urllib.error.URLError("[Errno -2] Name or service not known")

    monkeypatch.setattr(sklearn.datasets, "fetch_openml", offline)
    with pytest.raises(OSError, match=f"could not download MNIST from OpenML .* copy the four IDX files into "
                                      f"{tmp_path / 'mnist'} by hand"):
        load_mnist(cache_dir=tmp_path, download=True)


# ------------------------------------------------------------------------------------------- a9a
@pytest.mark.parametrize("suffix", ["", ".gz", ".bz2"])
def test_load_a9a_has_123_features_and_two_classes(tmp_path, suffix):
    X, y, X_test, y_test = write_a9a(tmp_path, suffix=suffix)
    ds = load_a9a(tmp_path, n_clients=3)
    assert isinstance(ds.X, np.ndarray) and ds.X.shape == (12, 123) and ds.X_test.shape == (6, 123)
    assert ds.n_clients == 3 and ds.name == "a9a/iid/3"
    np.testing.assert_array_equal(ds.classes, [-1, 1])  # codes 0/1, +1 the positive class
    assert set(np.unique(ds.y)) == {0, 1} and set(np.unique(ds.y_test)) == {0, 1}
    np.testing.assert_array_equal(ds.X_test, X_test)
    np.testing.assert_array_equal(ds.classes[ds.y_test], y_test)
    pooled, placed = np.column_stack([X, y]), np.column_stack([ds.X, ds.classes[ds.y]])
    np.testing.assert_array_equal(np.unique(placed, axis=0), np.unique(pooled, axis=0))
    assert load_a9a(tmp_path, n_clients=3, dense=False).is_sparse


def test_a9a_builds_a_logistic_problem(tmp_path):
    write_a9a(tmp_path)
    problem = Logistic(load_a9a(tmp_path, n_clients=2), backend="numpy")
    x = np.zeros(problem.n_params)
    assert problem.n_params == 123
    assert problem.loss(x) == pytest.approx(np.log(2))
    assert np.asarray(problem.grad(x)).shape == (123,)


def test_missing_a9a_gives_the_manual_step(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDOPT_DATA", str(tmp_path))
    write_a9a(tmp_path / "elsewhere")
    (tmp_path / "a9a").mkdir()
    (tmp_path / "elsewhere" / "a9a.t").rename(tmp_path / "a9a" / "a9a.t")
    with pytest.raises(FileNotFoundError) as error:
        load_a9a()
    message = str(error.value)
    assert str(tmp_path / "a9a") in message and "a9a.t" not in message.split(";")[0]
    assert "libsvmtools" in message and "path=" in message
    with pytest.raises(FileNotFoundError, match="cannot be downloaded automatically"):
        load_a9a(download=True)
    (tmp_path / "elsewhere" / "a9a").rename(tmp_path / "a9a" / "a9a")
    assert load_a9a(n_clients=2, download=True).n_features == 123  # present: download asks for nothing


def test_a9a_rejects_a_file_with_more_classes(tmp_path):
    tmp_path.joinpath("a9a").write_text("1 1:1\n2 2:1\n3 3:1\n")
    tmp_path.joinpath("a9a.t").write_text("1 1:1\n")
    with pytest.raises(ValueError, match="not a9a"):
        load_a9a(tmp_path, n_clients=1)


# --------------------------------------------------------------------------------------- catalog
def test_catalog_describes_each_paper_data_set():
    assert set(PAPER_DATA) == {"mnist", "fashion_mnist", "a9a"}
    assert PAPER_DATA["fashion_mnist"].loader is load_fashion_mnist and PAPER_DATA["a9a"].files == A9A_FILES
    for entry in PAPER_DATA.values():
        assert entry.description and entry.papers and entry.how_to_get


def test_catalog_folder_and_present_honour_fedopt_data(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDOPT_DATA", str(tmp_path))
    assert catalog.folder("fashion_mnist") == tmp_path / "fashion-mnist"
    assert catalog.folder("a9a", cache_dir=tmp_path / "other") == tmp_path / "other" / "a9a"
    assert not catalog.present("fashion_mnist")
    write_fashion(tmp_path / "fashion-mnist", ".gz")
    write_a9a(tmp_path / "local", suffix=".bz2")
    assert catalog.present("fashion_mnist") and not catalog.present("mnist")
    assert catalog.present("a9a", path=tmp_path / "local") and not catalog.present("a9a")
    (tmp_path / "fashion-mnist" / (MNIST_FILES["test_images"] + ".gz")).write_bytes(b"not read")
    assert catalog.present("fashion_mnist")  # existence only, nothing is read


def test_catalog_status_lists_what_is_missing(tmp_path):
    write_fashion(tmp_path / "fashion-mnist")
    rows = {row["name"]: row for row in catalog.status(cache_dir=tmp_path)}
    assert list(rows) == ["mnist", "fashion_mnist", "a9a"]
    assert rows["fashion_mnist"]["present"] and rows["fashion_mnist"]["missing"] == []
    assert not rows["a9a"]["present"] and rows["a9a"]["missing"] == ["a9a", "a9a.t"]
    assert rows["mnist"]["missing"] == list(MNIST_FILES.values()) and rows["mnist"]["folder"] == tmp_path / "mnist"
    assert "fedopt data download mnist" in rows["mnist"]["how_to_get"]
    assert "libsvmtools" in rows["a9a"]["how_to_get"]
    assert all(row["description"] and row["papers"] for row in rows.values())


def test_catalog_download(tmp_path, monkeypatch):
    import sklearn.datasets

    pixels = np.zeros((25, 784))
    labels = np.array([str(i % 10) for i in range(25)], dtype=object)
    calls = []
    monkeypatch.setattr(sklearn.datasets, "fetch_openml", fake_openml(pixels, labels, calls))
    monkeypatch.setattr(loaders, "_MNIST_TRAIN_SIZE", 20)
    assert catalog.download("mnist", cache_dir=tmp_path) == tmp_path / "mnist"
    assert catalog.download("mnist", cache_dir=tmp_path) == tmp_path / "mnist"  # cached: not fetched again
    assert [name for name, _ in calls] == ["mnist_784"] and catalog.present("mnist", cache_dir=tmp_path)
    assert load_mnist(cache_dir=tmp_path, n_clients=2).X_test.shape == (5, 784)
    with pytest.raises(FileNotFoundError, match=r"cannot be downloaded automatically.*libsvmtools"):
        catalog.download("a9a", cache_dir=tmp_path)
    write_a9a(tmp_path / "a9a")
    assert catalog.download("a9a", cache_dir=tmp_path) == tmp_path / "a9a"


@pytest.mark.parametrize("call", [catalog.folder, catalog.present, catalog.download])
def test_catalog_rejects_unknown_names(call):
    with pytest.raises(ValueError, match="mnist, fashion_mnist, a9a"):
        call("cifar10")


# ------------------------------------------------------------------------------ experiments on it
def test_builtin_experiments_switch_to_the_paper_data_only_when_it_is_present(tmp_path, monkeypatch):
    from fedopt.sweep import load_experiment

    monkeypatch.setenv("FEDOPT_DATA", str(tmp_path))
    exp = load_experiment("fednmap_fig2")
    assert exp.run["dataset"]["name"] == "digits" and "not the paper's: it used mnist" in exp.data
    folder = tmp_path / "mnist"
    folder.mkdir()
    for name in MNIST_FILES.values():
        (folder / name).write_bytes(b"")  # present() only looks for the files
    exp = load_experiment("fednmap_fig2")
    assert exp.run["dataset"]["name"] == "mnist" and exp.data == "mnist (the paper's data)"
    assert exp.run["dataset"]["partition"] == "sorted" and exp.run["dataset"]["n_clients"] == 20
    assert load_experiment("fednmap_fig2", data="embedded").run["dataset"]["name"] == "digits"
    assert load_experiment("fednmap_fig2", {"dataset.name": "digits"}).data.startswith("digits (not the paper's")


def test_every_paper_data_table_gives_valid_runs():
    from fedopt.sweep import load_experiment
    from fedopt.sweep.config import builtin_experiments

    with_paper_data = 0
    for name in builtin_experiments():
        exp = load_experiment(name, data="paper")
        if exp.paper_data:
            with_paper_data += 1
            assert {spec.config["dataset"]["name"] for spec in exp.expand()} == {exp.paper_data["name"]}
    assert with_paper_data >= 12
    a9a = load_experiment("fedcanon_fig1_mcp", data="paper").expand()[0].config
    assert a9a["problem"]["name"] == "logistic"


def test_data_command_lists_and_explains(capsys):
    from fedopt.cli import main

    assert main(["data", "ls"]) == 0
    out = capsys.readouterr().out
    assert "mnist: missing" in out and "fedopt data download mnist" in out and "a9a and a9a.t" in out
    assert main(["data", "download", "a9a"]) == 2
    assert "cannot be downloaded automatically" in capsys.readouterr().err


def test_data_ls_with_a_name_lists_that_data_set_only(capsys):
    from fedopt.cli import main

    assert main(["data", "ls", "a9a"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("a9a: ") and "mnist:" not in out
    assert main(["data", "ls", "mnist2"]) == 2
    assert "no paper data set 'mnist2'" in capsys.readouterr().err
