"""Federated data: :class:`FederatedDataset`, the partitioners, loaders and generators.

``FederatedDataset`` keeps all clients' samples in one client-major array; client ``i`` owns rows
``offsets[i]:offsets[i+1]``. :func:`partition` splits pooled data (``iid``, ``sorted``,
``dirichlet``, ``shards``); :func:`from_client_ids` takes a given assignment. The loaders read
scikit-learn's bundled digits (the offline default), MNIST from IDX files, and svmlight/LIBSVM
files; the generators make data with a known answer.
"""

from fedopt.datasets._dataset import FederatedDataset
from fedopt.datasets.loaders import load_digits
from fedopt.datasets.partition import SCHEMES, from_client_ids, partition

__all__ = ["FederatedDataset", "SCHEMES", "from_client_ids", "load_digits", "partition"]
