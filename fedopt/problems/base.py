"""The federated objective ``f(x) = sum_i w_i f_i(x)`` and its batched client oracles."""

from __future__ import annotations

import copy
import functools
from typing import ClassVar

import numpy as np
import scipy.sparse as sp

from fedopt._backend import Backend, get_backend
from fedopt._checks import count
from fedopt.datasets import FederatedDataset
from fedopt.kernels import client_bounds
from fedopt.kernels.cpu.sampling import minibatch_rows
from fedopt.problems._arguments import PointArguments

WEIGHTS = ("uniform", "samples")


def client_weights(dataset: FederatedDataset, weights) -> np.ndarray:
    """``w_i``: ``"uniform"`` (1/n, as in the papers), ``"samples"`` (m_i / m: the pooled objective) or given.

    With sample weights ``s_j``, ``"samples"`` is ``S_i / S`` (``S_i = sum_{j in i} s_j``, ``S`` their
    total), so that ``f`` is the pooled weighted mean ``sum_j s_j l_j / S``.
    """
    if isinstance(weights, str):
        if weights == "uniform":
            return np.full(dataset.n_clients, 1.0 / dataset.n_clients)
        if weights == "samples":
            totals = dataset.client_weight_totals
            return totals / totals.sum()
        raise ValueError(f"weights={weights!r} is unknown; choose 'uniform', 'samples' or an array of n_clients floats")
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (dataset.n_clients,):
        raise ValueError(f"weights must have one entry per client, shape ({dataset.n_clients},), got {w.shape}")
    if not (np.isfinite(w).all() and (w >= 0).all() and abs(w.sum() - 1) < 1e-8):
        raise ValueError("weights must be finite, >= 0 and sum to 1; divide them by their sum")
    return w


def kernel_sample_weights(dataset: FederatedDataset) -> np.ndarray:
    """The kernels' per-row weights ``s'_j = s_j m_i / S_i`` (mean 1 on each client), or an empty
    array when the dataset has no ``sample_weight``."""
    if dataset.sample_weight is None:
        return np.empty(0)
    sizes = dataset.client_sizes
    return dataset.sample_weight * np.repeat(sizes / dataset.client_weight_totals, sizes)


