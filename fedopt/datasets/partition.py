"""Split pooled data ``(X, y)`` among clients: ``iid``, ``sorted``, ``dirichlet`` and ``shards``."""

from __future__ import annotations

import itertools

import numpy as np
import scipy.sparse as sp

from fedopt._checks import count, real
from fedopt.datasets._dataset import FederatedDataset, check_features, check_sample_weight

SCHEMES = ("iid", "sorted", "dirichlet", "shards")
#: The schemes that split by class label.
LABEL_SCHEMES = ("dirichlet", "shards")


def encode_targets(y, task: str = "auto"):
    """``(codes, classes)`` for class labels, or ``(float targets, None)`` for regression.

    ``task="auto"`` reads continuous targets (floats with a fractional part) as regression and
    anything else (integers, integral floats, strings) as classes, like scikit-learn's
    ``type_of_target``.
    """
    y = np.asarray(y)
    if task not in ("auto", "classification", "regression"):
        raise ValueError(f"task={task!r} is unknown; choose 'auto', 'classification' or 'regression'")
    if y.ndim != 1:
        raise ValueError(f"y must be 1-D, got shape {y.shape}")
    if y.dtype.kind == "f" and not np.isfinite(y).all():
        raise ValueError(f"y contains NaN or inf (first at index {np.flatnonzero(~np.isfinite(y))[0]})")
    if task == "auto":
        continuous = y.dtype.kind == "f" and bool(np.any(y != np.trunc(y)))  # type_of_target's "continuous"
        task = "regression" if continuous else "classification"
    if task == "regression":
        if y.dtype.kind not in "biuf":
            raise ValueError(f"regression targets y must be numbers, got dtype {y.dtype}")
        return y.astype(np.float64), None
    try:
        classes, codes = np.unique(y, return_inverse=True)
    except TypeError:  # labels that do not sort together: None among strings, say
        kinds = sorted({type(label).__name__ for label in y})
        raise ValueError(f"class labels y mix the types {', '.join(kinds)}; they must be all numbers or all "
                         "strings (drop the samples without a label)") from None
    return codes.astype(np.int64), classes


