"""Loaders of real data sets, partitioned among clients. Nothing here touches the network unless asked.

* :func:`load_digits`: scikit-learn's bundled 8x8 digits, the offline default.
* :func:`load_mnist`: MNIST from the four IDX files of LeCun et al. in a local folder or cache;
  ``download=True`` fetches ``mnist_784`` from OpenML once and caches it as IDX files.
* :func:`load_svmlight`: LIBSVM/svmlight files (a9a, w8a, rcv1, ...), kept sparse.

:func:`read_idx` and :func:`write_idx` read and write the IDX format itself.
"""

from __future__ import annotations

import gzip
import importlib.util
import os
from pathlib import Path

import numpy as np

from fedopt.datasets.partition import partition as split_among_clients


def load_digits(n_clients: int = 10, partition: str = "sorted", *, seed=0, test_size: float | None = 0.2,
                dtype=None, **partition_options):
    """scikit-learn's bundled 8x8 digits (1797 samples, 64 features, 10 classes), federated.

    The embedded default data set: it ships with scikit-learn and loads offline. Pixels (0..16)
    are scaled to [0, 1]. ``partition`` names the scheme of :func:`fedopt.datasets.partition`
    (``"sorted"`` by default, the papers' heterogeneity); a stratified ``test_size`` fraction is
    held out first with the same ``seed``.
    """
    X, y = _digits()
    return split_among_clients(X / 16.0, y, n_clients, partition, seed=seed,
                                test_size=test_size, dtype=dtype, name=f"digits/{partition}/{n_clients}",
                                **partition_options)


def _digits() -> tuple[np.ndarray, np.ndarray]:
    """The digits' pixels and labels, read from the CSV file that scikit-learn ships, without
    importing scikit-learn (most of a second, and most of a short run's start-up)."""
    spec = importlib.util.find_spec("sklearn")
    path = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / "digits.csv.gz"
    if not path.is_file():  # a layout this function does not know: let scikit-learn read it
        from sklearn.datasets import load_digits as sklearn_digits

        data = sklearn_digits()
        return data.data, data.target
    table = np.loadtxt(path, delimiter=",")
    return table[:, :-1], table[:, -1].astype(int)


# ------------------------------------------------------------------------------------------ IDX
#: IDX element types: the third byte of the magic number, and the big-endian dtype it names
#: (the format as described on the MNIST page of LeCun, Cortes and Burges).
_IDX_TYPES = {
    0x08: np.dtype("u1"), 0x09: np.dtype("i1"), 0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"), 0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8"),
}
_GZIP_MAGIC = b"\x1f\x8b"


