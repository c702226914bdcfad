"""Federated data: :class:`FederatedDataset`, the partitioners, loaders and generators.

``FederatedDataset`` keeps all clients' samples in one client-major array; client ``i`` owns rows
``offsets[i]:offsets[i+1]``. :func:`partition` splits pooled data (``iid``, ``sorted``,
``dirichlet``, ``shards``); :func:`from_client_ids` takes a given assignment. The loaders read
scikit-learn's bundled digits (:func:`load_digits`, the offline default), MNIST and Fashion-MNIST
from IDX files (:func:`load_mnist`, :func:`load_fashion_mnist`, with an opt-in OpenML download to a
local cache), LIBSVM's a9a (:func:`load_a9a`) and svmlight/LIBSVM files (:func:`load_svmlight`);
:mod:`~fedopt.datasets.catalog` (``PAPER_DATA``, ``folder``, ``present``, ``status``, ``download``)
says which of the papers' data sets are in the cache and how to get the others. The generators
make data with a known answer (:func:`make_sparse_regression`, :func:`make_classification`,
:func:`make_fedprox_synthetic`, :func:`make_mnist_like`).
"""

from fedopt.datasets import catalog
from fedopt.datasets._dataset import FederatedDataset
from fedopt.datasets.catalog import PAPER_DATA
from fedopt.datasets.loaders import data_home, load_a9a, load_digits, load_fashion_mnist, load_mnist, load_svmlight
from fedopt.datasets.partition import SCHEMES, from_client_ids, partition
from fedopt.datasets.synthetic import (
    make_classification,
    make_fedprox_synthetic,
    make_mnist_like,
    make_sparse_regression,
)

__all__ = ["PAPER_DATA", "SCHEMES", "FederatedDataset", "catalog", "data_home", "from_client_ids", "load_a9a",
           "load_digits", "load_fashion_mnist", "load_mnist", "load_svmlight", "make_classification",
           "make_fedprox_synthetic", "make_mnist_like", "make_sparse_regression", "partition"]
