"""Checks of the points passed to the oracles, shared by the federated problems and the VI games."""

from __future__ import annotations


class PointArguments:
    """``_points`` and ``_vector`` for a class with ``backend``, ``dtype``, ``n_params`` and ``n_clients``."""

    def _points(self, W):
        W = self.backend.asarray(W, dtype=self.dtype)
        if W.ndim == 1:
            W = W.reshape(1, -1)
        if W.ndim != 2 or W.shape[1] != self.n_params or W.shape[0] not in (1, self.n_clients):
            raise ValueError(f"W must have shape ({self.n_params},) or ({self.n_clients}, {self.n_params}) "
                             f"(one point for all clients, or one per client), got {tuple(W.shape)}")
        return W

    def _vector(self, x):
        x = self.backend.asarray(x, dtype=self.dtype)
        if x.shape != (self.n_params,):
            raise ValueError(f"x must have shape ({self.n_params},), got {tuple(x.shape)}")
        return x

    def start_point(self, x0, seed=None):
        """``x0`` as a vector of this backend and dtype, checked (shape ``(n_params,)``, finite
        entries), or ``init(seed)`` when it is None: where a run starts."""
        if x0 is None:
            return self.backend.asarray(self.init(seed), dtype=self.dtype)
        x = self.backend.asarray(x0, dtype=self.dtype)
        if x.shape != (self.n_params,):
            raise ValueError(f"x0 must have shape ({self.n_params},), one entry per model parameter, got "
                             f"{tuple(x.shape)}")
        if not bool(self.backend.xp.isfinite(x).all()):
            raise ValueError("x0 has NaN or inf entries: pass a finite start, or None for the problem's init(seed)")
        return x

    def per_client(self, v):
        """An ``(n_clients, p)`` array with a copy of the vector ``v`` in every row."""
        out = self.backend.xp.empty((self.n_clients, self.n_params), dtype=v.dtype)
        out[...] = v
        return out

    def node_mean(self, X):
        """``(1/n) sum_i x_i``, the plain mean of the rows of ``(n_clients, p)`` (a network's average model)."""
        return X.mean(axis=0)

    def client_zeros(self):
        """An ``(n_clients, p)`` array of zeros in the problem's dtype (a per-client state)."""
        return self.backend.xp.zeros((self.n_clients, self.n_params), dtype=self.dtype)
