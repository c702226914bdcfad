"""fedopt.run_batch for the VI methods: run r of a batch equals fedopt.run with the r-th seed and
values, bit for bit on the CPU (model, every history column, the final state)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import fedopt
from fedopt import batch
from fedopt.algorithms.vi import VI_METHODS
from fedopt.batch import BatchVIProblem, batch_problem
from fedopt.problems.vi import BilinearGame, L1BilinearGame, QuadraticGame, SmoothGame

NOISE = {"sigma": 0.3, "heterogeneity": 0.5, "seed": 1}


def bilinear(backend):
    return BilinearGame(dim=4, n_clients=3, backend=backend, **NOISE)


def quadratic(backend):
    return QuadraticGame(dim=3, n_clients=4, backend=backend, **NOISE)


def smooth(backend):
    return SmoothGame(dim=3, n_samples=6, n_clients=3, backend=backend, **NOISE)


def one_client(backend):
    """One client: the batch's server arrays (R, 1, p) look like its client arrays."""
    return BilinearGame(dim=3, n_clients=1, backend=backend, sigma=0.3, seed=2)


def l1_bilinear(backend):
    return L1BilinearGame(n_x=4, n_y=3, n_clients=3, backend=backend, **NOISE)


CASES = [
    ("local-extra-sgd", bilinear, {"local_steps": 3}),
    ("local-extra-sgd", smooth, {"local_steps": 2, "average_extrapolation": False}),
    ("lippax", quadratic, {"local_steps": 2, "inner_steps": 2}),
    ("lippax", bilinear, {"local_steps": 2, "inner_steps": 2, "lr_inner": [0.05, 0.1, 0.05]}),
    ("slippax", smooth, {"local_steps": 2, "inner_steps": 2}),
    ("local-sgda", quadratic, {"local_steps": 3}),
    ("minibatch-extragradient", bilinear, {"batch_size": 4}),
    ("local-dual-extrapolation", l1_bilinear, {"local_steps": 3}),
    ("local-extra-sgd", one_client, {"local_steps": 2, "metric_gamma": [1.0, 0.5, 2.0]}),
]


def assert_same_run(single, batched):
    """The batched run's model, history (but its timing) and final state equal the single run's, bit for bit."""
    np.testing.assert_array_equal(batched.x, single.x)
    assert batched.history.columns == single.history.columns
    for column in single.history.columns:
        if column != "seconds":
            np.testing.assert_array_equal(batched.history[column], single.history[column], err_msg=column)
    assert batched.state.vars.keys() == single.state.vars.keys()
    for name, value in single.state.vars.items():
        assert type(batched.state.vars[name]) is type(value), name
        np.testing.assert_array_equal(batched.state.vars[name], value, err_msg=name)


SEEDS, LRS = [3, 0, 3], [0.1, 0.2, 0.15]
IDS = [f"{m}-{g.__name__}" for m, g, _ in CASES]


def batch_and_single_runs(method, problem, extra):
    """The batch of three runs (seeds SEEDS, lr_local LRS and the per-run values of ``extra``), and
    each run alone."""
    common = {"rounds": 5, "eval_every": 2, **{k: v for k, v in extra.items() if not isinstance(v, list)}}
    per_run = {"lr_local": LRS, **{k: v for k, v in extra.items() if isinstance(v, list)}}
    results = fedopt.run_batch(method, problem, problem.regularizer, seeds=SEEDS, **per_run, **common)
    singles = [fedopt.run(method, problem, problem.regularizer, seed=seed, **{k: v[r] for k, v in per_run.items()},
                          **common) for r, seed in enumerate(SEEDS)]
    return results, singles


@pytest.mark.parametrize("backend", ["numba", "numpy"])
@pytest.mark.parametrize(("method", "game", "extra"), CASES, ids=IDS)
def test_vi_batch_equals_single_runs(backend, method, game, extra):
    results, singles = batch_and_single_runs(method, game(backend), extra)
    for seed, lr, result, single in zip(SEEDS, LRS, results, singles, strict=True):
        assert result.error is None and result.seed == seed and result.algorithm.lr_local == lr
        assert result.metric_gamma == single.metric_gamma
        assert_same_run(single, result)


