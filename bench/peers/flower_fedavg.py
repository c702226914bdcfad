"""FedAvg for l1-regularized logistic regression as a Flower simulation (``flwr[simulation]``, Ray backend).

What a Flower user would write: one ``NumPyClient`` per client running its local SGD steps in
NumPy, the stock ``FedAvg`` strategy averaging the returned models (every client reports one
example, so the weights are uniform as in fedopt), and a server prox (soft threshold with step
``lr_local * lr_server * Q * lam``) after the aggregation. With ``lr_server = 1`` this is
fedopt's ``FedAvg`` round, on the same minibatch rows ``rows[r, l, i]`` (round, step, client):
the results agree to rounding.

The time of a round is measured inside the strategy, from ``configure_fit`` to the end of
``aggregate_fit``: it leaves out starting Ray and the simulation, and keeps the scheduling of the
clients, the serialisation of the models and the local work. Flower is optional:
:data:`AVAILABLE` says whether it imported.
"""

from __future__ import annotations

import logging
import time

import numpy as np

try:
    from flwr.client import ClientApp, NumPyClient
    from flwr.common import ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.server import ServerApp, ServerConfig
    from flwr.server.strategy import FedAvg
    from flwr.simulation import run_simulation
except ImportError:  # the peer is skipped
    FedAvg = NumPyClient = None

AVAILABLE = FedAvg is not None


def _logistic_grad(A, yb, x):
    margins = yb * (A @ x)
    return A.T @ (-yb / (1 + np.exp(margins))) / len(yb)


def soft_threshold(v, tau):
    return np.sign(v) * np.maximum(np.abs(v) - tau, 0.0)


def simulate_fedavg(X, y, rows, x0, lam, lr_local, lr_server=1.0, cpus_per_client=1.0):
    """Run ``len(rows)`` FedAvg rounds in a Flower simulation with ``rows.shape[2]`` clients.

    ``rows`` is ``(R, Q, n, b)``: client ``i`` takes its minibatch ``rows[r, l, i]`` at step ``l``
    of round ``r``. Returns ``(models, seconds)``: the server model after each round and the
    wall time of each round.
    """
    if not AVAILABLE:
        raise ImportError("the Flower peer needs flwr[simulation]: pip install 'flwr[simulation]'")
    rounds, local_steps, n_clients = rows.shape[:3]

    class Client(NumPyClient):
        def __init__(self, cid):
            self.cid = cid

        def fit(self, parameters, config):
            x = parameters[0].copy()
            r = int(config["round"]) - 1
            for step in range(local_steps):
                batch = rows[r, step, self.cid]
                x -= lr_local * _logistic_grad(X[batch], y[batch], x)
            return [x], 1, {}

    def client_fn(context):
        return Client(int(context.node_config["partition-id"])).to_client()

    strategy = _ProxFedAvg(lam * lr_local * lr_server * local_steps, lr_server, n_clients, x0)
    server = ServerApp(config=ServerConfig(num_rounds=rounds), strategy=strategy)
    logging.getLogger("flwr").setLevel(logging.WARNING)
    run_simulation(server_app=server, client_app=ClientApp(client_fn=client_fn), num_supernodes=n_clients,
                   backend_config={"client_resources": {"num_cpus": cpus_per_client, "num_gpus": 0.0}})
    return strategy.models, strategy.seconds


if AVAILABLE:
    class _ProxFedAvg(FedAvg):
        """Flower's FedAvg, then the server step ``lr_server`` and the prox; records models and round times."""

        def __init__(self, tau, lr_server, n_clients, x0):
            super().__init__(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=n_clients,
                             min_evaluate_clients=0, min_available_clients=n_clients,
                             on_fit_config_fn=lambda server_round: {"round": server_round},
                             initial_parameters=ndarrays_to_parameters([np.asarray(x0)]))
            self.tau, self.lr_server = tau, lr_server
            self.current = np.asarray(x0)
            self.models, self.seconds, self._began = [], [], None

        def configure_fit(self, server_round, parameters, client_manager):
            self._began = time.perf_counter()
            return super().configure_fit(server_round, parameters, client_manager)

        def aggregate_fit(self, server_round, results, failures):
            if failures:
                raise RuntimeError(f"{len(failures)} Flower clients failed: {failures[0]!r}")
            parameters, metrics = super().aggregate_fit(server_round, results, failures)
            averaged = parameters_to_ndarrays(parameters)[0]
            x = soft_threshold(self.current + self.lr_server * (averaged - self.current), self.tau)
            self.current = x
            self.models.append(x)
            self.seconds.append(time.perf_counter() - self._began)
            return ndarrays_to_parameters([x]), metrics
