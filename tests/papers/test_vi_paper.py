"""The federated VI methods (Wang and Kale, "Faster Rates for Federated Variational Inequalities";
specs/lippax.md) checked round by round against plain per-client NumPy loops written from the
paper's equations: Local Extra SGD (eq. (4)), LIPPAX (Algorithm 1), SLIPPAX (Algorithm 2), local
dual extrapolation (eq. (13)), Local SGD on the operator (eq. (11)) and minibatch Extra SGD (the
synchronous baseline of Sec. 2).

The games of :mod:`fedopt.problems.vi` have no data set, so the harness of :mod:`replay` does not
hold them; :class:`Game` here is the plain per-client oracle ``Vt_m(z; xi) = V(z) + e_m + xi``
written from the problems' documented definitions (``V = (grad_x f, -grad_y f)`` of the saddle
function ``f``), reading the games' matrices, vectors and client shifts from the problem object.
The games weight their clients uniformly (``V = avg_m V_m``, as in the paper), so there are no
client weights to vary; the clients differ through the shifts ``e_m`` (heterogeneity > 0).

Each reference consumes fedopt's recorded draws (:class:`replay.Draws`: the oracle noise, and
SLIPPAX's Gaussian directions ``s``) and must reproduce the whole trajectory to 1e-12 relative on
the numpy and numba backends, with and without noise: the reported ergodic average ``x_o``, the
synchronised iterate ``z`` (the dual ``z`` too for eq. (13)), the running sum of the averaged
points, and the client drift of the history. Their oracle calls, mirror maps (proxes) and
averages are counted and must equal fedopt's ``grad_evals``, ``prox_evals``, ``floats_up``,
``floats_down`` and ``round_trips``, which :func:`test_costs_are_the_papers` also checks against
the paper's own statements.

Mutation check (run by hand once: each mistake made in a copy of fedopt's method file, run in
place of the method). The smallest relative error of ``x`` over the failing cases is quoted; it is
1e-16 to 1e-15 without a mistake:

* Local Extra SGD, the update's operator taken at ``z_{t-1}^m`` instead of the extrapolated
  ``x_t^m`` of eq. (4): all 24 cases fail, relative error 9.0e-2 at round 1.
* LIPPAX, the extra step taken from ``x_t^m`` instead of the anchor ``z_{t-1}^m`` (Algorithm 1
  line 9): all 36 cases fail, 3.9e-1 at round 1. (Dropping the proximal term
  ``(x_{t,l-1} - z_{t-1}) / eta`` of line 6 fails every case with H >= 2, 2.2e-1; with H = 1 the
  term is 0.)
* SLIPPAX, the proximal term taken at the perturbed point ``x_{t,l-1} + delta s`` (Algorithm 2
  line 7 perturbs only the oracle's argument): all 12 cases fail, 1.9e-2 at round 1.
* Local dual extrapolation, ``v_t = grad h_{t-1}^*(x_t)`` (the prox weight ``(t - 1) eta``
  instead of ``t eta``): all 16 composite cases fail, 4.9e-2 at round 1 (with phi = 0 the
  mirror map is the identity whatever its weight).
* Local SGDA, the output averaging ``x_{t-1}^m`` instead of ``x_t^m`` (eq. (11)'s output sums
  ``t = 1..T``): all 8 cases fail, 4.8e-1 at round 1.
* Minibatch extragradient, the update's operator at ``z`` instead of the extrapolated ``w``: all
  12 cases fail, 6.1e-2 at round 2 (round 1's output ``w`` does not depend on the update).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

import fedopt
from fedopt.problems.vi import BilinearGame, L1BilinearGame, QuadraticGame, SmoothGame
from fedopt.regularizers import MCP, Zero

from replay import BACKENDS, PHIS, RTOL, assert_same_trajectory, fedopt_trajectory

SIGMAS = (0.0, 0.3)
ROUNDS, K, CLIENTS = 20, 3, 3
GAMES = {
    "bilinear": lambda **o: BilinearGame(dim=3, **o),  # skew V: monotone, not co-coercive
    "quadratic": lambda **o: QuadraticGame(dim=3, mu=0.1, **o),  # strongly monotone
    "smooth": lambda **o: SmoothGame(dim=3, n_samples=10, scale=2.0, **o),  # not affine
}


def make_game(kind, sigma, backend, heterogeneity=0.4, n_clients=CLIENTS):
    options = dict(n_clients=n_clients, sigma=sigma, heterogeneity=heterogeneity, seed=3, backend=backend)
    if kind == "l1_bilinear":
        return L1BilinearGame(n_x=4, n_y=2, **options)
    return GAMES[kind](**options)


class Game:
    """Client m's oracle ``Vt_m(z; xi) = V(z) + e_m + xi`` (:mod:`fedopt.problems.vi`), counting its calls.

    ``f(x, y) = (1/2) x^T P x + x^T A y - (1/2) y^T Q y + b^T x - c^T y`` (bilinear: ``P = Q = 0``),
    plus ``(1/N) sum_i [softplus(a_i^T x) - softplus(e_i^T y)]`` for the smooth game, and
    ``V(z) = (grad_x f, -grad_y f)`` at ``z = (x, y)`` (the paper's Sec. 1.3 convention).
    """

    def __init__(self, problem):
        data = problem.host
        self.P, self.A, self.Q, self.b, self.c = (np.array(data[k]) for k in ("P", "A", "Q", "b", "c"))
        self.softplus = (data["ax"], data["ay"]) if "ax" in data else None
        self.nx, self.p, self.M = self.A.shape[0], problem.n_params, problem.n_clients
        self.e = np.zeros((self.M, self.p)) if problem.shifts is None else np.array(problem.shifts)
        self.lipschitz = problem.lipschitz
        self.calls = 0

    def V(self, z):
        x, y = z[:self.nx], z[self.nx:]
        grad_x = self.P @ x + self.A @ y + self.b
        grad_y = self.A.T @ x - self.Q @ y - self.c
        if self.softplus is not None:
            ax, ay = self.softplus
            sigmoid = lambda t: 1.0 / (1.0 + np.exp(-t))  # noqa: E731  (softplus' = sigmoid)
            grad_x = grad_x + sum(sigmoid(a @ x) * a for a in ax) / len(ax)
            grad_y = grad_y - sum(sigmoid(a @ y) * a for a in ay) / len(ay)
        return np.concatenate([grad_x, -grad_y])

    def oracle(self, m, z, xi, samples=1):
        """``Vt_m(z; xi)``: ``xi`` is the recorded noise (None without noise); ``samples`` oracle calls averaged."""
        self.calls += samples
        return self.V(z) + self.e[m] + (0.0 if xi is None else xi)


def noise(draws):
    """The next recorded ``sample_noise`` draw, ``(calls, M, p)``, or None for a noise-free oracle."""
    value = draws.take("sample_noise")
    return None if value.dtype == object else value


def mean(vectors):
    return sum(vectors) / len(vectors)


@dataclass
class Trace:
    """What a reference records after every round (round 0 first), with its communication and prox counts."""

    x: list = field(default_factory=list)  # the output x_o (the start point at round 0)
    z: list = field(default_factory=list)  # the synchronised iterate (primal u_t for eq. (13))
    sum: list = field(default_factory=list)  # sum_t avg_m x_t^m, the running sum behind x_o
    dual: list = field(default_factory=list)  # eq. (13)'s synchronised dual z_t
    drift: list = field(default_factory=list)  # avg_m ||zhat^m - avg||^2 at each round's synchronisation
    averages: int = 0  # server averages (each: one vector up and one down per client)
    proxes: int = 0  # mirror maps with a nonzero prox weight, all clients

    def record(self, x, z, total, dual=None):
        self.x.append(x.copy())
        self.z.append(z.copy())
        self.sum.append(total.copy())
        if dual is not None:
            self.dual.append(dual.copy())

    def synchronise(self, vectors):
        """``avg_m v^m``, sent back to every client (one server average)."""
        self.averages += 1
        return [mean(vectors)] * len(vectors)

    def synchronise_z(self, vectors):
        """The round's last average, recording the client drift it removes."""
        avg = mean(vectors)
        self.drift.append(float(np.mean([np.sum((v - avg) ** 2) for v in vectors])))
        return self.synchronise(vectors)


# ------------------------------------------------------------------------------------------ references
def local_extra_sgd_reference(game, draws, *, rounds, local_steps, lr_local, average_extrapolation=True):
    """Local Extra SGD, eq. (4), with ``x_o = (1/(M T)) sum_m sum_t x_t^m`` (Theorem 1)."""
    M, eta = game.M, lr_local
    z = [np.zeros(game.p) for _ in range(M)]  # z_0^m = 0
    trace, total, T = Trace(), np.zeros(game.p), 0
    trace.record(z[0], z[0], total)
    for _ in range(rounds):
        xi = noise(draws)  # (2K, M, p): a fresh sample for each of the two calls of every step
        for k in range(local_steps):
            T += 1
            sync = T % local_steps == 0
            x = [z[m] - eta * game.oracle(m, z[m], None if xi is None else xi[2 * k, m]) for m in range(M)]
            if sync and average_extrapolation:
                x = trace.synchronise(x)  # x_t^m = (1/M) sum_m (z_{t-1}^m - eta Vt(z_{t-1}^m)) when mod(t, K) = 0
            z_hat = [z[m] - eta * game.oracle(m, x[m], None if xi is None else xi[2 * k + 1, m]) for m in range(M)]
            z = trace.synchronise_z(z_hat) if sync else z_hat  # z_t^m, averaged when mod(t, K) = 0
            total = total + mean(x)
        trace.record(total / T, z[0], total)
    return trace


def lippax_reference(game, draws, *, rounds, local_steps, lr_local, inner_steps, smoothing=0.0):
    """LIPPAX, Algorithm 1, with Theorem 3's ``gamma = 1 / (eta (L + 1/eta)^2)``; with ``smoothing``
    = delta > 0, SLIPPAX, Algorithm 2 (the inner oracle queried at ``x + delta s``, s ~ N(0, I_d))."""
    M, eta, H = game.M, lr_local, inner_steps
    gamma = 1.0 / (eta * (game.lipschitz + 1.0 / eta) ** 2)
    z = [np.zeros(game.p) for _ in range(M)]  # line 1: z_0^m = 0
    trace, total, T = Trace(), np.zeros(game.p), 0
    trace.record(z[0], z[0], total)
    for _ in range(rounds):
        xi = noise(draws)  # (K (H + 1), M, p): the H inner calls, then the extra step's call, of each step
        s = draws.take("standard_normal") if smoothing else None  # (K H, M, p): Alg. 2 line 6
        for k in range(local_steps):
            T += 1
            x_t, z_hat = [], []
            for m in range(M):
                x = z[m].copy()  # line 4: x_{t,0}^m = z_{t-1}^m
                for ell in range(H):  # lines 5-7
                    call = k * (H + 1) + ell
                    at = x if s is None else x + smoothing * s[k * H + ell, m]  # Alg. 2 line 7: V(x + delta s; xi)
                    x = x - gamma * (game.oracle(m, at, None if xi is None else xi[call, m]) + (x - z[m]) / eta)
                x_t.append(x)  # line 8: x_t^m = x_{t,H}^m
                extra = None if xi is None else xi[k * (H + 1) + H, m]
                z_hat.append(z[m] - eta * game.oracle(m, x, extra))  # line 9 (Alg. 2 line 10: not perturbed)
            z = trace.synchronise_z(z_hat) if T % local_steps == 0 else z_hat
            total = total + mean(x_t)
        trace.record(total / T, z[0], total)  # line 12: x_o
    return trace


def local_dual_extrapolation_reference(game, draws, phi, *, rounds, local_steps, lr_local):
    """Local dual extrapolation, eq. (13), with ``h = (1/2) ||.||^2``: ``h_t = h + t eta phi`` has the
    mirror map ``grad h_t^*(y) = argmin_u (1/2) ||u - y||^2 + t eta phi(u) = prox_{t eta phi}(y)``.
    Output ``v_o = (1/(T M)) sum_t sum_m v_t^m`` (Theorem 7)."""
    M, eta = game.M, lr_local
    trace = Trace()

    def mirror(y, t, step=True):  # grad h_t^*(y); step=False: only reported, not a step of (13)
        if t == 0:  # h_0 = h: the identity
            return y
        trace.proxes += step  # a prox of t eta phi (the identity for phi = 0, still evaluated)
        return y if phi is None else phi.prox(y, t * eta)

    z = [np.zeros(game.p) for _ in range(M)]  # duals z_0^m = 0, so u_0^m = grad h^*(0) = 0
    total, T = np.zeros(game.p), 0
    trace.record(z[0], z[0], total, dual=z[0])
    for _ in range(rounds):
        xi = noise(draws)  # (2K, M, p)
        for k in range(local_steps):
            T += 1
            sync = T % local_steps == 0
            u = [mirror(z[m], T - 1) for m in range(M)]  # u_{t-1}^m = grad h_{t-1}^*(z_{t-1}^m)
            x = [z[m] - eta * game.oracle(m, u[m], None if xi is None else xi[2 * k, m]) for m in range(M)]
            if sync:
                x = trace.synchronise(x)
            v = [mirror(x[m], T) for m in range(M)]  # v_t^m = grad h_t^*(x_t^m)
            z_hat = [z[m] - eta * game.oracle(m, v[m], None if xi is None else xi[2 * k + 1, m]) for m in range(M)]
            z = trace.synchronise_z(z_hat) if sync else z_hat
            total = total + mean(v)
        trace.record(total / T, mirror(z[0], T, step=False), total, dual=z[0])  # u_T, the primal point of z_T
    return trace


def local_sgda_reference(game, draws, *, rounds, local_steps, lr_local):
    """Local SGD on the operator, eq. (11), with output ``(1/(T M)) sum_t sum_m x_t^m`` (Theorem 6)."""
    M, eta = game.M, lr_local
    x = [np.zeros(game.p) for _ in range(M)]
    trace, total, T = Trace(), np.zeros(game.p), 0
    trace.record(x[0], x[0], total)
    for _ in range(rounds):
        xi = noise(draws)  # (K, M, p)
        for k in range(local_steps):
            T += 1
            x_hat = [x[m] - eta * game.oracle(m, x[m], None if xi is None else xi[k, m]) for m in range(M)]
            x = trace.synchronise_z(x_hat) if T % local_steps == 0 else x_hat
            total = total + mean(x)
        trace.record(total / T, x[0], total)
    return trace


def minibatch_extragradient_reference(game, draws, *, rounds, lr_local, batch_size):
    """Minibatch Extra SGD (Sec. 2: "a mini-batch version of Extra SGD (without local updates)", K the
    batch size): every half step averages ``batch_size`` oracle calls per client over all clients.

    The recorded noise of a call is already the mean of ``batch_size`` samples. Output: the average
    of the extrapolated points ``w``.
    """
    M, eta, S = game.M, lr_local, batch_size
    z, total = np.zeros(game.p), np.zeros(game.p)
    trace = Trace()
    trace.record(z, z, total)
    for r in range(rounds):
        xi = noise(draws)  # (2, M, p)
        w = trace.synchronise([z - eta * game.oracle(m, z, None if xi is None else xi[0, m], S) for m in range(M)])[0]
        z = trace.synchronise([z - eta * game.oracle(m, w, None if xi is None else xi[1, m], S) for m in range(M)])[0]
        trace.drift.append(0.0)
        total = total + w
        trace.record(total / (r + 1), z, total)
    return trace


# ------------------------------------------------------------------------------------------ comparison
def assert_follows(trace, run, game):
    """fedopt's trajectory is the reference's: x, z, the running sum (and the dual), the drift and the counts."""
    assert run.draws.exhausted(), "fedopt drew more than the reference used"
    assert_same_trajectory(trace.x, run.x)
    assert_same_trajectory(trace.z, [v["z"] for v in run.vars], what="z")
    assert_same_trajectory(trace.sum, [v["sum"] for v in run.vars], what="sum")
    if trace.dual:
        assert_same_trajectory(trace.dual, [v["dual"] for v in run.vars], what="the dual z")
    h = run.result.history
    np.testing.assert_allclose(h["drift"][1:], trace.drift, rtol=RTOL, atol=1e-300)
    assert h["grad_evals"][-1] == game.calls
    assert h["prox_evals"][-1] == trace.proxes
    assert h["floats_up"][-1] == h["floats_down"][-1] == trace.averages * game.M * game.p


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("sigma", SIGMAS)
@pytest.mark.parametrize("kind", GAMES)
@pytest.mark.parametrize("average_extrapolation", [True, False])
def test_local_extra_sgd_follows_eq_4(average_extrapolation, kind, sigma, backend):
    problem = make_game(kind, sigma, backend)
    hp = dict(local_steps=K, lr_local=0.3, average_extrapolation=average_extrapolation)
    run = fedopt_trajectory("local-extra-sgd", problem, None, rounds=ROUNDS, **hp)
    game = Game(problem)
    assert_follows(local_extra_sgd_reference(game, run.draws, rounds=ROUNDS, **hp), run, game)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("sigma", SIGMAS)
@pytest.mark.parametrize("kind", GAMES)
@pytest.mark.parametrize("inner_steps", [1, 2, 4])
def test_lippax_follows_algorithm_1(inner_steps, kind, sigma, backend):
    problem = make_game(kind, sigma, backend)
    hp = dict(local_steps=K, lr_local=0.15, inner_steps=inner_steps)
    run = fedopt_trajectory("lippax", problem, None, rounds=ROUNDS, **hp)
    game = Game(problem)
    assert_follows(lippax_reference(game, run.draws, rounds=ROUNDS, **hp), run, game)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("sigma", SIGMAS)
@pytest.mark.parametrize("kind", GAMES)
def test_slippax_follows_algorithm_2(kind, sigma, backend):
    """With noise, delta is Theorem 5's (the proof's ``eta sigma / d^(1/4)``); noise-free, delta = 0.1."""
    problem = make_game(kind, sigma, backend)
    hp = dict(local_steps=K, lr_local=0.15, inner_steps=3)
    radius = {} if sigma else dict(smoothing_radius=0.1)
    run = fedopt_trajectory("slippax", problem, None, rounds=ROUNDS, **hp, **radius)
    delta = radius.get("smoothing_radius", hp["lr_local"] * sigma / problem.n_params ** 0.25)
    game = Game(problem)
    assert_follows(lippax_reference(game, run.draws, rounds=ROUNDS, smoothing=delta, **hp), run, game)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("sigma", SIGMAS)
@pytest.mark.parametrize("phi", (None, *PHIS[:2]), ids=("zero", "l1", "group_lasso"))
@pytest.mark.parametrize("kind", ["l1_bilinear", "quadratic"])
def test_local_dual_extrapolation_follows_eq_13(kind, phi, sigma, backend):
    problem = make_game(kind, sigma, backend)
    hp = dict(local_steps=K, lr_local=0.2)
    run = fedopt_trajectory("local-dual-extrapolation", problem, Zero() if phi is None else phi.regularizer,
                            rounds=ROUNDS, **hp)
    game = Game(problem)
    assert_follows(local_dual_extrapolation_reference(game, run.draws, phi, rounds=ROUNDS, **hp), run, game)


def test_local_dual_extrapolation_takes_no_weakly_convex_phi():
    """Sec. 5 takes phi convex, and the prox weight ``t eta`` of ``h_t`` grows past MCP's ``1/rho``: refused."""
    with pytest.raises(ValueError, match="convex regularizer"):
        fedopt_trajectory("local-dual-extrapolation", make_game("quadratic", 0.0, "numpy"), MCP(0.08, gamma=3.0),
                          rounds=1)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("sigma", SIGMAS)
@pytest.mark.parametrize("kind", ["quadratic", "smooth"])  # eq. (11) diverges on the bilinear game
def test_local_sgda_follows_eq_11(kind, sigma, backend):
    problem = make_game(kind, sigma, backend)
    hp = dict(local_steps=K, lr_local=0.2)
    run = fedopt_trajectory("local-sgda", problem, None, rounds=ROUNDS, **hp)
    game = Game(problem)
    assert_follows(local_sgda_reference(game, run.draws, rounds=ROUNDS, **hp), run, game)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("sigma", SIGMAS)
@pytest.mark.parametrize("kind", GAMES)
def test_minibatch_extragradient_follows_minibatch_extra_sgd(kind, sigma, backend):
    problem = make_game(kind, sigma, backend)
    hp = dict(lr_local=0.3, batch_size=4)
    run = fedopt_trajectory("minibatch-extragradient", problem, None, rounds=ROUNDS, **hp)
    game = Game(problem)
    assert_follows(minibatch_extragradient_reference(game, run.draws, rounds=ROUNDS, **hp), run, game)


# ------------------------------------------------------------------------------------------ costs
#: Per round and client: oracle calls, vectors sent each way (= server round trips), and the paper's sentence.
COSTS = {
    "local-extra-sgd": (lambda K, H, S: 2 * K, 2, 0,
                        "Sec. 4.1: each client 'first executes a stochastic gradient descent step at the current "
                        "point z_{t-1}^m to obtain x_t^m, and then updates z_{t-1}^m to z_t^m using the gradient at "
                        "x_t^m'; eq. (4) averages both x_t^m and z_t^m when mod(t, K) = 0"),
    "lippax": (lambda K, H, S: K * (H + 1), 1, 0,
               "Sec. 1: 'we approximate it using multiple SGD steps on a regularized objective, followed by one extra "
               "gradient step from the starting point' (Algorithm 1 lines 5-9: H + 1 calls of Vt); only z_t^m is "
               "averaged, when mod(t, K) = 0 (line 9)"),
    "slippax": (lambda K, H, S: K * (H + 1), 1, 0,
                "Sec. 4.2: 'Compared with Algorithm 1, the main difference lies in Step 7': the same calls and "
                "averages as LIPPAX"),
    "local-dual-extrapolation": (lambda K, H, S: 2 * K, 2, 2,
                                 "Sec. 5: 'each machine ... still conducts extra gradient step in the dual space, but "
                                 "using the corresponding operator value in the primal space' (u_{t-1}^m and v_t^m: "
                                 "two calls, two mirror maps); eq. (13) averages x_t^m and z_t^m when mod(t, K) = 0"),
    "local-sgda": (lambda K, H, S: K, 1, 0,
                   "Sec. 1: LSGD 'performs multiple SGD steps locally ..., following by synchronizing its model with "
                   "the central server every K local steps' (eq. (11))"),
    "minibatch-extragradient": (lambda K, H, S: 2 * S, 2, 0,
                                "Sec. 2: 'a mini-batch version of Extra SGD (without local updates) ... where R is "
                                "the number of communication rounds, M is the number of machines, and K is the batch "
                                "size': two half steps of K samples, each averaged by the server"),
}


@pytest.mark.parametrize("method", COSTS)
def test_costs_are_the_papers(method):
    """Per round: oracle calls, mirror maps (proxes) and floats up and down, from the paper's statements."""
    calls, vectors, proxes, sentence = COSTS[method]
    steps, H, S, rounds = 4, 3, 5, 6
    problem = make_game("l1_bilinear", 0.1, "numpy")
    phi = PHIS[0].regularizer if method == "local-dual-extrapolation" else Zero()  # not the game's own l1
    hp = {"lr_local": 0.1, "local_steps": steps, "inner_steps": H, "batch_size": S}
    hp = {k: v for k, v in hp.items() if k in fedopt.algorithms.hyperparameters(method)}
    h = fedopt_trajectory(method, problem, phi, rounds=rounds, **hp).result.history
    M, p = problem.n_clients, problem.n_params
    assert list(np.diff(h["grad_evals"])) == [M * calls(steps, H, S)] * rounds, sentence
    assert list(np.diff(h["floats_up"])) == list(np.diff(h["floats_down"])) == [M * vectors * p] * rounds, sentence
    assert list(np.diff(h["round_trips"])) == [vectors] * rounds, sentence
    # u_0 = grad h_0^*(z_0) = z_0 needs no prox (h_0 = h): one mirror map fewer in the first round
    first = M * (proxes * steps - 1) if proxes else 0
    assert list(np.diff(h["prox_evals"])) == [first] + [M * proxes * steps] * (rounds - 1), sentence