@pytest.mark.gpu
@pytest.mark.parametrize(("method", "game", "extra"), CASES, ids=IDS)
def test_gpu_vi_batch_follows_the_gpu_runs_and_the_cpu_batch(method, game, extra):
    """On the GPU the batch's matrix products are batched ones: equal to the single runs to rounding."""
    on_gpu, singles = batch_and_single_runs(method, game("gpu"), extra)
    on_cpu, _ = batch_and_single_runs(method, game("numpy"), extra)
    for gpu, single, cpu in zip(on_gpu, singles, on_cpu, strict=True):
        assert gpu.error is None
        np.testing.assert_allclose(gpu.x, single.x, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(gpu.x, cpu.x, rtol=1e-10, atol=1e-12)
        for column in ("gap_bound", "distance", "drift"):
            np.testing.assert_allclose(gpu.history[column], single.history[column], rtol=1e-8)
            np.testing.assert_allclose(gpu.history[column], cpu.history[column], rtol=1e-8)


def test_the_batch_problem_of_a_game_and_its_noise():
    problem = bilinear("numpy")
    many = batch_problem([problem] * 2)
    assert isinstance(many, BatchVIProblem) and isinstance(many.take([1]), BatchVIProblem)
    assert many.take([1]).n_runs == 1
    rngs = [np.random.default_rng(s) for s in (5, 6)]
    noise = many.sample_noise(rngs, 3, batch=2)
    assert noise.shape == (3, 2, problem.n_clients, problem.n_params)
    np.testing.assert_array_equal(noise[:, 1], problem.sample_noise(np.random.default_rng(6), 3, batch=2))
    assert many.standard_normal(rngs, (4, problem.n_clients, problem.n_params)).shape == (4, 2, 3, problem.n_params)
    quiet = BilinearGame(dim=4, n_clients=3)
    assert batch_problem([quiet] * 2).sample_noise(rngs, 3) is None
    assert all(cls(lr_local=0.1).batch_refusal() is None for cls in VI_METHODS)


def test_a_diverging_vi_run_stops_alone():
    """Local SGDA on a bilinear game with a large step diverges; the other runs finish as they would alone."""
    problem = bilinear("numba")
    lrs, kwargs = [0.05, 3.0, 0.1], {"rounds": 30, "local_steps": 3, "eval_every": 2}
    results = fedopt.run_batch("local-sgda", problem, seeds=[0, 1, 2], lr_local=lrs, **kwargs)
    failed = results[1]
    assert isinstance(failed.error, fedopt.DivergenceError)
    with pytest.raises(fedopt.DivergenceError) as single:
        fedopt.run("local-sgda", problem, seed=1, lr_local=lrs[1], **kwargs)
    assert str(failed.error) == str(single.value)
    assert_same_run(single.value.result, failed)
    for seed in (0, 2):
        assert results[seed].error is None
        assert_same_run(fedopt.run("local-sgda", problem, seed=seed, lr_local=lrs[seed], **kwargs), results[seed])


def test_slippax_runs_share_their_smoothing_radius():
    problem = smooth("numpy")
    with pytest.raises(ValueError, match="only with one value of smoothing_radius"):
        fedopt.run_batch("slippax", problem, seeds=[0, 1], rounds=2, smoothing_radius=[0.0, 0.1])


def test_a_default_inner_step_and_a_number_do_not_stack():
    """``lr_inner=None`` (LIPPAX's own default step) among numbers once became a NaN step in the batch."""
    problem = bilinear("numpy")
    for values in ([0.1, None], [None, 0.1]):
        with pytest.raises(ValueError, match=r"only with one value of lr_inner, got (0\.1, None|None, 0\.1);"):
            fedopt.run_batch("lippax", problem, seeds=[0, 1], rounds=2, lr_inner=values)


@pytest.mark.parametrize(("method", "extra"), [
    ("slippax", {"local_steps": 16, "inner_steps": 4}),
    ("lippax", {"local_steps": 16, "inner_steps": 4}),
    ("local-extra-sgd", {"local_steps": 64}),
    ("local-dual-extrapolation", {"local_steps": 64}),
    ("local-sgda", {"local_steps": 64, "lr_local": 0.01}),
])
def test_a_batch_is_sized_by_the_noise_its_rounds_draw(method, extra, monkeypatch):
    """A VI round draws its noise up front, a client array per oracle call (SLIPPAX's perturbations
    too), and the batch stacks the runs' draws: the memory estimate covers that, within a small
    factor, and a batch that needs more than half the free memory is split."""
    game = BilinearGame(dim=50, n_clients=8, sigma=1.0, seed=0, backend="numpy")
    kwargs = {"rounds": 1, "lr_local": 0.05, **extra}
    seeds = [0, 1, 2, 3]
    fedopt.run_batch(method, game, seeds=[0], **kwargs)  # the game's cached solution stays out of the trace
    tracemalloc.start()
    try:
        fedopt.run_batch(method, game, seeds=seeds, **kwargs)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    estimate = len(seeds) * batch._run_bytes(game, fedopt.algorithms.make(method, **extra))
    assert peak <= estimate <= 4 * peak
    monkeypatch.setattr(batch, "_free_memory", lambda backend: peak)
    with pytest.warns(batch.BatchSplitWarning, match="batches of"):
        fedopt.run_batch(method, game, seeds=seeds, **kwargs)