class Problem(PointArguments):
    """Base class of the federated problems: the data on a backend and the batched oracles.

    A problem owns a :class:`~fedopt.datasets.FederatedDataset` and the client weights ``w_i``;
    client ``i``'s loss ``f_i`` is the mean loss over its ``m_i`` samples, or with the dataset's
    ``sample_weight`` ``s_j`` the weighted mean ``sum_j s_j l_j / S_i``. The kernels take the
    weights rescaled to ``s'_j = s_j m_i / S_i`` (mean 1 on each client), so that
    ``f_i = (1/m_i) sum_j s'_j l_j`` and a minibatch of ``b`` uniform draws of the client's rows
    gives the unbiased estimate ``(1/b) sum_{j in batch} s'_j grad l_j``. Every oracle works on
    all clients at once: ``W`` is ``(n_clients, p)`` (one point per client) or ``(p,)`` (one
    point for all), and minibatches are global row indices ``(n_clients, batch)`` drawn on the
    host (see :meth:`sample_rows`) so that every backend walks the same trajectory.
    Arrays come back on the problem's backend (NumPy, or CuPy for ``"gpu"``).
    """

    name: ClassVar[str] = ""
    is_classifier: ClassVar[bool] = True
    #: Whether this is a :meth:`cohort` view (one round's clients) rather than the whole population.
    is_cohort: bool = False
    #: Whether the oracles take the dataset's ``sample_weight`` (else a weighted dataset is refused).
    supports_sample_weight: ClassVar[bool] = False

    def __init__(self, dataset: FederatedDataset, weights="uniform", backend: str | Backend = "auto"):
        self._options = {"weights": weights}
        if not isinstance(dataset, FederatedDataset):
            raise TypeError("dataset must be a fedopt.datasets.FederatedDataset; build one with "
                            "fedopt.datasets.partition(X, y, n_clients=...)")
        if dataset.sample_weight is not None and not self.supports_sample_weight:
            raise ValueError(f"{type(self).__name__} does not support sample_weight; use a dataset without "
                             "sample weights (repeat samples instead)")
        self.dataset = dataset
        self.weights = client_weights(dataset, weights)
        self.backend = get_backend(backend)
        if dataset.is_sparse and self.backend.name == "gpu":
            raise ValueError("sparse X runs on backend='numpy' or 'numba'; for 'gpu' densify it with X.toarray()")
        self.dtype = dataset.dtype
        self._offsets = dataset.offsets  # client i owns rows offsets[i]:offsets[i+1]; see client_rows()
        self._starts = dataset.offsets[:-1]
        self._client_sizes = dataset.client_sizes.astype(np.float64)  # m_i, for the minibatch draws
        self._X = self._to_backend_features(dataset.X)
        self._y = self.backend.xp.asarray(self._targets(dataset.y), dtype=self.dtype)
        self._sample_weights = self.backend.xp.asarray(kernel_sample_weights(dataset), dtype=self.dtype)
        self._X_test = self._y_test = None
        if dataset.X_test is not None:
            self._X_test = self._to_backend_features(dataset.X_test)
            self._y_test = self.backend.xp.asarray(self._targets(dataset.y_test), dtype=self.dtype)
        self._no_rows = np.empty((self.n_clients, 0), dtype=np.int64)
        self._weights_device = self.backend.xp.asarray(self.weights, dtype=self.dtype)

    @property
    def has_sample_weight(self) -> bool:
        """Whether the samples carry weights (the dataset's ``sample_weight``)."""
        return len(self._sample_weights) > 0

    # ------------------------------------------------------------------ what subclasses define
    @property
    def n_params(self) -> int:
        """``p``, the length of the flat parameter vector."""
        raise NotImplementedError

    def _targets(self, y: np.ndarray) -> np.ndarray:
        """The dataset's targets in the form the kernels take (values, +-1 or class codes); checks them."""
        raise NotImplementedError

    def _oracle(self, W, rows, loss_out, grad_out) -> None:
        """Call the backend kernel: write client losses and gradients (either may be empty)."""
        raise NotImplementedError

    def decision_function(self, x, X=None):
        """Outputs of the model ``x`` on the raw rows ``X`` (default: the training set)."""
        raise NotImplementedError

    def fused_local_steps(self, rows, D, lr, prox_kind, thetas, w, Z, P) -> bool:
        """Run a round's local steps in one kernel call where the backend has one; False if not.

        See ``local_steps_linear`` in :mod:`fedopt.kernels`; ``rows`` is ``(Q, n, b)`` or None.
        """
        return False

    def _per_step_rows(self, rows, steps: int):
        """``rows`` of shape ``(steps, n, b)`` as they are, or the kernels' "all rows" ``(steps, n, 0)`` for None."""
        return np.empty((steps, self.n_clients, 0), dtype=np.int64) if rows is None else rows

    def fused_tracking_steps(self, rows, node_scale, gamma, alpha, beta, nesterov, tracking, prox_kind, theta, w,
                             P, NU, MU, Y, G, adapt_first=True, adapt_after=False) -> bool:
        """DEPOSITUM's iterations without gossip in one kernel call where the backend has one; False if not.

        See ``tracking_steps`` in :mod:`fedopt.kernels` (also for ``adapt_first`` and ``adapt_after``);
        ``rows`` is ``(T, n, b)`` or ``(T, n, 0)``.
        """
        return False

    def blocks(self) -> dict:
        """Named parts of the flat parameter vector, ``{name: (start, shape)}`` in C order: what a
        regularizer can be restricted to (:func:`fedopt.regularizers.on_block`); empty here."""
        return {}

    def init(self, seed=None):
        """The initial point ``x_0`` (zeros for linear models)."""
        return self.backend.xp.zeros(self.n_params, dtype=self.dtype)

    def on(self, backend: str | Backend):
        """This problem with its data on another backend (itself when it is already there)."""
        backend = get_backend(backend)
        if backend.name == self.backend.name:
            return self
        return type(self)(self.dataset, backend=backend, **self._options)

    @staticmethod
    def client_rows(problems):
        """The clients of ``problems`` side by side as one problem view: client row ``r * n + i`` is
        client ``i`` of ``problems[r]``, and the oracles take the kernels' ``(3, N)`` client bounds.
        Problems on one data set share its arrays; different data sets (other partitions of the
        same samples, say) are stacked once each. :class:`fedopt.batch.BatchProblem` runs its
        oracles on the view; the view's own ``average`` and ``loss`` are not federated ones, and it
        takes the options of the first problem (all but the client weights must be the same)."""
        first = problems[0]
        distinct = list({id(p.dataset): p for p in problems}.values())
        if any(p.dataset.scale != first.dataset.scale or p._X.dtype != first._X.dtype for p in distinct):
            raise ValueError("the data sets of a batch must store their features alike (one dtype and scale)")
        for r, p in enumerate(problems):
            differ = [name for name, value in p._options.items()
                      if name != "weights" and not np.array_equal(value, first._options[name])]
            if differ:  # e.g. each data set's own feature means as `center`: one view runs every client row
                raise ValueError(f"the problems of a batch must share their {' and '.join(differ)}: those of runs 0 "
                                 f"and {r} differ; run them in separate batches")
        base, position = {}, 0
        for problem in distinct:
            base[id(problem.dataset)] = position
            position += problem.dataset.n_samples
        view = copy.copy(first)
        if len(distinct) > 1:
            xp = first.backend.xp
            view._X = (sp.vstack([p._X for p in distinct], format="csr") if sp.issparse(first._X)
                       else xp.concatenate([p._X for p in distinct]))
            view._y = xp.concatenate([p._y for p in distinct])
            if any(p.has_sample_weight for p in distinct):  # an unweighted data set weighs each of its rows 1
                view._sample_weights = xp.concatenate([p._sample_weights if p.has_sample_weight else
                                                       xp.ones(p.dataset.n_samples, dtype=p.dtype) for p in distinct])
        bounds = [(p.dataset.offsets[:-1] + base[id(p.dataset)], p.dataset.offsets[1:] + base[id(p.dataset)])
                  for p in problems]
        starts, ends = (np.concatenate(part) for part in zip(*bounds, strict=True))
        # visiting order: the clients on the same rows one after another (their rows then stay in cache)
        view._offsets = np.stack([starts, ends, np.argsort(starts, kind="stable")])
        view._starts = view._offsets[0]
        view._client_sizes = np.concatenate([p._client_sizes for p in problems])
        view._no_rows = np.empty((view.n_clients, 0), dtype=np.int64)
        return view

    def draw_cohort(self, rng: np.random.Generator, size: int, sampling: str = "uniform"):
        """One round's cohort: ``(clients, aggregation weights)``, ``size`` client indices (sorted)
        drawn from ``rng``, and the weights ``a_k`` of :meth:`average` on their view.

        ``"uniform"``: ``size`` distinct clients, each set equally likely; ``a_k = w_{i_k} / sum_S w``.
        Clients of weight 0 add nothing to the objective and are not drawn (unless ``size`` is every
        client): a cohort of them alone would average 0 / 0 (see :meth:`check_cohort`).
        ``"weighted"``: ``size`` draws with replacement, client ``i`` with probability ``w_i``;
        ``a_k = 1 / size``. See :meth:`fedopt.algorithms.LocalStepsMethod.next_round` for what each
        estimates. Costs ``O(size log n)``, not ``O(n)`` (partial participation is an extension
        beyond the papers).
        """
        n = self.n_clients
        if sampling == "uniform":
            pool = self._positive_clients if size < n else None
            clients = np.sort(rng.choice(n if pool is None else pool, size, replace=False))
            share = self.weights[clients]
            return clients, share / share.sum()
        if sampling != "weighted":
            raise ValueError(f"sampling must be 'uniform' or 'weighted', got {sampling!r}")
        cumulative = self._cumulative_weights
        clients = np.sort(np.minimum(np.searchsorted(cumulative, rng.random(size) * cumulative[-1], side="right"),
                                     n - 1))
        return clients, np.full(size, 1.0 / size)

    def check_cohort(self, size: int, name: str, value=None) -> None:
        """Refuse a uniform draw of ``size`` distinct clients (``name`` the argument that asks for
        it, given as ``value``: a count or a fraction) when fewer than ``size`` clients have a positive weight."""
        pool = self._positive_clients
        if pool is not None and len(pool) < size < self.n_clients:
            given = size if value is None or value == size else f"{value!r} ({size} of {self.n_clients} clients)"
            raise ValueError(f"{name}={given} asks for more distinct clients than the {len(pool)} of positive weight "
                             f"(a client of weight 0 adds nothing to the objective and is never drawn); use at most "
                             f"{len(pool)}")

    @functools.cached_property
    def _positive_clients(self) -> np.ndarray | None:
        """The clients of positive weight, or None when every client has one."""
        positive = np.flatnonzero(np.asarray(self.weights) > 0)
        return None if len(positive) == self.n_clients else positive

    @functools.cached_property
    def _cumulative_weights(self) -> np.ndarray:
        """``cumsum(w)``, once: a weighted draw is then ``O(size log n)``."""
        return np.cumsum(self.weights)

    def cohort(self, clients, weights):
        """The view of this problem that one round of partial participation sees: client ``k`` of the
        view is client ``clients[k]`` (a client may repeat), :meth:`average` weighs it ``weights[k]``,
        and :meth:`population_sum` by its own weight ``w_i`` (counted once: ``last_occurrences``
        holds the positions of each client's last occurrence, whose state update is the one kept).
        Only the cohort's rows are read; the data stay shared."""
        starts, ends = client_bounds(self._offsets)
        view = copy.copy(self)
        view._offsets = np.stack([starts[clients], ends[clients]])
        view._starts = view._offsets[0]
        view._client_sizes = self._client_sizes[clients]
        view._no_rows = np.empty((len(clients), 0), dtype=np.int64)
        xp = self.backend.xp
        view._weights_device = xp.asarray(weights, dtype=self.dtype)
        view.last_occurrences = len(clients) - 1 - np.unique(clients[::-1], return_index=True)[1]
        once = np.zeros(len(clients))
        once[view.last_occurrences] = self.weights[clients[view.last_occurrences]]
        view._population_weights = xp.asarray(once, dtype=self.dtype)
        view.is_cohort = True
        return view

    # ------------------------------------------------------------------ sizes
    @property
    def n_clients(self) -> int:
        """``n``, the number of clients (of client rows in a :meth:`client_rows` view)."""
        return len(self._client_sizes)

    @property
    def n_features(self) -> int:
        return self.dataset.n_features

    # ------------------------------------------------------------------ oracles
    def client_loss_grad(self, W, rows=None, *, loss=True, grad=True, grad_out=None):
        """``(f_i(w_i), grad f_i(w_i))`` for every client, on its minibatch ``rows[i]`` or all its data.

        Returns ``(loss (n,), grad (n, p))``; pass ``loss=False`` or ``grad=False`` to skip one
        (it comes back as None), and ``grad_out`` to reuse an ``(n, p)`` array.
        """
        W = self._points(W)
        rows = self._rows(rows)
        xp = self.backend.xp
        loss_out = xp.empty(self.n_clients if loss else 0, dtype=self.dtype)
        if grad and grad_out is None:
            grad_out = xp.empty((self.n_clients, self.n_params), dtype=self.dtype)
        elif grad:
            self._check_out(grad_out)
        self._oracle(W, rows, loss_out, grad_out if grad else xp.empty((0, 0), dtype=self.dtype))
        return (loss_out if loss else None), (grad_out if grad else None)

    def client_grad(self, W, rows=None, out=None):
        """``grad f_i(w_i)`` of every client, shape ``(n_clients, p)``: minibatch ``rows`` or full data."""
        return self.client_loss_grad(W, rows, loss=False, grad_out=out)[1]

    def client_loss(self, W, rows=None):
        """``f_i(w_i)`` of every client, shape ``(n_clients,)``."""
        return self.client_loss_grad(W, rows, grad=False)[0]

    def loss(self, x) -> float:
        """``f(x) = sum_i w_i f_i(x)`` on all the training data."""
        return float(self.average(self.client_loss(self._vector(x))))

    def grad(self, x):
        """``grad f(x) = sum_i w_i grad f_i(x)`` on all the training data, shape ``(p,)``."""
        return self.average(self.client_grad(self._vector(x)))

    def loss_grad(self, x):
        """``(f(x), grad f(x))`` in one pass over the data."""
        losses, grads = self.client_loss_grad(self._vector(x))
        return float(self.average(losses)), self.average(grads)

    def sample_rows(self, rng: np.random.Generator, batch_size: int, steps: int | None = None) -> np.ndarray:
        """Minibatch row indices drawn uniformly with replacement from each client's own rows.

        Shape ``(n_clients, batch_size)``, or ``(steps, n_clients, batch_size)``; int64 global
        row indices on the host, to pass to the oracles.
        """
        batch_size = count("batch_size", batch_size)
        shape = (self.n_clients, batch_size) if steps is None else (int(steps), self.n_clients, batch_size)
        # starts_i + floor(u * m_i) for u uniform in [0, 1): uniform on client i's rows; written over
        # u's own memory (a second 5 MB array at n = 1000, Q = 10, b = 64 cost 2.7 ms in page faults)
        return minibatch_rows(rng.random(shape), self._client_sizes, self._starts)

    # ------------------------------------------------------------------ evaluation
    def score(self, x, test: bool = True) -> float:
        """Accuracy for a classifier, R^2 for a regression, on the test split (or the training set:
        on a :meth:`cohort` view, its clients' rows only)."""
        if test and self._X_test is not None:
            X, y = self._X_test, self._y_test
        elif self.is_cohort:
            starts, ends = client_bounds(self._offsets)
            sizes = ends - starts
            rows = np.repeat(starts - np.cumsum(sizes) + sizes, sizes) + np.arange(sizes.sum())
            X, y = self._X[rows], self._y[self.backend.xp.asarray(rows)]
        else:
            X, y = self._X, self._y
        return float(self._score(self.decision_function(self._vector(x), X), y))

    def accuracy(self, x, test: bool = True) -> float:
        """Fraction of correctly classified samples on the test split (or the training set)."""
        if not self.is_classifier:
            raise ValueError(f"{type(self).__name__} is a regression; use score() for R^2")
        return self.score(x, test)

    def _score(self, outputs, y):
        """Accuracy of the outputs ``(m, n_classes)`` against class codes."""
        xp = self.backend.xp
        return xp.mean(xp.argmax(outputs, axis=1) == y)

    # ------------------------------------------------------------------ plumbing
    def _features(self, X):
        """Raw rows as floats of the problem's dtype, scaled."""
        if sp.issparse(X):
            return X * self.dataset.scale if self.dataset.scale != 1 else X
        X = X.astype(self.dtype, copy=False)
        return X * self.dtype.type(self.dataset.scale) if self.dataset.scale != 1 else X

    def _to_backend_features(self, X):
        if sp.issparse(X):
            return X if X.dtype == self.dtype else X.astype(self.dtype)
        if X.dtype == np.uint8:
            return self.backend.xp.asarray(X)
        return self.backend.asarray(X, dtype=self.dtype)

    def _rows(self, rows):
        if rows is None:
            return self._no_rows
        rows = np.asarray(self.backend.to_numpy(rows))
        if rows.ndim != 2 or rows.shape[0] != self.n_clients or rows.dtype.kind not in "iu" or rows.shape[1] == 0:
            raise ValueError(f"rows must be an integer array of shape ({self.n_clients}, batch_size) with batch_size "
                             f">= 1, got {rows.dtype} {rows.shape}; draw it with sample_rows()")
        n_rows = self._X.shape[0]  # the stacked data sets of a client_rows() view
        if rows.min() < 0 or rows.max() >= n_rows:
            raise ValueError(f"rows holds indices outside 0..{n_rows - 1}")
        return np.ascontiguousarray(rows, dtype=np.int64)

    def _check_out(self, out):
        if out.shape != (self.n_clients, self.n_params) or out.dtype != self.dtype or not out.flags.c_contiguous:
            raise ValueError(f"grad_out must be a C-contiguous {self.dtype} array of shape "
                             f"({self.n_clients}, {self.n_params}), got {out.dtype} {tuple(out.shape)}")

    def average(self, per_client):
        """``sum_i w_i v_i``: the weighted average over the client axis (the server's aggregation; on
        a :meth:`cohort` view, the cohort's aggregate)."""
        return self._weights_device @ per_client

    def population_sum(self, per_client):
        """``sum_i w_i v_i`` over this view's clients with their own weights: on a :meth:`cohort`,
        the change of ``sum_i w_i v_i`` over all clients when only the cohort's ``v_i`` changed
        (SCAFFOLD's server control variate); on the whole population, :meth:`average`."""
        return self._population_weights @ per_client if self.is_cohort else self.average(per_client)

    def updated_sum(self, total, new, old):
        """``sum_i w_i v_i`` over all clients once this view's clients' ``v_i`` went from ``old()`` to
        ``new``: :meth:`average` of ``new`` on the whole population; on a :meth:`cohort`, ``total``
        (the sum before the round) plus :meth:`population_sum` of the change, the other clients'
        ``v_i`` unchanged (FedDR's and FedADMM's server update with partial participation). ``old``
        is a function, called only on a cohort: full participation never builds the old values."""
        return total + self.population_sum(new - old()) if self.is_cohort else self.average(new)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.dataset!r}, p={self.n_params}, dtype={self.dtype}, "
                f"backend={self.backend.name!r})")

