"""Loaders of real data sets, partitioned among clients. Nothing here touches the network unless asked.

* :func:`load_digits`: scikit-learn's bundled 8x8 digits, the offline default.
* :func:`load_mnist` and :func:`load_fashion_mnist`: MNIST and Fashion-MNIST from the four IDX
  files in a local folder or the cache (``<cache>/mnist``, ``<cache>/fashion-mnist``);
  ``download=True`` fetches ``mnist_784`` or ``Fashion-MNIST`` from OpenML once and caches it as IDX files.
* :func:`load_a9a`: LIBSVM's a9a from ``a9a`` and ``a9a.t`` in a local folder or ``<cache>/a9a``
  (downloaded once by hand from the LIBSVM page).
* :func:`load_svmlight`: LIBSVM/svmlight files (a9a, w8a, rcv1, ...), kept sparse.

The cache is :func:`data_home`: ``cache_dir``, else ``$FEDOPT_DATA``, else ``~/.cache/fedopt``;
:mod:`fedopt.datasets.catalog` lists the papers' data sets and whether they are there.
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
    partition_options.setdefault("name", f"digits/{partition}/{n_clients}")
    return split_among_clients(X / 16.0, y, n_clients, partition, seed=seed,
                                test_size=test_size, dtype=dtype, **partition_options)


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


# ------------------------------------------------------------------------ MNIST and Fashion-MNIST
#: The four files of the official distribution, by role; Fashion-MNIST uses the same names and shapes.
MNIST_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
#: OpenML's ``mnist_784`` and ``Fashion-MNIST`` list the 60,000 official training images first,
#: then the 10,000 test images.
_MNIST_TRAIN_SIZE = 60_000
#: The IDX image sets, by name: their title in messages, their folder in the cache, their OpenML name.
_IDX_SETS = {
    "mnist": ("MNIST", "mnist", "mnist_784"),
    "fashion_mnist": ("Fashion-MNIST", "fashion-mnist", "Fashion-MNIST"),
}


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
        When a file is not IDX or the files do not fit together, or when ``test_size`` is given:
        the official test images are the test split.
    """
    return _load_idx_set("mnist", path, n_clients, partition, seed=seed, dtype=dtype, cache_dir=cache_dir,
                         download=download, **partition_options)


def load_fashion_mnist(path=None, n_clients: int = 10, partition: str = "sorted", *, seed=0, dtype="uint8",
                       cache_dir=None, download: bool = False, **partition_options):
    """Fashion-MNIST (Xiao et al. 2017; 60,000 training and 10,000 test images of 28x28 pixels, 10 classes), federated.

    The same four IDX files, shapes, storage and parameters as :func:`load_mnist`, with clothing in
    place of digits: ``path=None`` looks in ``<cache>/fashion-mnist``, ``download=True`` fetches
    ``Fashion-MNIST`` from OpenML once, and the name defaults to ``fashion_mnist/{partition}/{n_clients}``.
    """
    return _load_idx_set("fashion_mnist", path, n_clients, partition, seed=seed, dtype=dtype,
                         cache_dir=cache_dir, download=download, **partition_options)


def _load_idx_set(kind: str, path, n_clients: int, partition: str, *, seed, dtype, cache_dir, download: bool,
                  **partition_options):
    """The IDX image set ``kind`` of :data:`_IDX_SETS`, federated; see :func:`load_mnist`."""
    title, test_images = _IDX_SETS[kind][0], MNIST_FILES["test_images"]
    _refuse_test_size(partition_options, f"{title}: its official test images ({test_images}) are the test split")
    store, scale = _pixel_storage(dtype)
    files = _idx_set_files(kind, path, cache_dir, download)
    arrays = {role: read_idx(file) for role, file in files.items()}
    X, y, X_test, y_test = _check_idx_set(arrays, files)
    partition_options.setdefault("name", f"{kind}/{partition}/{n_clients}")
    return split_among_clients(_as_pixels(X, store), y, n_clients, partition, seed=seed,
                                test=(_as_pixels(X_test, store), y_test), dtype=store, scale=scale,
                                **partition_options)


def _refuse_test_size(partition_options: dict, why: str) -> None:
    """Refuse ``test_size`` among the options of a loader whose test split is a file of its own."""
    if partition_options.get("test_size") is not None:
        raise ValueError(f"test_size does not apply to {why}; drop test_size")