def partition(X, y, n_clients: int = 10, scheme: str = "iid", *, alpha: float = 0.5, shards_per_client: int = 2,
              min_samples: int | None = None, seed=None, test=None, test_size: float | None = None,
              dtype=None, scale: float = 1.0, task: str = "auto", name: str = "",
              sample_weight=None) -> FederatedDataset:
    """A :class:`FederatedDataset` of ``n_clients`` clients drawn from the pooled ``(X, y)``.

    Parameters
    ----------
    X : array (n_samples, n_features) or scipy.sparse matrix
    y : array (n_samples,)
        Class labels (any type) or regression targets; see ``task``.
    n_clients : int
    scheme : {"iid", "sorted", "dirichlet", "shards"}
        * ``iid``: shuffle, then split into near-equal parts.
        * ``sorted``: stable sort by label (or target value), then contiguous non-overlapping blocks
          of near-equal size (FedNMap's heterogeneity). With at least as many clients as classes,
          the boundaries are set left to right, each moved from its equal-block place only as far
          as needed, given those before it, for no client to hold more than two labels (not
          always the least total move).
        * ``dirichlet``: label skew; for each class ``c`` draw ``q_c ~ Dir(alpha * 1_n)`` and give
          client ``i`` the fraction ``q_c[i]`` of class ``c`` (FedCanon, DEPOSITUM). Redrawn until
          every client holds at least ``min_samples`` samples.
        * ``shards``: sort by label, cut into ``n_clients * shards_per_client`` equal shards and
          give each client ``shards_per_client`` random ones (McMahan et al.).
    alpha : float
        Dirichlet concentration; smaller is more skewed.
    shards_per_client : int
    min_samples : int or None
        Dirichlet only: the fewest samples a client may hold (default ``min(10, n_samples // (4 n))``).
    seed : int, Generator or None
        Seeds the shuffles and draws; the same seed gives the same partition.
    test : (X_test, y_test) or None
        A held-out test split kept as it is.
    test_size : float or None
        Or hold out this fraction of ``(X, y)`` first (stratified for classes), with the same seed.
    dtype : None, "float64", "float32" or "uint8"
        Storage of the features. None keeps uint8 input as uint8 and stores the rest as float64.
    scale : float
        The features are ``scale * X`` (use ``1/255`` with uint8 pixels).
    task : {"auto", "classification", "regression"}
    name : str
    sample_weight : array (n_samples,) or None
        Per-sample weights ``>= 0`` (scikit-learn's), moved with their rows; the split itself
        ignores them. Held-out test rows drop theirs.
    """
    if scheme not in SCHEMES:
        raise ValueError(f"scheme={scheme!r} is unknown; choose one of {', '.join(map(repr, SCHEMES))}")
    n_clients = count("n_clients", n_clients)
    X = _storage(check_features(X), dtype)
    codes, classes = encode_targets(y, task)
    if len(codes) != X.shape[0]:
        raise ValueError(f"y has {len(codes)} entries but X has {X.shape[0]} rows; they must match")
    if sample_weight is not None:
        sample_weight = check_sample_weight(sample_weight, X.shape[0])
    if not (seed is None or isinstance(seed, np.random.Generator)
            or (isinstance(seed, int | np.integer) and not isinstance(seed, bool) and seed >= 0)):
        raise ValueError(f"seed must be an integer >= 0, a numpy Generator or None, got {seed!r}")
    rng = np.random.default_rng(seed)
    X_test = y_test = None
    if test is not None and test_size is not None:
        raise ValueError("give test=(X_test, y_test) or test_size, not both")
    if test_size is not None:
        keep, held = _hold_out(codes, classes, test_size, rng)
        X, codes, X_test, y_test = X[keep], codes[keep], X[held], codes[held]
        sample_weight = None if sample_weight is None else sample_weight[keep]
    elif test is not None:
        X_test = _storage(check_features(test[0], "X_test"), X.dtype if not sp.issparse(X) else None, "X_test")
        y_test = _encode_like(test[1], classes)
    if n_clients > X.shape[0]:
        raise ValueError(f"n_clients={n_clients} is more than the {X.shape[0]} training samples; use fewer clients")
    if scheme in LABEL_SCHEMES and classes is None:
        raise ValueError(f"scheme={scheme!r} needs class labels, but y holds continuous targets; "
                         "use 'iid' or 'sorted', or pass task='classification'")
    if scheme == "iid":
        parts = np.array_split(rng.permutation(len(codes)), n_clients)
    elif scheme == "sorted":
        order = np.argsort(codes, kind="stable")
        labelled = classes is not None and n_clients >= len(classes)
        cuts = _label_aware_cuts(codes[order], n_clients) if labelled else _equal_cuts(len(order), n_clients)
        parts = np.split(order, cuts)
    elif scheme == "dirichlet":
        parts = _dirichlet(codes, len(classes), n_clients, alpha, min_samples, rng)
    else:
        parts = _shards(codes, n_clients, shards_per_client, rng)
    rows = np.concatenate(parts)
    offsets = np.concatenate([[0], np.cumsum([len(p) for p in parts])])
    return FederatedDataset(X[rows], codes[rows], offsets, X_test, y_test, classes, scale,
                            name=name or f"{scheme}/{n_clients}",
                            sample_weight=None if sample_weight is None else sample_weight[rows])


def from_client_ids(X, y, clients, *, test=None, dtype=None, scale: float = 1.0, task: str = "auto",
                    name: str = "", sample_weight=None) -> FederatedDataset:
    """A :class:`FederatedDataset` where ``clients[j]`` names the client of sample ``j``.

    Clients are numbered in the sorted order of their ids; samples keep their relative order,
    and their ``sample_weight`` (optional, ``>= 0``) moves with them.
    """
    X = _storage(check_features(X), dtype)
    codes, classes = encode_targets(y, task)
    ids, owner = _client_owners(clients, X.shape[0])
    if sample_weight is not None:
        sample_weight = check_sample_weight(sample_weight, X.shape[0])
    rows = np.argsort(owner, kind="stable")
    offsets = np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=len(ids)))])
    X_test = y_test = None
    if test is not None:
        X_test = _storage(check_features(test[0], "X_test"), X.dtype if not sp.issparse(X) else None, "X_test")
        y_test = _encode_like(test[1], classes)
    return FederatedDataset(X[rows], codes[rows], offsets, X_test, y_test, classes, scale,
                            name=name or f"given/{len(ids)}", info={"client_ids": ids},
                            sample_weight=None if sample_weight is None else sample_weight[rows])


