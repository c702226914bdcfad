"""Loaders of real data sets, partitioned among clients. Nothing here touches the network unless asked."""

from __future__ import annotations

from fedopt.datasets import partition as _partition


def load_digits(n_clients: int = 10, partition: str = "sorted", *, seed=0, test_size: float | None = 0.2,
                dtype=None, **partition_options):
    """scikit-learn's bundled 8x8 digits (1797 samples, 64 features, 10 classes), federated.

    The embedded default data set: it ships with scikit-learn and loads offline. Pixels (0..16)
    are scaled to [0, 1]. ``partition`` names the scheme of :func:`fedopt.datasets.partition`
    (``"sorted"`` by default, the papers' heterogeneity); a stratified ``test_size`` fraction is
    held out first with the same ``seed``.
    """
    from sklearn.datasets import load_digits as sklearn_digits

    data = sklearn_digits()
    return _partition.partition(data.data / 16.0, data.target, n_clients, partition, seed=seed,
                                test_size=test_size, dtype=dtype, name=f"digits/{partition}/{n_clients}",
                                **partition_options)
