"""Synthetic federated data with a known answer: every generator is seeded and returns a FederatedDataset.

* :func:`make_sparse_regression`: a Gaussian design and a sparse true coefficient vector (Lasso tests).
* :func:`make_classification`: scikit-learn's ``make_classification``, partitioned.
* :func:`make_fedprox_synthetic`: synthetic(alpha, beta) of the FedProx paper, with natural clients.
* :func:`make_mnist_like`: MNIST-shaped uint8 images (784 pixels, 10 classes) for benchmarks.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np

from fedopt._checks import count, float_dtype
from fedopt.datasets._dataset import FederatedDataset
from fedopt.datasets.loaders import _as_pixels, _pixel_storage

# By name from the module: the package rebinds ``fedopt.datasets.partition`` to the function.
from fedopt.datasets.partition import partition as _split


def _streams(seed):
    """Two independent generators from one seed: one draws the data, the other partitions it."""
    return np.random.default_rng(seed).spawn(2)


# --------------------------------------------------------------------------- sparse regression
def make_sparse_regression(n_samples: int = 1000, n_features: int = 100, n_informative: int = 10,
                           noise: float = 0.1, n_clients: int = 10, partition: str = "iid", seed=0,
                           test_size: float | None = None, **partition_options):
    """Least-squares data ``y = X coef + noise * eps`` whose coefficients have a known sparse support.

    Parameters
    ----------
    n_samples, n_features : int
    n_informative : int
        The number of nonzero coefficients, at positions drawn uniformly without replacement.
    noise : float
        Standard deviation of the Gaussian noise ``eps ~ N(0, 1)`` added to the targets.
    n_clients : int
    partition : str
        The scheme of :func:`fedopt.datasets.partition` (``"iid"`` or ``"sorted"``, by target value).
    seed : int, Generator or None
        Seeds the data and, through an independent stream, the partition.
    test_size : float or None
        Hold out this fraction of the samples as the test split.
    **partition_options
        Passed to :func:`fedopt.datasets.partition`.

    Returns
    -------
    FederatedDataset
        Float targets; ``info["coef"]`` is the true coefficient vector and ``info["support"]`` its
        nonzero positions, sorted.

    Notes
    -----
    The design has i.i.d. N(0, 1) entries. The nonzero coefficients are ``s * u`` with random signs
    ``s`` and ``u ~ U[1, 2]``: bounded away from 0 (the "beta-min" condition under which the Lasso
    can recover the support), so with unit-variance columns and small noise every informative
    feature stands out from the noise.
    """
    n_samples = count("n_samples", n_samples)
    n_features = count("n_features", n_features)
    n_informative = count("n_informative", n_informative)
    if n_informative > n_features:
        raise ValueError(f"n_informative={n_informative} is more than n_features={n_features}; "
                         "lower n_informative or add features")
    if not (noise >= 0 and np.isfinite(noise)):
        raise ValueError(f"noise must be a finite standard deviation >= 0, got {noise!r}")
    data_rng, split_rng = _streams(seed)
    X = data_rng.standard_normal((n_samples, n_features))
    support = np.sort(data_rng.choice(n_features, n_informative, replace=False))
    coef = np.zeros(n_features)
    coef[support] = data_rng.choice([-1.0, 1.0], n_informative) * data_rng.uniform(1.0, 2.0, n_informative)
    y = X @ coef + noise * data_rng.standard_normal(n_samples)
    partition_options.setdefault("name", f"sparse_regression/{partition}/{n_clients}")
    ds = _split(X, y, n_clients, partition, seed=split_rng, test_size=test_size,
                              task="regression", **partition_options)
    return dataclasses.replace(ds, info={**ds.info, "coef": coef, "support": support, "noise": float(noise)})


# ------------------------------------------------------------------------------- classification
#: Keywords of :func:`sklearn.datasets.make_classification` passed through (``scale`` there
#: multiplies the features; the dataset's storage scale stays 1).
_SKLEARN_CLASSIFICATION_OPTIONS = ("n_informative", "n_redundant", "n_repeated", "n_clusters_per_class",
                                   "weights", "flip_y", "class_sep", "hypercube", "shift", "scale")
_PARTITION_OPTIONS = ("alpha", "shards_per_client", "min_samples", "dtype", "name")


def make_classification(n_samples: int = 1000, n_features: int = 20, n_classes: int = 2, n_clients: int = 10,
                        partition: str = "dirichlet", seed=0, test_size: float | None = 0.2, **options):
    """scikit-learn's :func:`~sklearn.datasets.make_classification`, held out and partitioned.

    Parameters
    ----------
    n_samples, n_features, n_classes : int
    n_clients : int
    partition : str
        The scheme of :func:`fedopt.datasets.partition`; ``"dirichlet"`` (label skew, with
        ``alpha=0.5`` unless given) by default, as in FedCanon's and DEPOSITUM's experiments.
    seed : int, Generator or None
        Seeds the data and, through an independent stream, the hold-out and partition.
    test_size : float or None
        Stratified fraction held out as the test split.
    **options
        Either keywords of scikit-learn's generator (``n_informative``, ``n_redundant``,
        ``n_repeated``, ``n_clusters_per_class``, ``weights``, ``flip_y``, ``class_sep``,
        ``hypercube``, ``shift``, ``scale``) or of :func:`fedopt.datasets.partition` (``alpha``,
        ``shards_per_client``, ``min_samples``, ``dtype``, ``name``).
        ``n_informative`` defaults to ``max(2, n_features // 2)`` rather than scikit-learn's 2, so
        that ten classes with two clusters each fit (scikit-learn needs
        ``n_classes * n_clusters_per_class <= 2 ** n_informative``), and ``n_redundant`` to
        ``min(2, n_features - n_informative - n_repeated)``.
    """
    from sklearn.datasets import make_classification as sklearn_classification

    unknown = sorted(set(options) - set(_SKLEARN_CLASSIFICATION_OPTIONS) - set(_PARTITION_OPTIONS))
    if unknown:
        raise ValueError(f"make_classification got unknown option(s) {', '.join(unknown)}; choose from "
                         f"{', '.join(_SKLEARN_CLASSIFICATION_OPTIONS + _PARTITION_OPTIONS)}")
    generator = {k: v for k, v in options.items() if k in _SKLEARN_CLASSIFICATION_OPTIONS}
    splitter = {k: v for k, v in options.items() if k in _PARTITION_OPTIONS}
    n_features = count("n_features", n_features)
    n_classes = count("n_classes", n_classes, 2)
    generator.setdefault("n_informative", min(n_features, max(2, n_features // 2)))
    generator.setdefault("n_redundant", max(0, min(2, n_features - generator["n_informative"]
                                                   - generator.get("n_repeated", 0))))
    data_rng, split_rng = _streams(seed)
    X, y = sklearn_classification(n_samples, n_features, n_classes=n_classes,
                                  random_state=int(data_rng.integers(2**31 - 1)), **generator)
    splitter.setdefault("name", f"classification/{partition}/{n_clients}")
    return _split(X, y, n_clients, partition, seed=split_rng, test_size=test_size,
                                task="classification", **splitter)


# ------------------------------------------------------------------------------ FedProx synthetic
#: Clients are generated in chunks of about this many feature values (rows times features), so that
#: the temporaries stay near 16 MB per float64 array whatever the data set's size.
_CHUNK_VALUES = 2**21
#: ``keep_models=None`` keeps the local models in ``info`` while ``W`` has at most this many entries
#: (128 MiB in float64); beyond it, they would take more memory than the features themselves.
_KEEP_MODELS_MAX = 2**24


class _Streams(NamedTuple):
    """The generators each quantity is drawn from, every one consumed in client order."""

    u: np.random.Generator
    B: np.random.Generator
    W: np.random.Generator
    b: np.random.Generator
    v: np.random.Generator
    x: np.random.Generator


def make_fedprox_synthetic(alpha: float = 1.0, beta: float = 1.0, n_clients: int = 30, n_features: int = 60,
                           n_classes: int = 10, seed=0, test_size: float | None = 0.2, iid: bool = False,
                           min_samples: int = 50, max_samples: int = 2000, *, samples_per_client: int | None = None,
                           dtype="float64", keep_models: bool | None = None):
    """The synthetic(alpha, beta) data of FedProx (Li et al., MLSys 2020, section 5.1), one model per client.

    Parameters
    ----------
    alpha : float
        Variance of ``u_k``, the mean of client ``k``'s model entries: how much the local models differ.
    beta : float
        Variance of ``B_k``, the mean of client ``k``'s feature means: how much the local data differ.
    n_clients, n_features, n_classes : int
        30, 60 and 10 in the paper.
    seed : int, Generator or None
    test_size : float or None
        Hold out this fraction of every client's samples (rounded, at most all but one) into the
        pooled test split; None or 0 keeps everything for training.
    iid : bool
        The paper's synthetic_iid: one model ``W, b ~ N(0, 1)`` shared by every client and one
        feature distribution ``x ~ N(0, Sigma)`` (``v_k = 0``); ``alpha`` and ``beta`` play no role.
    min_samples, max_samples : int
        Client ``k`` draws ``m_k = min(int(exp(N(4, 2^2))) + min_samples, max_samples)`` samples
        (train and test together). Unused when ``samples_per_client`` is given.
    samples_per_client : int or None
        Extension beyond the paper, for large populations: every client gets exactly this many
        samples (train and test together; with ``test_size`` each client keeps
        ``m - min(round(test_size * m), m - 1)`` for training). None draws the paper's sizes.
    dtype : {"float64", "float32"}
        Storage of ``X`` and ``X_test`` (extension beyond the paper). The features are drawn in
        float64 and rounded; the labels are the argmax of the client's model at the stored features.
    keep_models : bool or None
        Keep every client's model in ``info`` (``W`` alone is ``n_clients * n_classes *
        n_features`` float64 values: 1.6 GB for a million clients in 20 dimensions). None keeps them
        while ``W`` has at most 2**24 entries.

    Returns
    -------
    FederatedDataset
        Classes ``0..n_classes-1`` (every code, even one no sample has); client ``k`` is the ``k``-th
        client. ``info`` holds ``alpha``, ``beta``, ``iid``, ``samples_per_client``, ``client_ids``
        (``0..n_clients-1``) and, when the models are kept, the local models ``W`` (n_clients,
        n_classes, n_features), ``b`` (n_clients, n_classes) and the feature means ``v`` (n_clients,
        n_features), in float64.

    Notes
    -----
    For client ``k`` [FedProx]: ``u_k ~ N(0, alpha)``, ``B_k ~ N(0, beta)``; ``W_k ~ N(u_k, 1)``
    entrywise, shape ``(n_classes, n_features)``; ``b_k ~ N(u_k, 1)``; ``v_k ~ N(B_k, 1)``;
    ``x ~ N(v_k, Sigma)`` with ``Sigma = diag(j^-1.2)``, ``j = 1..n_features``; and
    ``y = argmax softmax(W_k x + b_k)``. ``N(m, s)`` is read as variance ``s``, as in the paper's
    notation; the FedProx repository's script passes alpha and beta to NumPy as standard deviations,
    so ``alpha=0.5`` here is its ``alpha=sqrt(0.5)``. The sizes follow the repository's power law
    ``int(lognormal(4, 2)) + 50``; the cap ``max_samples`` is ours, to keep one client from holding
    most of the data.

    Because ``u_k`` shifts every logit of a sample by the same amount ``u_k (sum_j x_j + 1)``, it
    cancels in the argmax: ``alpha`` changes the local models but not the distribution of the data
    ``(x, y)``. The data's heterogeneity comes from the independent local models and from ``beta``.

    The clients are generated in chunks (vectorized within a chunk) and written into preallocated
    client-major arrays, so the peak memory is the final arrays plus one chunk of about 2**21
    feature values (and the models while they are kept, or with the paper's sizes). The data do
    not depend on the chunks: every quantity is drawn from its own generator in client order. With
    the paper's sizes (``samples_per_client=None``) one generator draws the sizes, then every
    client's ``u, B, W, b, v``, then the samples client after client, so a seed gives the data it
    always gave. With ``samples_per_client`` (extension beyond the paper) the seed's generator
    spawns six independent ones for ``u, B, W, b, v`` and the samples, so the models are drawn
    chunk by chunk too: a million clients of 20 samples in 20 dimensions, in float32, take about
    the 1.6 GB of their features.
    """
    n_clients = count("n_clients", n_clients)
    n_features = count("n_features", n_features)
    n_classes = count("n_classes", n_classes, 2)
    min_samples = count("min_samples", min_samples, 2 if test_size else 1)
    max_samples = count("max_samples", max_samples, min_samples)
    if samples_per_client is not None:
        samples_per_client = count("samples_per_client", samples_per_client, 2 if test_size else 1)
    for value, name in ((alpha, "alpha"), (beta, "beta")):
        if not (value >= 0 and np.isfinite(value)):
            raise ValueError(f"{name} must be a finite variance >= 0, got {value!r}")
    if test_size is not None and not 0 <= test_size < 1:
        raise ValueError(f"test_size must be a fraction in [0, 1), got {test_size!r}")
    store = float_dtype(dtype)
    if keep_models is None:
        keep_models = n_clients * n_classes * n_features <= _KEEP_MODELS_MAX
    rng = np.random.default_rng(seed)
    if samples_per_client is None:  # the paper's layout: one generator draws everything in turn
        sizes = np.minimum(rng.lognormal(4.0, 2.0, n_clients).astype(np.int64) + min_samples, max_samples)
        streams = _Streams(*[rng] * 6)
    else:
        sizes = np.full(n_clients, samples_per_client, dtype=np.int64)
        streams = _Streams(*rng.spawn(6))
    shared = (streams.W.standard_normal((n_classes, n_features)), streams.b.standard_normal(n_classes)) if iid else None
    # With the paper's sizes every model comes before the first sample in the one generator.
    models = (_fedprox_models(streams, alpha, beta, n_clients, n_features, n_classes, shared)
              if samples_per_client is None else None)
    n_test = np.minimum(np.rint((test_size or 0) * sizes).astype(np.int64), sizes - 1)
    train_offsets = np.concatenate([[0], np.cumsum(sizes - n_test)])
    test_offsets = np.concatenate([[0], np.cumsum(n_test)])
    X = np.empty((train_offsets[-1], n_features), store)
    y = np.empty(train_offsets[-1], np.int64)
    X_test = np.empty((test_offsets[-1], n_features), store)
    y_test = np.empty(test_offsets[-1], np.int64)
    kept = (np.empty((n_clients, n_classes, n_features)), np.empty((n_clients, n_classes)),
            np.empty((n_clients, n_features))) if keep_models and models is None else None
    sd = np.arange(1, n_features + 1) ** -0.6  # sqrt of Sigma_jj = j^-1.2
    for lo, hi in _chunks(sizes, max(1, _CHUNK_VALUES // n_features)):
        if models is None:
            W, b, v = _fedprox_models(streams, alpha, beta, hi - lo, n_features, n_classes, shared)
            if kept is not None:
                for whole, part in zip(kept, (W, b, v), strict=True):
                    whole[lo:hi] = part
        else:
            W, b, v = (part[lo:hi] for part in models)
        m = sizes[lo:hi]
        x = np.repeat(v, m, axis=0) + sd * streams.x.standard_normal((m.sum(), n_features))
        x = x.astype(store, copy=False)
        labels = _fedprox_chunk_labels(x, W, b, m)
        train, test = slice(train_offsets[lo], train_offsets[hi]), slice(test_offsets[lo], test_offsets[hi])
        _split_clients(x, labels, m, n_test[lo:hi], (X[train], y[train]), (X_test[test], y_test[test]))
    name = f"fedprox_synthetic_iid/{n_clients}" if iid else f"fedprox_synthetic({alpha},{beta})/{n_clients}"
    info = {"client_ids": np.arange(n_clients), "alpha": alpha, "beta": beta, "iid": iid,
            "samples_per_client": samples_per_client}
    if keep_models:
        info.update(zip("Wbv", models if models is not None else kept, strict=True))
    has_test = len(y_test) > 0
    # Codes are the argmax indices themselves, so that every class keeps its index even when no
    # sample (or no training sample) falls in it.
    return FederatedDataset(X, y, train_offsets, X_test if has_test else None, y_test if has_test else None,
                            classes=np.arange(n_classes), name=name, info=info)


def _chunks(sizes: np.ndarray, rows: int):
    """``(lo, hi)`` client ranges of about ``rows`` rows each: a chunk holds the clients whose first
    row falls in its window of ``rows`` rows, so it has at least one client and fewer rows than
    ``rows`` plus its last client's."""
    starts = np.cumsum(sizes) - sizes
    edges = np.unique(np.searchsorted(starts, np.arange(0, starts[-1] + sizes[-1], rows)))
    edges = edges[edges < len(sizes)].tolist()
    return zip(edges, [*edges[1:], len(sizes)], strict=True)


def _split_clients(x, labels, sizes, n_test, train, test):
    """Write the first ``sizes - n_test`` rows of every client into ``train`` and the others into
    ``test`` (pairs of preallocated features and labels, client-major)."""
    if (sizes == sizes[0]).all() and (n_test == n_test[0]).all():  # equal clients: strided copies
        clients, m, t = len(sizes), sizes[0], n_test[0]
        for (X, y), rows in zip((train, test), (slice(0, m - t), slice(m - t, m)), strict=True):
            X.reshape(clients, -1, x.shape[1])[:] = x.reshape(clients, m, -1)[:, rows]
            y.reshape(clients, -1)[:] = labels.reshape(clients, m)[:, rows]
        return
    held = np.arange(len(x)) - np.repeat(np.cumsum(sizes) - sizes, sizes) >= np.repeat(sizes - n_test, sizes)
    for (X, y), rows in zip((train, test), (~held, held), strict=True):
        X[:] = x[rows]
        y[:] = labels[rows]


def _fedprox_models(streams: _Streams, alpha, beta, n_clients, n_features, n_classes, shared=None):
    """The next ``n_clients`` clients' ``W_k``, ``b_k`` and feature mean ``v_k``, drawn as in FedProx.

    ``u``, ``B``, ``W``, ``b`` and ``v`` come from their streams in this order, each in client
    order; with ``shared = (W, b)`` (synthetic_iid) every client gets that model and ``v_k = 0``.
    """
    if shared is not None:
        W, b = shared
        return (np.broadcast_to(W, (n_clients, *W.shape)).copy(), np.broadcast_to(b, (n_clients, *b.shape)).copy(),
                np.zeros((n_clients, n_features)))
    u = np.sqrt(alpha) * streams.u.standard_normal(n_clients)
    B = np.sqrt(beta) * streams.B.standard_normal(n_clients)
    W = u[:, None, None] + streams.W.standard_normal((n_clients, n_classes, n_features))
    b = u[:, None] + streams.b.standard_normal((n_clients, n_classes))
    v = B[:, None] + streams.v.standard_normal((n_clients, n_features))
    return W, b, v


def _fedprox_labels(x, W, b):
    """``argmax (W x + b)`` of every row of ``x`` (softmax is monotone: its argmax is the logits').

    ``x`` (..., m, n_features) with ``W`` (..., n_classes, n_features) and ``b`` (..., n_classes): one
    client, or a stack of equal-sized clients (one matrix product per client either way).
    """
    return np.argmax(np.matmul(x, W.swapaxes(-1, -2)) + b[..., None, :], axis=-1)


def _fedprox_chunk_labels(x, W, b, sizes):
    """The labels of a chunk's rows ``x`` (client-major, ``sizes`` rows per client), in float64."""
    x = x.astype(np.float64, copy=False)
    if (sizes == sizes[0]).all():
        return _fedprox_labels(x.reshape(len(sizes), sizes[0], x.shape[1]), W, b).ravel()
    starts = (np.cumsum(sizes) - sizes).tolist()
    return np.concatenate([_fedprox_labels(x[s:s + m], W[k], b[k])
                           for k, (s, m) in enumerate(zip(starts, sizes.tolist(), strict=True))])


# ------------------------------------------------------------------------------------ MNIST-like
def make_mnist_like(n_samples: int = 6000, n_clients: int = 10, partition: str = "sorted", seed=0,
                    test_size: float | None = 0.2, n_classes: int = 10, **options):
    """MNIST-shaped data for benchmarks: 28x28 uint8 images (784 features), ``n_classes`` classes.

    Each class has a smooth random template: Gaussian noise blurred by a Gaussian kernel (width 3
    pixels), fading to 0 towards the border as MNIST digits do, and thresholded so that about a
    fifth of the pixels are lit. A sample is its class template shifted by up to 2 pixels each way
    and blended with a weight ``w ~ U[0, 0.4]`` of another class's template, at a random intensity
    in [0.6, 1.2], plus blurred and per-pixel Gaussian noise; the pixels are rounded and clipped to
    0..255, which leaves about two thirds of them 0. Classes are balanced (``n_samples //
    n_classes`` each, the remainder going to the first classes). The constants are tuned so that
    scikit-learn's LogisticRegression scores about 0.9 on held-out data with the defaults, close to
    a linear model on real MNIST: learnable, but not solved.

    Parameters
    ----------
    n_samples, n_clients : int
    partition : str
        The scheme of :func:`fedopt.datasets.partition`; ``"sorted"`` by default, as for MNIST.
    seed : int, Generator or None
        Seeds the data and, through an independent stream, the hold-out and partition.
    test_size : float or None
        Stratified fraction held out as the test split.
    n_classes : int
    **options
        ``dtype`` (``"uint8"``, the default, stores raw pixels with ``scale=1/255``; a float dtype
        stores pixels / 255 with scale 1, as :func:`~fedopt.datasets.load_mnist`), and the options of
        :func:`fedopt.datasets.partition` (``alpha``, ``shards_per_client``, ...).

    Returns
    -------
    FederatedDataset
        ``info["templates"]`` holds the unshifted class templates as uint8 rows ``(n_classes, 784)``.
    """
    n_samples = count("n_samples", n_samples)
    n_classes = count("n_classes", n_classes, 2)
    if n_samples < n_classes:
        raise ValueError(f"n_samples={n_samples} is fewer than n_classes={n_classes}; give every class a sample")
    store, scale = _pixel_storage(options.pop("dtype", "uint8"))
    data_rng, split_rng = _streams(seed)
    templates = _templates(data_rng, n_classes)
    y = data_rng.permutation(np.arange(n_samples) % n_classes)
    images = _mnist_like_images(data_rng, templates, y)
    options.setdefault("name", f"mnist_like/{partition}/{n_clients}")
    ds = _split(_as_pixels(images, store), y, n_clients, partition, seed=split_rng, test_size=test_size,
                dtype=store, scale=scale, task="classification", **options)
    info = {**ds.info, "templates": np.rint(templates).astype(np.uint8).reshape(n_classes, -1)}
    return dataclasses.replace(ds, info=info)


def _templates(rng, n_classes: int, size: int = 28) -> np.ndarray:
    """``n_classes`` smooth blobs in 0..255 (floats), about a fifth of their pixels lit, dark borders."""
    fields = _smooth(rng.standard_normal((n_classes, size, size)), sigma=3.0) * _border_fade(size)
    lit = np.quantile(fields, 0.8, axis=(1, 2), keepdims=True)
    return 255 * np.clip(1.5 * (fields - lit) / fields.std(axis=(1, 2), keepdims=True) + 0.3, 0, 1)


def _mnist_like_images(rng, templates: np.ndarray, y: np.ndarray, max_shift: int = 2, max_blend: float = 0.4,
                       block: int = 4096) -> np.ndarray:
    """One uint8 image per label: a shifted template, a little of another class's, and noise.

    Drawn ``block`` images at a time, so that the float temporaries stay small for MNIST-sized ``y``.
    """
    size = templates.shape[1]
    padded = np.pad(templates, ((0, 0), (max_shift, max_shift), (max_shift, max_shift)))
    offsets = [(r, c) for r in range(2 * max_shift + 1) for c in range(2 * max_shift + 1)]
    shifted = np.stack([padded[:, r:r + size, c:c + size] for r, c in offsets], axis=1)
    return np.concatenate([_noisy_images(rng, shifted, y[start:start + block], max_blend)
                           for start in range(0, len(y), block)])


def _noisy_images(rng, shifted: np.ndarray, y: np.ndarray, max_blend: float) -> np.ndarray:
    (n_classes, n_offsets, size, _), n = shifted.shape, len(y)
    other = (y + rng.integers(1, n_classes, n)) % n_classes
    w = rng.uniform(0, max_blend, (n, 1, 1))
    shape = ((1 - w) * shifted[y, rng.integers(n_offsets, size=n)]
             + w * shifted[other, rng.integers(n_offsets, size=n)])
    pixels = (rng.uniform(0.6, 1.2, (n, 1, 1)) * shape
              + 60 * _smooth(rng.standard_normal((n, size, size)), sigma=2.0, normalize=True)
              + 25 * rng.standard_normal((n, size, size)) - 60)
    return np.clip(np.rint(pixels), 0, 255).astype(np.uint8)


def _smooth(fields: np.ndarray, sigma: float, normalize: bool = False) -> np.ndarray:
    """Gaussian blur of each 2-D field of ``fields`` (the last two axes); unit variance when ``normalize``."""
    from scipy.ndimage import gaussian_filter

    out = gaussian_filter(fields, sigma=(0,) * (fields.ndim - 2) + (sigma, sigma), mode="constant")
    return out / out.std() if normalize else out


def _border_fade(size: int) -> np.ndarray:
    """A window equal to 1 in the centre and falling to 0 at the edges (MNIST leaves a 4-pixel frame empty)."""
    r = np.abs(np.arange(size) - (size - 1) / 2) / (size / 2)
    ramp = np.clip((1 - r) / 0.35, 0, 1)
    return np.outer(ramp, ramp)