def read_idx(path) -> np.ndarray:
    """The array stored in the IDX file ``path`` (gzip-compressed or not), in native byte order.

    An IDX file is a 4-byte magic number ``0x00 0x00 TT NN`` (``TT`` the element type, ``NN`` the
    number of dimensions), ``NN`` big-endian uint32 dimension sizes, then the elements in C order,
    big-endian. Compression is recognised by the gzip magic bytes, not by the file name.

    Raises
    ------
    ValueError
        When the file is not IDX: a bad magic number, or a size that disagrees with the header.
    """
    path = Path(path)
    raw = path.read_bytes()
    if raw[:2] == _GZIP_MAGIC:
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as err:
            raise ValueError(f"{path} starts like a gzip file but does not decompress ({err}); "
                             "download it again") from err
    if len(raw) < 4 or raw[:2] != b"\0\0" or raw[2] not in _IDX_TYPES or raw[3] == 0:
        raise ValueError(f"{path} is not an IDX file: its magic number is 0x{raw[:4].hex() or 'empty'}, "
                         "expected 0x0000TTNN with element type TT in 08, 09, 0b, 0c, 0d, 0e and NN >= 1 "
                         "dimensions")
    ndim, dtype = raw[3], _IDX_TYPES[raw[2]]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{path} is truncated: {len(raw)} bytes, but its header alone needs {header}")
    shape = tuple(int(n) for n in np.frombuffer(raw, ">u4", count=ndim, offset=4))
    expected = header + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(raw) != expected:
        problem = "truncated" if len(raw) < expected else "longer than its header says"
        raise ValueError(f"{path} is {problem}: the header gives shape {shape} of {dtype.name}, "
                         f"{expected} bytes in all, but the file holds {len(raw)}")
    return np.frombuffer(raw, dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def write_idx(path, array) -> Path:
    """Write ``array`` to ``path`` in the IDX format read by :func:`read_idx`; gzip it when the name ends in ``.gz``.

    The file is written under a temporary name and renamed, so an interrupted write never leaves a
    truncated file behind.
    """
    path = Path(path)
    array = np.asarray(array)
    codes = {dtype.newbyteorder("="): code for code, dtype in _IDX_TYPES.items()}
    code = codes.get(array.dtype.newbyteorder("="))
    if code is None:
        raise ValueError(f"IDX cannot store dtype {array.dtype}; convert the array to uint8, int8, int16, "
                         "int32, float32 or float64 first")
    if not 1 <= array.ndim <= 255:
        raise ValueError(f"IDX stores arrays of 1 to 255 dimensions, got shape {array.shape}")
    payload = (bytes([0, 0, code, array.ndim]) + np.asarray(array.shape, ">u4").tobytes()
               + np.ascontiguousarray(array, _IDX_TYPES[code]).tobytes())
    if path.name.endswith(".gz"):
        payload = gzip.compress(payload, mtime=0)
    partial = path.with_name(path.name + ".part")
    partial.write_bytes(payload)
    os.replace(partial, path)
    return path


# ---------------------------------------------------------------------------------------- MNIST
#: The four files of the official distribution, by role.
MNIST_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
#: OpenML's ``mnist_784`` lists the 60,000 official training images first, then the 10,000 test images.
_MNIST_TRAIN_SIZE = 60_000


def data_home(cache_dir=None) -> Path:
    """The root of fedopt's data cache: ``cache_dir``, else ``$FEDOPT_DATA``, else ``~/.cache/fedopt``."""
    root = cache_dir if cache_dir is not None else os.environ.get("FEDOPT_DATA") or "~/.cache/fedopt"
    return Path(root).expanduser()


def load_mnist(path=None, n_clients: int = 10, partition: str = "sorted", *, seed=0, dtype="uint8",
               cache_dir=None, download: bool = False, **partition_options):
    """MNIST (60,000 training and 10,000 test images of 28x28 pixels, 10 classes), federated.

    Parameters
    ----------
    path : str, Path or None
        Folder holding ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
        ``t10k-images-idx3-ubyte`` and ``t10k-labels-idx1-ubyte``, each optionally gzipped
        (``.gz``), as distributed on the MNIST page. None looks in ``<cache>/mnist``.
    n_clients : int
    partition : str
        The scheme of :func:`fedopt.datasets.partition`; ``"sorted"`` by default, the papers'
        heterogeneity. The training images are partitioned; the official test images become the
        test split, unchanged.
    seed : int, Generator or None
        Seeds the partition.
    dtype : {"uint8", "float32", "float64"}
        ``"uint8"`` keeps the raw pixels with ``scale=1/255`` (the kernels scale them, reading a
        quarter of the bytes of float32); a float dtype stores the pixels divided by 255, with
        scale 1. Either way the features are the 784 pixels in [0, 1], row by row.
    cache_dir : str, Path or None
        The cache root (default ``$FEDOPT_DATA``, else ``~/.cache/fedopt``).
    download : bool
        Only when True and the files are missing: fetch ``mnist_784`` from OpenML through
        :func:`sklearn.datasets.fetch_openml` and save it into the folder as IDX files, so that
        later calls work offline. Off by default: nothing touches the network unless asked.
    **partition_options
        Passed to :func:`fedopt.datasets.partition` (``alpha``, ``shards_per_client``, ...).

    Raises
    ------
    FileNotFoundError
        When files are missing and ``download`` is False; the message says where to put them.
    ValueError
        When a file is not IDX or the files do not fit together.
    """
    store, scale = _pixel_storage(dtype)
    folder = Path(path).expanduser() if path is not None else data_home(cache_dir) / "mnist"
    files, missing = _find_mnist_files(folder)
    if missing:
        if not download:
            raise FileNotFoundError(
                f"MNIST files {', '.join(missing)} (optionally .gz) are missing from {folder}; put the four IDX "
                "files there, pass path= to the folder that holds them, or pass download=True to fetch "
                "them once from OpenML")
        files = _download_mnist(folder, data_home(cache_dir))
    arrays = {role: read_idx(file) for role, file in files.items()}
    X, y, X_test, y_test = _check_mnist(arrays, files)
    partition_options.setdefault("name", f"mnist/{partition}/{n_clients}")
    return split_among_clients(_as_pixels(X, store), y, n_clients, partition, seed=seed,
                                test=(_as_pixels(X_test, store), y_test), dtype=store, scale=scale,
                                **partition_options)


def _pixel_storage(dtype) -> tuple[np.dtype, float]:
    """The storage dtype of uint8 pixels and its scale: raw with 1/255, or divided floats with 1."""
    try:
        dtype = np.dtype(dtype)
    except TypeError as err:
        raise ValueError(f"dtype={dtype!r} is not a dtype; choose 'uint8', 'float32' or 'float64'") from err
    if dtype == np.uint8:
        return dtype, 1.0 / 255.0
    if dtype in (np.float32, np.float64):
        return dtype, 1.0
    raise ValueError(f"dtype={dtype} cannot store pixels; choose 'uint8', 'float32' or 'float64'")


def _as_pixels(images: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """uint8 images ``(n, ...)`` as rows ``(n, n_pixels)``: raw, or divided by 255 for float storage."""
    rows = images.reshape(len(images), -1)
    return rows if dtype == np.uint8 else rows.astype(dtype) / dtype.type(255)


def _find_mnist_files(folder: Path) -> tuple[dict, list]:
    """``({role: file}, [missing names])``; each file may be plain or ``.gz``, and named with a dot
    before ``idx`` as some mirrors do (``train-images.idx3-ubyte``)."""
    found, missing = {}, []
    for role, name in MNIST_FILES.items():
        variants = (name, name.replace("-idx", ".idx"))
        candidates = [folder / (variant + suffix) for variant in variants for suffix in ("", ".gz")]
        file = next((c for c in candidates if c.is_file()), None)
        if file is None:
            missing.append(name)
        else:
            found[role] = file
    return found, missing


def _check_mnist(arrays: dict, files: dict):
    """The four arrays, checked to be uint8 images ``(n, rows, cols)`` with one uint8 label each."""
    for kind in ("train", "test"):
        images, labels = arrays[f"{kind}_images"], arrays[f"{kind}_labels"]
        where = f"{files[f'{kind}_images']} and {files[f'{kind}_labels']}"
        if images.ndim != 3 or images.dtype != np.uint8:
            raise ValueError(f"{files[f'{kind}_images']} must hold uint8 images (n, rows, cols), "
                             f"got {images.dtype} of shape {images.shape}")
        if labels.ndim != 1 or labels.dtype != np.uint8:
            raise ValueError(f"{files[f'{kind}_labels']} must hold uint8 labels (n,), "
                             f"got {labels.dtype} of shape {labels.shape}")
        if len(images) != len(labels):
            raise ValueError(f"{where} do not match: {len(images)} images but {len(labels)} labels")
    if arrays["train_images"].shape[1:] != arrays["test_images"].shape[1:]:
        raise ValueError(f"training images are {arrays['train_images'].shape[1:]} but test images are "
                         f"{arrays['test_images'].shape[1:]}; the files come from different data sets")
    return arrays["train_images"], arrays["train_labels"], arrays["test_images"], arrays["test_labels"]


def _download_mnist(folder: Path, cache_root: Path) -> dict:
    """Fetch ``mnist_784`` from OpenML (raw download cached under ``cache_root``) and save it as gzipped IDX."""
    from sklearn.datasets import fetch_openml

    # OpenML serves mnist_784 as dense ARFF: scikit-learn's "pandas" parser is the fast one, and
    # "liac-arff" (slower, pure Python) needs no pandas.
    parser = "pandas" if importlib.util.find_spec("pandas") is not None else "liac-arff"
    data = fetch_openml("mnist_784", version=1, as_frame=False, parser=parser, data_home=str(cache_root))
    pixels = np.clip(np.rint(np.asarray(data.data, dtype=np.float64)), 0, 255).astype(np.uint8)
    images = pixels.reshape(len(pixels), 28, 28)
    labels = np.asarray(data.target).astype(np.int64).astype(np.uint8)
    n = _MNIST_TRAIN_SIZE
    arrays = {"train_images": images[:n], "train_labels": labels[:n],
              "test_images": images[n:], "test_labels": labels[n:]}
    folder.mkdir(parents=True, exist_ok=True)
    return {role: write_idx(folder / f"{MNIST_FILES[role]}.gz", array) for role, array in arrays.items()}


# ------------------------------------------------------------------------------------- svmlight
def load_svmlight(path, n_clients: int = 10, partition: str = "iid", *, test_path=None, n_features=None,
                  dense: bool = False, zero_based="auto", seed=0, **partition_options):
    """A LIBSVM/svmlight file (a9a, w8a, rcv1, ...), federated; X stays sparse CSR unless ``dense``.

    Parameters
    ----------
    path : str or Path
        The training file, read by :func:`sklearn.datasets.load_svmlight_file` (gzip/bz2 accepted).
    n_clients : int
    partition : str
        The scheme of :func:`fedopt.datasets.partition`; ``"iid"`` by default, since LIBSVM sets
        carry no natural clients.
    test_path : str, Path or None
        A test file (e.g. ``a9a.t``), read together with ``path`` so both have the same features.
    n_features : int or None
        The number of features; None takes the largest index found in either file. LIBSVM's test
        files often lack the last features (``a9a.t`` has 122 of a9a's 123), so give it explicitly
        when only the test file is read elsewhere.
    dense : bool
        Store X as a dense array (float64) instead of CSR.
    zero_based : bool or "auto"
        Whether feature indices start at 0; ``"auto"`` is scikit-learn's guess (1-based, the LIBSVM
        convention, unless an index 0 appears).
    seed : int, Generator or None
        Seeds the partition.
    **partition_options
        Passed to :func:`fedopt.datasets.partition`. Labels become classes when they take a few
        discrete values (e.g. -1/+1); pass ``task="regression"`` for real-valued targets that happen
        to look discrete.
    """
    from sklearn.datasets import load_svmlight_files

    files = [path] if test_path is None else [path, test_path]
    loaded = load_svmlight_files([str(f) for f in files], n_features=n_features, zero_based=zero_based)
    X, y = loaded[0], loaded[1]
    if dense:
        X = X.toarray()
    test = None
    if test_path is not None:
        X_test, y_test = loaded[2], loaded[3]
        test = (X_test.toarray() if dense else X_test, y_test)
    partition_options.setdefault("name", f"{Path(path).name}/{partition}/{n_clients}")
    return split_among_clients(X, y, n_clients, partition, seed=seed, test=test, **partition_options)
