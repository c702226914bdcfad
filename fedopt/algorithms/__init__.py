"""Federated methods: one small module per method, each a frozen dataclass with ``init`` and ``round``.

Server-client methods: ``fednmap`` (FedNMap), ``zhang`` (Zhang et al. 2024a), ``fedcanon`` and
``fedcanon2`` (FedCanon I and II), ``scaffold`` (option II), ``fedavg`` (with a server prox).
``scaffnew``: Scaffnew, federated ProxSkip (smooth problems only).
``fedmid``: FedMiD, Euclidean federated mirror descent.
``fedda``: FedDA, Euclidean federated dual averaging (convex regularizers only).
``feddr``: FedDR, federated Douglas-Rachford splitting.
``fedadmm``: FedADMM of Wang, Marella and Anderson (2022).
Decentralized methods (:mod:`fedopt.algorithms.decentralized`, nodes gossiping on a graph):
``depositum``: DEPOSITUM, momentum on a gradient tracker, gossip every ``comm_period`` steps.
``depositum-no-tracking``: DEPOSITUM without gradient tracking (ablation).
``prox-dsgt``: proximal decentralized gradient tracking, one gossip per step.
``deepstorm``: DEEPSTORM, single-gossip variant.
Variational-inequality methods (:mod:`fedopt.algorithms.vi`, on the problems of :mod:`fedopt.problems.vi`):
``local-extra-sgd``: Local Extra SGD, stochastic extragradient with local steps (Wang and Kale, eq. (4)).
``lippax``: LIPPAX, local inexact proximal point with an extra step (Algorithm 1).
``slippax``: SLIPPAX, LIPPAX with Gaussian smoothing in the inner loop (Algorithm 2).
``local-dual-extrapolation``: local dual extrapolation for composite VIs (eq. (13)).
``local-sgda``: Local SGDA, FedAvg on the operator (eq. (11)); diverges on bilinear games.
``minibatch-extragradient``: synchronous minibatch stochastic extragradient, no local steps.
:func:`available` lists the names that :func:`fedopt.run` accepts; :func:`make` builds one from
keyword hyperparameters and refuses unknown names.
"""

from __future__ import annotations

from dataclasses import fields

from fedopt.algorithms.base import Algorithm, Costs, Env, Start, State
from fedopt.algorithms.decentralized import DeepStorm, Depositum, DepositumNoTracking, ProxDSGT
from fedopt.algorithms.fedadmm import FedADMM
from fedopt.algorithms.fedavg import FedAvg
from fedopt.algorithms.fedcanon import FedCanon, FedCanon2
from fedopt.algorithms.fedda import FedDA
from fedopt.algorithms.feddr import FedDR
from fedopt.algorithms.fedmid import FedMiD
from fedopt.algorithms.fednmap import FedNMap
from fedopt.algorithms.scaffnew import Scaffnew
from fedopt.algorithms.scaffold import Scaffold
from fedopt.algorithms.vi import (
    LIPPAX,
    SLIPPAX,
    LocalDualExtrapolation,
    LocalExtraSGD,
    LocalSGDA,
    MinibatchExtragradient,
)
from fedopt.algorithms.zhang import Zhang

ALGORITHMS: dict[str, type[Algorithm]] = {
    cls.name: cls for cls in (FedNMap, Zhang, FedCanon, FedCanon2, Scaffold, FedAvg, Scaffnew, FedMiD, FedDA,
                              FedDR, FedADMM, Depositum, DepositumNoTracking, ProxDSGT, DeepStorm,
                              LocalExtraSGD, LIPPAX, SLIPPAX, LocalDualExtrapolation, LocalSGDA, MinibatchExtragradient)
}


def available() -> list[str]:
    """The method names accepted by :func:`fedopt.run`."""
    return list(ALGORITHMS)


def hyperparameters(name: str) -> dict:
    """``{hyperparameter: default}`` of the method ``name``."""
    return {f.name: f.default for f in fields(_cls(name))}


def make(name: str | Algorithm, **hyperparameters) -> Algorithm:
    """The method ``name`` with these hyperparameters (an :class:`Algorithm` passes through, updated)."""
    if isinstance(name, Algorithm):
        return name.replace(**hyperparameters) if hyperparameters else name
    cls = _cls(name)
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(hyperparameters) - known)
    if unknown:
        raise ValueError(f"{name} has no hyperparameter {', '.join(map(repr, unknown))}; "
                         f"its hyperparameters are {', '.join(sorted(known))}")
    return cls(**hyperparameters)


def canonical(name: str) -> str:
    """The registered spelling of the method ``name`` (case and ``_``/``-`` do not matter, like regularizer names)."""
    key = str(name).lower().replace("_", "-")
    if key not in ALGORITHMS:
        raise ValueError(f"algorithm {name!r} is unknown; choose one of {', '.join(ALGORITHMS)}")
    return key


def _cls(name: str) -> type[Algorithm]:
    return ALGORITHMS[canonical(name)]


__all__ = ["ALGORITHMS", "LIPPAX", "SLIPPAX", "Algorithm", "Costs", "DeepStorm", "Depositum", "DepositumNoTracking",
           "Env", "FedADMM", "FedAvg", "FedCanon", "FedCanon2", "FedDA", "FedDR", "FedMiD", "FedNMap",
           "LocalDualExtrapolation", "LocalExtraSGD", "LocalSGDA", "MinibatchExtragradient", "ProxDSGT", "Scaffnew",
           "Scaffold", "Start", "State", "Zhang", "available", "canonical", "hyperparameters", "make"]
