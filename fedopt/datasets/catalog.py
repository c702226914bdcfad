"""The papers' data sets: where each lives in the cache, whether it is there, and how to get it once.

:data:`PAPER_DATA` maps ``"mnist"``, ``"fashion_mnist"`` and ``"a9a"`` to a :class:`PaperData`.
:func:`folder` gives a data set's folder under :func:`~fedopt.datasets.loaders.data_home`,
:func:`present` checks that its files exist (without reading them), :func:`status` lists every
data set with what is missing, and :func:`download` fetches one once (MNIST and Fashion-MNIST
from OpenML; a9a needs a manual download, and its error says how).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from fedopt.datasets import loaders


@dataclass(frozen=True)
class PaperData:
    """One of the papers' data sets.

    Attributes
    ----------
    name : str
        Its key in :data:`PAPER_DATA`.
    loader : callable
        The loader, e.g. :func:`~fedopt.datasets.load_mnist`.
    subfolder : str
        Its folder under the cache root.
    files : dict
        The required files by role; each may carry one of ``suffixes``.
    suffixes : tuple of str
        The compression suffixes accepted.
    description : str
        One line on the data.
    papers : tuple of str
        The papers whose experiments use it.
    how_to_get : str
        The one-time download.
    fetch : callable
        ``fetch(path, cache_dir, download) -> {role: file}``, the loader's own file lookup and download.
    downloadable : bool
        Whether ``fetch`` can download the files (``fedopt data download NAME``); else they come by hand.
    """

    name: str
    loader: Callable
    subfolder: str
    files: dict
    suffixes: tuple
    description: str
    papers: tuple
    how_to_get: str
    fetch: Callable
    downloadable: bool = True


def _openml_instruction(name: str, openml_name: str, source: str) -> str:
    return (f"`fedopt data download {name}` (or download=True) fetches {openml_name!r} from OpenML once and "
            f"saves the four IDX files; or copy the IDX files from {source} into the folder")


PAPER_DATA = {
    "mnist": PaperData(
        "mnist", loaders.load_mnist, "mnist", loaders.MNIST_FILES, ("", ".gz"),
        "MNIST handwritten digits: 60,000 + 10,000 images of 28x28 pixels, 10 classes (LeCun et al.)",
        ("FedNMap (Figs. 2-5)", "DEPOSITUM (Figs. 4-7, Table III)"),
        _openml_instruction("mnist", "mnist_784", "the MNIST page of LeCun, Cortes and Burges"),
        partial(loaders._idx_set_files, "mnist")),
    "fashion_mnist": PaperData(
        "fashion_mnist", loaders.load_fashion_mnist, "fashion-mnist", loaders.MNIST_FILES, ("", ".gz"),
        "Fashion-MNIST clothing images: 60,000 + 10,000 of 28x28 pixels, 10 classes (Xiao et al. 2017)",
        ("FedCanon (Figs. 2-3)", "DEPOSITUM (Table III)"),
        _openml_instruction("fashion_mnist", "Fashion-MNIST", "github.com/zalandoresearch/fashion-mnist"),
        partial(loaders._idx_set_files, "fashion_mnist")),
    "a9a": PaperData(
        "a9a", loaders.load_a9a, "a9a", loaders.A9A_FILES, ("", ".gz", ".bz2"),
        "LIBSVM a9a (Adult census income): 32,561 + 16,281 rows, 123 binary features, labels -1/+1",
        ("FedCanon (Fig. 1)", "DEPOSITUM (Fig. 3)"),
        f"download a9a and a9a.t once by hand from LIBSVM's binary-classification page ({loaders.A9A_URL}) "
        "into the folder; there is no automatic download",
        loaders._a9a_files, downloadable=False),
}


def _entry(name: str) -> PaperData:
    try:
        return PAPER_DATA[name]
    except KeyError:
        raise ValueError(f"no paper data set {name!r}; choose one of {', '.join(PAPER_DATA)}") from None


def folder(name: str, cache_dir=None) -> Path:
    """The folder of data set ``name`` in the cache: ``data_home(cache_dir) / subfolder``.

    Parameters
    ----------
    name : str
        A key of :data:`PAPER_DATA`.
    cache_dir : str, Path or None
        The cache root (default ``$FEDOPT_DATA``, else ``~/.cache/fedopt``).
    """
    return loaders.data_home(cache_dir) / _entry(name).subfolder


def missing(name: str, path=None, cache_dir=None) -> list[str]:
    """The required files of data set ``name`` absent from ``path`` (default: its cache folder).

    Parameters
    ----------
    name : str
        A key of :data:`PAPER_DATA`.
    path : str, Path or None
        A folder to check instead of the cache folder.
    cache_dir : str, Path or None
        The cache root.
    """
    entry = _entry(name)
    where = Path(path).expanduser() if path is not None else folder(name, cache_dir)
    return loaders._find_files(where, entry.files, entry.suffixes)[1]


def present(name: str, path=None, cache_dir=None) -> bool:
    """Whether every file of data set ``name`` exists in ``path`` (default: its cache folder); reads
    nothing. The parameters are those of :func:`missing`."""
    return not missing(name, path, cache_dir)


def status(cache_dir=None, name=None) -> list[dict]:
    """One dict per paper data set: ``name``, ``folder``, ``present``, ``missing`` (file names),
    ``description``, ``papers`` and ``how_to_get``.

    Parameters
    ----------
    cache_dir : str, Path or None
        The cache root.
    name : str or None
        Only this data set (a key of :data:`PAPER_DATA`); default all.
    """
    rows = []
    for key in [name] if name is not None else PAPER_DATA:
        entry, absent = _entry(key), missing(key, cache_dir=cache_dir)
        rows.append({"name": key, "folder": folder(key, cache_dir), "present": not absent, "missing": absent,
                     "description": entry.description, "papers": list(entry.papers),
                     "how_to_get": entry.how_to_get})
    return rows


def download(name: str, cache_dir=None) -> Path:
    """Fetch data set ``name`` into its cache folder once, unless its files are already there; the folder.

    MNIST and Fashion-MNIST come from OpenML through the loaders' ``download=True`` path and are
    saved as gzipped IDX files. a9a has no automatic download: when its files are missing this
    raises FileNotFoundError with the manual step.

    Parameters
    ----------
    name : str
        A key of :data:`PAPER_DATA`.
    cache_dir : str, Path or None
        The cache root.
    """
    _entry(name).fetch(None, cache_dir, True)
    return folder(name, cache_dir)