def _idx_set_files(kind: str, path=None, cache_dir=None, download: bool = False) -> dict:
    """``{role: file}`` of the IDX set ``kind`` in ``path`` (or its cache folder), fetched first when
    missing and ``download``; else a FileNotFoundError that says how to get them."""
    title, subfolder, _ = _IDX_SETS[kind]
    folder = Path(path).expanduser() if path is not None else data_home(cache_dir) / subfolder
    files, missing = _find_files(folder, MNIST_FILES)
    if not missing:
        return files
    if not download:
        raise FileNotFoundError(
            f"{title} files {', '.join(missing)} (optionally .gz) are missing from {folder}; put the four IDX "
            "files there, pass path= to the folder that holds them, or pass download=True to fetch "
            f"them once from OpenML (or run `fedopt data download {kind}` to fill the cache)")
    return _download_idx_set(kind, folder, data_home(cache_dir))


def _find_files(folder: Path, names: dict, suffixes=("", ".gz")) -> tuple[dict, list]:
    """``({role: file}, [missing names])`` for the files ``names`` (by role) in ``folder``; each file
    may end in one of ``suffixes``, and be named with a dot before ``idx`` as some mirrors do
    (``train-images.idx3-ubyte``). Only checks that the files exist."""
    found, missing = {}, []
    for role, name in names.items():
        variants = dict.fromkeys((name, name.replace("-idx", ".idx")))
        candidates = [folder / (variant + suffix) for variant in variants for suffix in suffixes]
        file = next((c for c in candidates if c.is_file()), None)
        if file is None:
            missing.append(name)
        else:
            found[role] = file
    return found, missing


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


def _check_idx_set(arrays: dict, files: dict):
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


def _download_idx_set(kind: str, folder: Path, cache_root: Path) -> dict:
    """Fetch the IDX set ``kind`` from OpenML (raw download cached under ``cache_root``) and save it
    into ``folder`` as gzipped IDX files; ``{role: file}``."""
    from sklearn.datasets import fetch_openml

    title, _, openml_name = _IDX_SETS[kind]
    # OpenML serves both sets as dense ARFF: scikit-learn's "pandas" parser is the fast one, and
    # "liac-arff" (slower, pure Python) needs no pandas.
    parser = "pandas" if importlib.util.find_spec("pandas") is not None else "liac-arff"
    try:
        data = fetch_openml(openml_name, version=1, as_frame=False, parser=parser, data_home=str(cache_root))
    except OSError as err:  # URLError and socket errors: no route to OpenML from here
        raise OSError(f"could not download {title} from OpenML ({err}); on a machine without network, copy the "
                      f"four IDX files into {folder} by hand (`fedopt data ls` says where they come from)") from err
    pixels = np.clip(np.rint(np.asarray(data.data, dtype=np.float64)), 0, 255).astype(np.uint8)
    n = _MNIST_TRAIN_SIZE
    if pixels.ndim != 2 or pixels.shape[1] != 28 * 28 or len(pixels) <= n:
        raise ValueError(f"OpenML's {openml_name!r} holds {pixels.shape} values, not {title}'s {n} training "
                         "and then the test images of 28x28 pixels; put the four IDX files into "
                         f"{folder} by hand instead")
    images = pixels.reshape(len(pixels), 28, 28)
    labels = np.asarray(data.target).astype(np.int64).astype(np.uint8)
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

    Raises
    ------
    ValueError
        When a file is not LIBSVM/svmlight, or uses more than ``n_features`` features; the message
        names the file. Also when ``test_size`` is given with ``test_path``, whose file is the test split.
    """
    if test_path is not None:
        _refuse_test_size(partition_options, f"{path} with test_path: {test_path} is the test split")
    X, y, test = _read_svmlight(path, test_path, n_features, dense, zero_based)
    partition_options.setdefault("name", f"{Path(path).name}/{partition}/{n_clients}")
    return split_among_clients(X, y, n_clients, partition, seed=seed, test=test, **partition_options)


def _read_svmlight(path, test_path, n_features, dense: bool, zero_based):
    """``(X, y, test)`` of :func:`load_svmlight`, ``test`` being ``(X_test, y_test)`` or None."""
    files = [path] if test_path is None else [path, test_path]
    loaded = _load_svmlight_files(files, n_features=n_features, zero_based=zero_based)
    for file, rows in zip(files, loaded[::2], strict=True):
        if rows.shape[0] == 0:
            raise ValueError(f"{file} holds no samples (an empty LIBSVM/svmlight file); check or download it again")
    X, y = loaded[0], loaded[1]
    if dense:
        X = X.toarray()
    test = None
    if test_path is not None:
        X_test, y_test = loaded[2], loaded[3]
        test = (X_test.toarray() if dense else X_test, y_test)
    return X, y, test


def _load_svmlight_files(files, **options) -> list:
    """scikit-learn's ``load_svmlight_files`` of ``files``, read together so that they share the
    features; when they do not parse, the error names the file at fault, which scikit-learn's does not."""
    from sklearn.datasets import load_svmlight_files

    try:
        return load_svmlight_files([str(f) for f in files], **options)
    except (ValueError, EOFError, OSError) as err:  # OSError: a corrupt .bz2, say
        if isinstance(err, OSError) and err.errno is not None:  # a missing or unreadable file, named already
            raise
        for file in files:  # the file that fails alone; none does when only the files together fail
            try:
                load_svmlight_files([str(file)], **options)
            except (ValueError, EOFError, OSError) as alone:
                raise ValueError(f"{file} is not a valid LIBSVM/svmlight file ({alone}); check or download "
                                 "it again") from alone
        names = " and ".join(map(str, files))
        raise ValueError(f"{names} are not valid LIBSVM/svmlight files together ({err})") from err