# ---------------------------------------------------------------------------------------- helpers
def _client_owners(clients, n_samples: int):
    """``(ids, owner)``: the sorted distinct client ids, and each sample's index among them.

    A missing id (None, NaN, inf) is refused rather than made a client of its own."""
    clients = np.asarray(clients)
    if clients.shape != (n_samples,):
        raise ValueError(f"clients must give one client id per sample: shape ({n_samples},), got {clients.shape}")
    if clients.dtype.kind == "f":
        missing = ~np.isfinite(clients)
    elif clients.dtype.kind == "O":
        missing = np.array([c is None or (isinstance(c, float) and not np.isfinite(c)) for c in clients], bool)
    else:
        missing = np.zeros(0, bool)
    if missing.any():
        first = int(np.argmax(missing))
        raise ValueError(f"clients has no id for sample {first} ({clients[first]}): give every sample a client id")
    try:
        return np.unique(clients, return_inverse=True)
    except TypeError as err:  # ids that do not sort together, e.g. ints mixed with strings
        raise ValueError(f"clients must be ids of one sortable kind (integers or strings): {err}") from None


def _storage(X, dtype, name: str = "X"):
    """``X`` stored as ``dtype``; None keeps uint8 pixels and stores everything else as float64.

    Any ``name`` but ``"X"`` is a test split, stored like the training features ``X``."""
    if dtype is None:
        return X if X.dtype in (np.uint8, np.float64) else X.astype(np.float64)
    dtype = np.dtype(dtype)
    if dtype == np.uint8:
        pixels = not sp.issparse(X) and (
            X.dtype == np.uint8 or (np.all(np.round(X) == X) and X.min() >= 0 and X.max() <= 255))
        if not pixels and name != "X":
            raise ValueError(f"{name} must be stored like X (dense uint8 pixels 0..255); scale both the same way")
        if sp.issparse(X):
            raise ValueError("dtype='uint8' is for dense pixel data; sparse X is stored as float")
        if not pixels:
            raise ValueError("dtype='uint8' needs integer features in 0..255 (raw pixels); pass dtype=None instead")
    elif dtype not in (np.float32, np.float64):
        raise ValueError(f"dtype={dtype} is not a storage dtype; choose 'float64', 'float32' or 'uint8'")
    return X.astype(dtype) if X.dtype != dtype else X


def _encode_like(y, classes):
    if classes is None:
        return np.asarray(y, dtype=np.float64)
    y = np.asarray(y)
    codes = np.searchsorted(classes, y)
    unknown = (codes >= len(classes)) | (classes[np.minimum(codes, len(classes) - 1)] != y)
    if unknown.any():
        raise ValueError(f"y_test holds labels not seen in y, e.g. {y[unknown][0]!r}")
    return codes.astype(np.int64)


def _hold_out(codes, classes, test_size, rng):
    """``(kept rows, held-out rows)``: the train and test split of ``test_size``, sorted."""
    test_size = real("test_size", test_size, strict=True, below=1, hint=" (the held-out fraction)")
    n = len(codes)
    n_test = round(test_size * n)
    if classes is None:
        held = rng.permutation(n)[:n_test]
    else:  # stratified: every class keeps its share of the n_test held-out rows (largest remainders)
        share = test_size * np.bincount(codes, minlength=len(classes))
        counts = np.floor(share).astype(np.int64)
        counts[np.argsort(counts - share, kind="stable")[: n_test - counts.sum()]] += 1
        held = np.concatenate([
            idx[:count]
            for idx, count in zip((rng.permutation(np.flatnonzero(codes == c)) for c in range(len(classes))), counts,
                                  strict=True)
        ])
    if len(held) == 0 or len(held) == n:
        raise ValueError(f"test_size={test_size} leaves an empty train or test split of {n} samples")
    return np.setdiff1d(np.arange(n), held), np.sort(held)


