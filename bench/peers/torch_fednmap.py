"""FedNMap and FedAvg with an l1 penalty, batched over clients in PyTorch.

What a careful PyTorch user would write: no loop over clients; per local step one gather of the
sampled rows into an ``(n, b, d)`` tensor, the model's batched products (``bmm``: two for
logistic regression, four for the MLP) and a soft threshold, on the CPU or a CUDA device. The
math is that of :mod:`peers.numpy_fednmap` and of fedopt's ``FedNMap`` / ``FedAvg`` rounds
(uniform client weights; logistic regression with labels +-1 and no intercept, or fedopt's
``MLP``), on the same minibatch rows ``rows[l, i]`` (global indices), so the results can be
checked against each other.

torch is optional: :data:`AVAILABLE` says whether it imported, and the builders return None
without it (or without a CUDA device when one is asked for).
"""

from __future__ import annotations

import numpy as np

try:
    import torch
except ImportError:  # the peer is skipped
    torch = None

AVAILABLE = torch is not None


def soft_threshold(v, tau):
    return torch.sign(v) * torch.clamp(torch.abs(v) - tau, min=0.0)


def logistic_grads(A, yb, P):
    """Every client's mean gradient of ``log(1 + exp(-y a^T p))`` on its rows ``A[i]`` (n, b, d)."""
    margins = torch.bmm(A, P.unsqueeze(2)).squeeze(2)  # (n, b)
    coef = -yb * torch.sigmoid(-yb * margins) / A.shape[1]
    return torch.bmm(coef.unsqueeze(1), A).squeeze(1)  # (n, d)


def mlp_grads(A, yb, P, hidden, classes):
    """Every client's mean gradient of fedopt's ``MLP`` (``P[i] = [W1 (h, d), b1, W2 (k, h), b2]``)
    on its rows ``A[i]`` with class codes ``yb``; backpropagation written out with ``bmm``."""
    n, b, d = A.shape
    h, k = hidden, classes
    W1, b1 = P[:, : h * d].reshape(n, h, d), P[:, None, h * d : h * d + h]
    W2, b2 = P[:, h * d + h : h * d + h + k * h].reshape(n, k, h), P[:, None, h * d + h + k * h :]
    H = torch.sigmoid(torch.bmm(A, W1.transpose(1, 2)) + b1)
    dO = torch.softmax(torch.bmm(H, W2.transpose(1, 2)) + b2, dim=2)
    dO -= torch.nn.functional.one_hot(yb.long(), k).to(dO.dtype)
    dO /= b
    dA = torch.bmm(dO, W2) * H * (1 - H)
    return torch.cat([torch.bmm(dA.transpose(1, 2), A).reshape(n, h * d), dA.sum(dim=1),
                      torch.bmm(dO.transpose(1, 2), H).reshape(n, k * h), dO.sum(dim=1)], dim=1)


def fednmap_round(X, y, rows, z, C, lam, lr_local, lr_server, gamma, grads=logistic_grads):
    """One FedNMap round on tensors: returns ``(z_next, C_next)``; ``C`` is ``(n, p)`` and
    ``grads(A, yb, P)`` the model's batched minibatch gradients."""
    local_steps, n = rows.shape[0], rows.shape[1]
    x = soft_threshold(z, gamma * lam)
    Z = z.expand(n, -1).clone()
    P = x.expand(n, -1).clone()
    shift = C + (z - x) / gamma
    for step in range(local_steps):
        batch = rows[step]
        Z -= lr_local * (grads(X[batch], y[batch], P) + shift)
        P = soft_threshold(Z, gamma * lam)
    Y = (z - Z) / (lr_local * local_steps)
    y_bar = Y.mean(dim=0)
    return z - lr_local * lr_server * local_steps * y_bar, C - Y + y_bar


def fedavg_round(X, y, rows, x, lam, lr_local, lr_server):
    """One FedAvg round with a server prox: local SGD, average, ``prox_{eta_hat lam ||.||_1}``."""
    local_steps, n = rows.shape[0], rows.shape[1]
    P = x.expand(n, -1).clone()
    for step in range(local_steps):
        batch = rows[step]
        P -= lr_local * logistic_grads(X[batch], y[batch], P)
    averaged = x + lr_server * (P.mean(dim=0) - x)
    return soft_threshold(averaged, lr_local * lr_server * local_steps * lam)


def _device(device: str):
    if device == "cuda" and not torch.cuda.is_available():
        return None
    return torch.device(device)


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def fednmap_round_builder(X, y, rows, z, c, lam, lr_local, lr_server, gamma, device="cpu", mlp=None):
    """A zero-argument callable running one round on ``device`` and returning ``z_next`` (NumPy), or None.

    ``mlp=(hidden, classes)`` runs the MLP instead of logistic regression."""
    if not AVAILABLE or (device := _device(device)) is None:
        return None
    X_t, y_t = torch.as_tensor(X, device=device), torch.as_tensor(y, device=device, dtype=torch.as_tensor(X).dtype)
    rows_t = torch.as_tensor(np.asarray(rows), device=device)
    z_t, c_t = torch.as_tensor(z, device=device), torch.as_tensor(np.asarray(c), device=device)

    grads = logistic_grads if mlp is None else (lambda A, yb, P: mlp_grads(A, yb, P, *mlp))

    def run():
        with torch.no_grad():
            z_next, _ = fednmap_round(X_t, y_t, rows_t, z_t, c_t, lam, lr_local, lr_server, gamma, grads)
        _sync(device)
        return z_next.cpu().numpy()

    return run


def fedavg_round_builder(X, y, rows, x, lam, lr_local, lr_server, device="cpu"):
    """A zero-argument callable running one FedAvg round on ``device`` and returning ``x_next``, or None."""
    if not AVAILABLE or (device := _device(device)) is None:
        return None
    X_t, y_t = torch.as_tensor(X, device=device), torch.as_tensor(y, device=device, dtype=torch.as_tensor(X).dtype)
    rows_t = torch.as_tensor(np.asarray(rows), device=device)
    x_t = torch.as_tensor(x, device=device)

    def run():
        with torch.no_grad():
            x_next = fedavg_round(X_t, y_t, rows_t, x_t, lam, lr_local, lr_server)
        _sync(device)
        return x_next.cpu().numpy()

    return run
