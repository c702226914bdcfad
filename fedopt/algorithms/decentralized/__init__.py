"""Decentralized methods: clients (nodes) on a graph exchange vectors with their neighbours, no server.

``depositum``: DEPOSITUM (OPTION I Polyak / OPTION II Nesterov momentum on a gradient tracker,
gossip every ``comm_period`` steps); ``depositum-no-tracking``: its ablation without gradient
tracking (the no-momentum ablation is ``momentum=0``); ``prox-dsgt``: proximal gradient tracking
with one gossip per step; ``deepstorm``: DEEPSTORM's single-gossip variant. Graphs and mixing
matrices are in :mod:`fedopt.algorithms.decentralized.topology`.
"""

from fedopt.algorithms.decentralized import topology
from fedopt.algorithms.decentralized.base import DecentralizedMethod
from fedopt.algorithms.decentralized.deepstorm import DeepStorm
from fedopt.algorithms.decentralized.depositum import Depositum, DepositumNoTracking
from fedopt.algorithms.decentralized.prox_dsgt import ProxDSGT
from fedopt.algorithms.decentralized.topology import Topology

__all__ = ["DecentralizedMethod", "DeepStorm", "Depositum", "DepositumNoTracking", "ProxDSGT", "Topology", "topology"]
