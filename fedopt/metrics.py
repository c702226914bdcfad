"""Stationarity, objective and sparsity of a model: what the run history records."""

from __future__ import annotations

import math

import numpy as np


def natural_map(problem, regularizer, x, gamma: float, grad=None):
    """``F_nat(x) = (x - prox_{gamma phi}(x - gamma grad f(x))) / gamma``, with the full gradient."""
    grad = problem.grad(x) if grad is None else grad
    return (x - regularizer.prox(x - gamma * grad, gamma)) / gamma


def normal_map(problem, regularizer, z, gamma: float):
    """``F_nor(z) = grad f(prox(z)) + (z - prox(z)) / gamma`` with ``prox = prox_{gamma phi}``."""
    x = regularizer.prox(z, gamma)
    return problem.grad(x) + (z - x) / gamma


def hoyer(x) -> float:
    """Hoyer's sparsity ``(sqrt(p) - ||x||_1 / ||x||_2) / (sqrt(p) - 1)``: 1 for one nonzero, 0 for equal magnitudes."""
    x = np.asarray(x, dtype=np.float64)
    p, l2 = x.size, np.linalg.norm(x)
    if p < 2 or l2 == 0:
        return math.nan
    return float((math.sqrt(p) - np.abs(x).sum() / l2) / (math.sqrt(p) - 1))


def evaluate(problem, regularizer, x, z=None, gamma: float = 1.0, z_gamma: float | None = None) -> dict:
    """The history's model columns at ``x`` (and ``z`` for normal-map methods).

    ``stationarity = ||F_nat(x)||^2`` uses the prox parameter ``gamma``; ``normal_map =
    ||F_nor(z)||^2`` uses ``z_gamma`` (default ``gamma``), the method's own prox parameter of
    ``z`` (``x = prox_{z_gamma phi}(z)``): ``F_nor(z) = grad f(x) + s`` with ``s = (z - x) /
    z_gamma`` the subgradient of phi at x that ``z`` carries, which any other parameter would
    rescale. ``normal_map`` is left out without ``z`` (a method with no pre-prox point has no
    such column); ``objective = f(x) + phi(x)``; ``test_accuracy`` on the test split (the
    training set without one; NaN for regression); ``nnz`` and ``hoyer`` of x.
    """
    loss, grad = problem.loss_grad(x)
    xp = problem.backend.xp
    residual = natural_map(problem, regularizer, x, gamma, grad)
    host = problem.backend.to_numpy(x)
    row = {
        "stationarity": float(xp.sum(residual**2)),
        "objective": loss + float(regularizer.value(x)),
        "test_accuracy": problem.accuracy(x) if problem.is_classifier else math.nan,
        "nnz": int(np.count_nonzero(host)),
        "hoyer": hoyer(host),
    }
    if z is not None:
        z_gamma = gamma if z_gamma is None else z_gamma
        prox_z = regularizer.prox(z, z_gamma)
        grad_z = grad if bool(xp.array_equal(prox_z, x)) else problem.grad(prox_z)
        row["normal_map"] = float(xp.sum((grad_z + (z - prox_z) / z_gamma) ** 2))
    return row


def evaluate_runs(problem, regularizer, X, Z=None, gamma=1.0, z_gamma=None) -> list[dict]:
    """:func:`evaluate` for every run of a batch (:mod:`fedopt.batch`): ``X`` and ``Z`` are the runs'
    ``(R, 1, p)`` server points, ``problem`` and ``regularizer`` the batch's, ``gamma`` and
    ``z_gamma`` floats or ``(R, 1, 1)`` arrays. One oracle pass over all runs' clients; the sums
    are per run. Without ``Z`` the rows have no ``normal_map``, as in :func:`evaluate`."""
    count = X.shape[0]
    losses, grad = problem.loss_grad(X)
    xp = problem.backend.xp

    def per_run_sum(A):
        return problem.backend.to_numpy((A**2).reshape(count, -1).sum(axis=1))

    stationarity = per_run_sum(natural_map(problem, regularizer, X, gamma, grad))
    values = regularizer.value(X)
    host = problem.backend.to_numpy(X).reshape(count, -1)
    rows = [{
        "stationarity": float(stationarity[r]),
        "objective": losses[r] + values[r],
        "test_accuracy": problem.problems[r].accuracy(X[r, 0]) if problem.problem.is_classifier else math.nan,
        "nnz": int(np.count_nonzero(host[r])),
        "hoyer": hoyer(host[r]),
    } for r in range(count)]
    if Z is not None:
        z_gamma = gamma if z_gamma is None else z_gamma
        prox_z = regularizer.prox(Z, z_gamma)
        grad_z = grad if bool(xp.array_equal(prox_z, X)) else problem.grad(prox_z)
        for row, normal in zip(rows, per_run_sum(grad_z + (Z - prox_z) / z_gamma), strict=True):
            row["normal_map"] = float(normal)
    return rows