def _equal_cuts(n_samples: int, n_clients: int) -> np.ndarray:
    """Interior cut positions of ``n_clients`` near-equal contiguous blocks."""
    return np.round(np.arange(1, n_clients) * (n_samples / n_clients)).astype(np.int64)


def _label_aware_cuts(sorted_codes: np.ndarray, n_clients: int) -> np.ndarray:
    """Cuts near equal blocks such that each block spans at most two labels.

    A block spans at most two labels exactly when every label except the first and the last
    contains a cut (its closed range ``[start, end]``); a cut on the boundary of two labels is
    in both. Walking left to right, a cut never jumps past a label without a cut, and it moves
    forward only as far as needed for the cuts left, two labels each at most, to cover the
    labels left. So equal cuts that already satisfy the rule are kept; otherwise the choice is
    greedy, cut by cut, and may move the cuts more in all than the fewest needed. Needs
    ``n_clients >= n_labels``.
    """
    n = len(sorted_codes)
    ends = np.flatnonzero(np.diff(sorted_codes)) + 1  # start of every label but the first
    labels = list(itertools.pairwise(ends))  # [start, end] of the interior labels
    ideal = _equal_cuts(n, n_clients)
    cuts = np.empty(n_clients - 1, dtype=np.int64)
    prev, uncovered = 0, 0  # last cut; index of the first interior label without a cut
    for j in range(n_clients - 1):
        cuts_left = n_clients - 1 - j
        lo, hi = prev + 1, n - cuts_left  # strictly increasing, room for the cuts after this one
        if uncovered < len(labels):
            hi = min(hi, labels[uncovered][1])
            # The cuts after this one cover at most the last 2 * (cuts_left - 1) labels (two each,
            # on their shared boundary), so this cut must reach the label just before those.
            needed = len(labels) - 2 * (cuts_left - 1) - 1
            if needed >= uncovered:
                lo = max(lo, labels[needed][0])
        prev = cuts[j] = min(max(ideal[j], lo), hi)
        while uncovered < len(labels) and labels[uncovered][0] <= prev:
            uncovered += 1
    return cuts


def _dirichlet(codes, n_classes, n_clients, alpha, min_samples, rng, max_draws: int = 1000):
    alpha = real("alpha", alpha, strict=True)
    if min_samples is None:
        min_samples = max(1, min(10, len(codes) // (4 * n_clients)))
    else:
        min_samples = count("min_samples", min_samples)
    by_class = [np.flatnonzero(codes == c) for c in range(n_classes)]
    for _ in range(max_draws):
        parts = [[] for _ in range(n_clients)]
        for idx in by_class:
            idx = rng.permutation(idx)
            q = rng.dirichlet(np.full(n_clients, alpha))
            cuts = np.round(np.cumsum(q)[:-1] * len(idx)).astype(np.int64)
            for client, piece in enumerate(np.split(idx, cuts)):
                parts[client].append(piece)
        parts = [np.sort(np.concatenate(p)) for p in parts]
        if min(len(p) for p in parts) >= min_samples:
            return parts
    raise ValueError(f"no Dirichlet(alpha={alpha}) draw in {max_draws} gave every client {min_samples} samples; "
                     "raise alpha, lower min_samples or use fewer clients")


def _shards(codes, n_clients, shards_per_client, rng):
    shards_per_client = count("shards_per_client", shards_per_client)
    n_shards = n_clients * shards_per_client
    if n_shards > len(codes):
        raise ValueError(f"n_clients={n_clients} with shards_per_client={shards_per_client} needs {n_shards} shards "
                         f"of at least one sample, but there are {len(codes)} samples; use at most "
                         f"{len(codes) // shards_per_client} clients or fewer shards per client")
    shards = np.array_split(np.argsort(codes, kind="stable"), n_shards)
    dealt = rng.permutation(n_shards).reshape(n_clients, shards_per_client)
    return [np.concatenate([shards[s] for s in hand]) for hand in dealt]
