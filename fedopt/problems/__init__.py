"""Federated problems ``f(x) = sum_i w_i f_i(x)`` with batched client oracles.

``LeastSquares``, ``Logistic`` (binary), ``Softmax`` (multinomial) and ``MLP`` (one hidden sigmoid
layer). Each owns a :class:`~fedopt.datasets.FederatedDataset`, the client weights
(``"uniform"`` or ``"samples"``) and a backend; see :class:`~fedopt.problems.base.Problem` for
the oracles.
"""

from fedopt.problems.base import WEIGHTS, Problem
from fedopt.problems.linear import LeastSquares, LinearModel, Logistic, Softmax
from fedopt.problems.mlp import MLP

PROBLEMS = {cls.name: cls for cls in (LeastSquares, Logistic, Softmax, MLP)}

__all__ = ["LeastSquares", "LinearModel", "Logistic", "MLP", "PROBLEMS", "Problem", "Softmax", "WEIGHTS"]