# ------------------------------------------------------------------------------------------ a9a
#: LIBSVM's a9a (the Adult census data, binarised): its training and test files, by role.
A9A_FILES = {"train": "a9a", "test": "a9a.t"}
#: The number of features of a9a; ``a9a.t`` never uses the last one.
A9A_FEATURES = 123
#: Where LIBSVM publishes a9a and a9a.t.
A9A_URL = "https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/binary.html#a9a"


def load_a9a(path=None, n_clients: int = 10, partition: str = "iid", *, seed=0, dense: bool = True,
             cache_dir=None, download: bool = False, **partition_options):
    """LIBSVM's a9a (32,561 training and 16,281 test rows, 123 binary features, labels -1/+1), federated.

    The labels become the two classes ``[-1, 1]`` with codes 0/1, as
    :class:`fedopt.problems.Logistic` expects (+1 the positive class).

    Parameters
    ----------
    path : str, Path or None
        Folder holding ``a9a`` and ``a9a.t`` (each optionally ``.gz`` or ``.bz2``), as published on
        LIBSVM's binary-classification page. None looks in ``<cache>/a9a``.
    n_clients : int
    partition : str
        The scheme of :func:`fedopt.datasets.partition`; ``"iid"`` by default. ``a9a.t`` becomes
        the test split, unchanged.
    seed : int, Generator or None
        Seeds the partition.
    dense : bool
        Store the features as a dense float64 array (about 30 MB) rather than CSR.
    cache_dir : str, Path or None
        The cache root (default ``$FEDOPT_DATA``, else ``~/.cache/fedopt``).
    download : bool
        a9a cannot be fetched automatically (OpenML does not serve LIBSVM's files): with True and
        files missing, the error spells out the one-time manual download.
    **partition_options
        Passed to :func:`fedopt.datasets.partition`; the name defaults to ``a9a/{partition}/{n_clients}``.

    Raises
    ------
    FileNotFoundError
        When a file is missing; the message says where to get it and where to put it.
    ValueError
        When a file does not parse, uses a feature beyond the 123rd (files that use fewer are
        padded to 123), or holds labels other than two classes; or when ``test_size`` is given, as
        ``a9a.t`` is the test split.
    """
    _refuse_test_size(partition_options, "a9a: a9a.t is the test split")
    files = _a9a_files(path, cache_dir, download)
    X, y, test = _read_svmlight(files["train"], files["test"], A9A_FEATURES, dense, zero_based=False)
    n_labels = len(np.unique(y))
    if n_labels != 2:  # before the partition, whose error on the test labels would not say why
        raise ValueError(f"{files['train']} holds {n_labels} distinct labels, a9a has two (-1/+1); "
                         "the file is not a9a")
    partition_options.setdefault("name", f"a9a/{partition}/{n_clients}")
    return split_among_clients(X, y, n_clients, partition, seed=seed, test=test, **partition_options)


def _a9a_files(path=None, cache_dir=None, download: bool = False) -> dict:
    """``{role: file}`` of a9a in ``path`` (or ``<cache>/a9a``); else a FileNotFoundError with the manual step."""
    folder = Path(path).expanduser() if path is not None else data_home(cache_dir) / "a9a"
    files, missing = _find_files(folder, A9A_FILES, ("", ".gz", ".bz2"))
    if not missing:
        return files
    lead = ("a9a cannot be downloaded automatically (OpenML does not serve LIBSVM's a9a files); "
            if download else "")
    raise FileNotFoundError(
        f"{lead}a9a files {', '.join(missing)} (optionally .gz or .bz2) are missing from {folder}; download "
        f"a9a and a9a.t once from LIBSVM's binary-classification data page ({A9A_URL}) into that folder, "
        "or pass path= to the folder that holds them")
