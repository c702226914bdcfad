"""FedNMap with an l1 penalty, one client at a time in plain NumPy.

The usual shape of research code: a Python loop over clients and local steps, each step a
gather, the model's products (two matrix-vector products for logistic regression, four matrix
products for the MLP) and a soft threshold. It takes the same minibatch rows as fedopt
(``rows[l, i]``, global indices) so the two can be checked against each other.
"""

from __future__ import annotations

import numpy as np


def soft_threshold(v, tau):
    return np.sign(v) * np.maximum(np.abs(v) - tau, 0.0)


def logistic_grad(X, y, x):
    """Mean gradient of ``log(1 + exp(-y * X @ x))``."""
    margins = -y * (X @ x)
    return X.T @ (-y / (1 + np.exp(-margins))) / len(y)


def mlp_grad(X, y, x, hidden, classes):
    """Mean gradient of the softmax cross-entropy of ``sigmoid(X W1^T + b1) W2^T + b2`` (fedopt's
    ``MLP`` layout: ``x = [W1 (h, d), b1, W2 (k, h), b2]``); ``y`` holds class codes."""
    h, k, d = hidden, classes, X.shape[1]
    W1, b1 = x[: h * d].reshape(h, d), x[h * d : h * d + h]
    W2, b2 = x[h * d + h : h * d + h + k * h].reshape(k, h), x[h * d + h + k * h :]
    H = 1 / (1 + np.exp(-(X @ W1.T + b1)))
    scores = H @ W2.T + b2
    E = np.exp(scores - scores.max(axis=1, keepdims=True))
    dO = E / E.sum(axis=1, keepdims=True)
    dO[np.arange(len(y)), y.astype(int)] -= 1
    dO /= len(y)
    dA = (dO @ W2) * H * (1 - H)
    return np.concatenate([(dA.T @ X).ravel(), dA.sum(axis=0), (dO.T @ H).ravel(), dO.sum(axis=0)])


def fednmap_round(X, y, rows, z, c, lam, lr_local, lr_server, gamma, grad=logistic_grad):
    """One round: returns ``(z_next, c_next)``; ``c`` is the list of client corrections and
    ``grad(X_batch, y_batch, x)`` the model's minibatch gradient."""
    n_clients, local_steps = rows.shape[1], rows.shape[0]
    x = soft_threshold(z, gamma * lam)
    messages = []
    for i in range(n_clients):
        z_i = z.copy()
        x_i = x.copy()
        for step in range(local_steps):
            batch = rows[step, i]
            g = grad(X[batch], y[batch], x_i)
            z_i = z_i - lr_local * (g + (z - x) / gamma + c[i])
            x_i = soft_threshold(z_i, gamma * lam)
        messages.append((z - z_i) / (lr_local * local_steps))
    y_bar = sum(messages) / n_clients
    z_next = z - lr_local * lr_server * local_steps * y_bar
    return z_next, [c[i] - messages[i] + y_bar for i in range(n_clients)]
