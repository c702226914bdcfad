"""FedNMap for l1-regularized logistic regression, one client at a time in plain NumPy.

The usual shape of research code: a Python loop over clients and local steps, each step a
gather, two matrix-vector products and a soft threshold. It takes the same minibatch rows as
fedopt (``rows[l, i]``, global indices) so the two can be checked against each other.
"""

from __future__ import annotations

import numpy as np


def soft_threshold(v, tau):
    return np.sign(v) * np.maximum(np.abs(v) - tau, 0.0)


def logistic_grad(X, y, x):
    """Mean gradient of ``log(1 + exp(-y * X @ x))``."""
    margins = -y * (X @ x)
    return X.T @ (-y / (1 + np.exp(-margins))) / len(y)


def fednmap_round(X, y, rows, z, c, lam, lr_local, lr_server, gamma):
    """One round: returns ``(z_next, c_next)``; ``c`` is the list of client corrections."""
    n_clients, local_steps = rows.shape[1], rows.shape[0]
    x = soft_threshold(z, gamma * lam)
    messages = []
    for i in range(n_clients):
        z_i = z.copy()
        x_i = x.copy()
        for step in range(local_steps):
            batch = rows[step, i]
            g = logistic_grad(X[batch], y[batch], x_i)
            z_i = z_i - lr_local * (g + (z - x) / gamma + c[i])
            x_i = soft_threshold(z_i, gamma * lam)
        messages.append((z - z_i) / (lr_local * local_steps))
    y_bar = sum(messages) / n_clients
    z_next = z - lr_local * lr_server * local_steps * y_bar
    return z_next, [c[i] - messages[i] + y_bar for i in range(n_clients)]
