"""``FederatedDataset``: every client's samples in one client-major array with offsets."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

#: Storage dtypes of the features. Integer pixels (uint8) are multiplied by ``scale`` inside the
#: kernels, which then move a quarter of the bytes of float32 and an eighth of float64.
STORAGE_DTYPES = (np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.uint8))


def _all_finite(values, chunk: int = 1 << 22) -> bool:
    """Whether every entry is finite, checked in chunks (no boolean array of the whole data)."""
    flat = values.reshape(-1)
    return all(bool(np.isfinite(flat[i : i + chunk]).all()) for i in range(0, flat.size, chunk))


def check_features(X, name: str = "X"):
    """``X`` as a C-contiguous 2-D array of a storage dtype, or a canonical CSR matrix; finite."""
    if sp.issparse(X):
        X = sp.csr_matrix(X)
        if X.dtype.kind not in "biuf":
            raise ValueError(f"{name} must hold real numbers, got dtype {X.dtype}")
        if X.dtype not in STORAGE_DTYPES[:2]:
            X = X.astype(np.float64)
        X.sum_duplicates()
        X.sort_indices()
        values = X.data
    else:
        X = np.asarray(X)
        if X.ndim != 2:
            raise ValueError(f"{name} must be a 2-D array (n_samples, n_features), got shape {X.shape}")
        if X.dtype not in STORAGE_DTYPES:
            if X.dtype.kind not in "biuf":
                raise ValueError(f"{name} must hold numbers, got dtype {X.dtype}")
            X = X.astype(np.float64)
        X = np.ascontiguousarray(X)
        values = X
    if values.dtype.kind == "f" and not _all_finite(values):
        bad = np.argwhere(~np.isfinite(X.toarray() if sp.issparse(X) else X))[0]
        raise ValueError(f"{name} contains NaN or inf (first at row {bad[0]}, column {bad[1]}); "
                         "drop or impute those entries first")
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"{name} is empty (shape {X.shape}); need at least one sample and one feature")
    return X


def check_targets(y, n_samples: int, name: str = "y", classes=None) -> np.ndarray:
    """``y`` as a 1-D array of ``n_samples`` finite floats, or of class codes when ``classes`` is set."""
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {y.shape}")
    if len(y) != n_samples:
        raise ValueError(f"{name} has {len(y)} entries but X has {n_samples} rows; they must match")
    if classes is None:
        y = y.astype(np.float64)
        if not np.isfinite(y).all():
            raise ValueError(f"{name} contains NaN or inf (first at index {np.flatnonzero(~np.isfinite(y))[0]})")
        return y
    if y.dtype.kind not in "iu" or (len(y) and (y.min() < 0 or y.max() >= len(classes))):
        raise ValueError(f"{name} must hold class codes 0..{len(classes) - 1} (indices into classes)")
    return y.astype(np.int64)


def check_sample_weight(sample_weight, n_samples: int, offsets=None) -> np.ndarray:
    """``sample_weight`` as ``n_samples`` finite float64 weights >= 0; with ``offsets``, every client's
    weights must also have a positive sum."""
    s = np.asarray(sample_weight)
    if s.dtype.kind not in "biuf":
        raise ValueError(f"sample_weight must hold numbers, got dtype {s.dtype}")
    s = s.astype(np.float64)
    if s.shape != (n_samples,):
        raise ValueError(f"sample_weight must give one weight per sample: shape ({n_samples},), got {s.shape}")
    bad = np.flatnonzero(~(np.isfinite(s) & (s >= 0)))
    if len(bad):
        raise ValueError(f"sample_weight must be finite and >= 0, got {s[bad[0]]} at index {bad[0]}; "
                         "drop or fix the samples with negative, NaN or inf weights")
    if offsets is not None:
        zero = np.flatnonzero(np.add.reduceat(s, offsets[:-1]) <= 0)
        if len(zero):
            raise ValueError(f"sample_weight sums to 0 on client {zero[0]}: every client needs a sample of positive "
                             "weight; drop the client's samples or give them weights > 0")
    return s


@dataclass(frozen=True, eq=False)
class FederatedDataset:
    """All clients' samples in one client-major array: client ``i`` owns rows ``offsets[i]:offsets[i+1]``.

    Parameters
    ----------
    X : ndarray (n_samples, n_features) of float64, float32 or uint8, or scipy.sparse CSR
        Features, client-major. uint8 storage (image pixels) is scaled by ``scale`` in the kernels.
    y : ndarray (n_samples,)
        Regression targets (float64), or class codes ``0..n_classes-1`` when ``classes`` is given.
    offsets : ndarray (n_clients + 1,) of int64
        Client boundaries, strictly increasing from 0 to ``n_samples``: no client is empty.
    X_test, y_test : optional
        A held-out test split shared by all clients (same storage and encoding as ``X``, ``y``).
    classes : ndarray or None
        The original labels of the class codes; None for regression.
    scale : float
        The features are ``scale * X`` (1/255 for raw pixels; 1 otherwise).
    feature_names : tuple of str or None
    name : str
        A short description, e.g. ``"digits/sorted/20"``.
    info : dict
        Anything else a loader or generator knows, e.g. the true coefficients of synthetic data.
    sample_weight : ndarray (n_samples,) of float64 or None
        Per-sample weights ``s_j >= 0`` in the row order of ``X`` (scikit-learn's ``sample_weight``):
        client ``i``'s loss is the weighted mean ``sum_j s_j l_j / S_i`` over its rows, with
        ``S_i = sum_j s_j > 0``. None weighs every sample 1.
    """

    X: Any
    y: np.ndarray
    offsets: np.ndarray
    X_test: Any = None
    y_test: np.ndarray | None = None
    classes: np.ndarray | None = None
    scale: float = 1.0
    feature_names: tuple | None = None
    name: str = ""
    info: dict = field(default_factory=dict)
    sample_weight: np.ndarray | None = None

    def __post_init__(self):
        set_ = object.__setattr__
        X = check_features(self.X)
        if self.classes is not None:
            set_(self, "classes", np.asarray(self.classes))
        set_(self, "X", X)
        set_(self, "y", check_targets(self.y, X.shape[0], classes=self.classes))
        offsets = np.asarray(self.offsets)
        if offsets.ndim != 1 or len(offsets) < 2 or offsets.dtype.kind not in "iu":
            raise ValueError("offsets must be a 1-D integer array [0, ..., n_samples] of length n_clients + 1")
        offsets = offsets.astype(np.int64)
        if offsets[0] != 0 or offsets[-1] != X.shape[0]:
            raise ValueError(f"offsets must start at 0 and end at n_samples={X.shape[0]}, "
                             f"got {offsets[0]} and {offsets[-1]}")
        empty = np.flatnonzero(np.diff(offsets) <= 0)
        if len(empty):
            raise ValueError(f"client {empty[0]} is empty (offsets must be strictly increasing); "
                             "use fewer clients or another partition")
        set_(self, "offsets", offsets)
        if self.sample_weight is not None:
            set_(self, "sample_weight", check_sample_weight(self.sample_weight, X.shape[0], offsets))
        if (self.X_test is None) != (self.y_test is None):
            raise ValueError("give both X_test and y_test, or neither")
        if self.X_test is not None:
            X_test = check_features(self.X_test, "X_test")
            if X_test.shape[1] != X.shape[1]:
                raise ValueError(f"X_test has {X_test.shape[1]} features but X has {X.shape[1]}")
            if sp.issparse(X_test) != sp.issparse(X) or (not sp.issparse(X) and X_test.dtype != X.dtype):
                raise ValueError("X_test must be stored like X (both dense of one dtype, or both sparse)")
            set_(self, "X_test", X_test)
            set_(self, "y_test", check_targets(self.y_test, X_test.shape[0], "y_test", self.classes))
        scale = float(self.scale)
        if not (scale > 0 and np.isfinite(scale)):
            raise ValueError(f"scale must be a finite number > 0, got {self.scale!r}")
        set_(self, "scale", scale)

    # ------------------------------------------------------------------ sizes and metadata
    @property
    def n_clients(self) -> int:
        return len(self.offsets) - 1

    @property
    def n_samples(self) -> int:
        return self.X.shape[0]

    @property
    def n_features(self) -> int:
        return self.X.shape[1]

    @property
    def n_classes(self) -> int:
        """Number of classes; 0 for regression targets."""
        return 0 if self.classes is None else len(self.classes)

    @property
    def client_sizes(self) -> np.ndarray:
        """``m_i``, the number of samples of each client."""
        return np.diff(self.offsets)

    @property
    def client_weight_totals(self) -> np.ndarray:
        """``S_i``, the total sample weight of each client: ``m_i`` without ``sample_weight``."""
        if self.sample_weight is None:
            return self.client_sizes.astype(np.float64)
        return np.add.reduceat(self.sample_weight, self.offsets[:-1])

    @property
    def is_sparse(self) -> bool:
        return sp.issparse(self.X)

    @property
    def dtype(self) -> np.dtype:
        """The floating dtype models and gradients are computed in (float32 for uint8 pixels)."""
        return self.X.dtype if self.X.dtype in STORAGE_DTYPES[:2] else np.dtype(np.float32)

    @property
    def owner(self) -> np.ndarray:
        """The client of every row, shape ``(n_samples,)``."""
        return np.repeat(np.arange(self.n_clients), self.client_sizes)

    def client(self, i: int) -> tuple[Any, np.ndarray]:
        """Client ``i``'s raw ``(X_i, y_i)`` (views where possible)."""
        if not 0 <= i < self.n_clients:
            raise IndexError(f"client index {i} is out of range for {self.n_clients} clients")
        rows = slice(self.offsets[i], self.offsets[i + 1])
        return self.X[rows], self.y[rows]

    def features(self, X=None) -> np.ndarray:
        """Dense features ``scale * X`` in :attr:`dtype` (of the training set, or of ``X``)."""
        X = self.X if X is None else X
        X = X.toarray() if sp.issparse(X) else X
        return (X.astype(self.dtype) * self.dtype.type(self.scale)) if self.scale != 1 else X.astype(self.dtype)

    def label_histogram(self) -> np.ndarray:
        """Counts of each class on each client, shape ``(n_clients, n_classes)``."""
        if self.classes is None:
            raise ValueError("label_histogram needs class labels; this dataset holds regression targets")
        return np.stack([np.bincount(self.client(i)[1], minlength=self.n_classes) for i in range(self.n_clients)])

    def __repr__(self) -> str:
        kind = f"{self.n_classes} classes" if self.classes is not None else "regression"
        storage = "CSR" if self.is_sparse else str(self.X.dtype)
        test = f", test={self.X_test.shape[0]}" if self.X_test is not None else ""
        test += ", sample weights" if self.sample_weight is not None else ""
        sizes = self.client_sizes
        return (f"FederatedDataset({self.name or 'unnamed'}: {self.n_clients} clients, {self.n_samples} samples "
                f"({sizes.min()}..{sizes.max()} per client), {self.n_features} features {storage}, {kind}{test})")
