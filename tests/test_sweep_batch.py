"""Sweeps in batches: which runs group together, how groups are cut, and that a batched sweep stores
what a sweep of single runs stores, on every executor."""

from __future__ import annotations

import numpy as np
import pytest
from test_sweep import TINY, tiny

import fedopt
from fedopt import sweep
from fedopt.cli import main
from fedopt.sweep import execute, runners
from fedopt.sweep.batching import AUTO_LIMIT, batch_option, batches, largest_first, signature
from fedopt.sweep.config import RunSpec

#: Batches that mix seeds, steps and regularization strengths: 2 groups (one per n_clients) of 12 runs.
MIXED = TINY.replace("seeds = [0, 1]", "seeds = [0, 1, 2]").replace(
    '"algorithm.local_steps" = [1, 2]', '"algorithm.lr_local" = [0.25, 0.5]\n"regularizer.l1" = [1e-3, 1e-2]')
#: One group: the runs with lr_local = 1e300 diverge, those with 1/Q do not.
DIVERGING = TINY.replace('"dataset.n_clients" = [4, 8]', '"dataset.n_clients" = [4]').replace(
    '"algorithm.local_steps" = [1, 2]', '"algorithm.lr_local" = ["1/Q", 1e300]')
#: One group of 8 runs on two iid partitions (partition seeds 0 and 1) of the digits.
PARTITIONS = TINY.replace('partition = "sorted"', 'partition = "iid"').replace(
    '"dataset.n_clients" = [4, 8]', '"dataset.n_clients" = [4]').replace(
    '"algorithm.local_steps" = [1, 2]', '"dataset.seed" = [0, 1]\n"algorithm.lr_local" = [0.25, 0.5]')
#: The history's timing columns (not compared).
TIMING = ("seconds",)


def _spec(config, key=None):
    return RunSpec(key or str(id(config)), config, "g", {})


def _base():
    return tiny().expand()[0].config


def _with(config, **changes):
    """A copy of ``config`` with ``changes`` at dotted paths (``algorithm.lr_local``)."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in config.items()}
    for path, value in changes.items():
        head, _, tail = path.partition(".")
        if tail:
            out[head][tail] = value
        else:
            out[head] = value
    return out


def _histories(store, name):
    return {m["key"]: (m["status"], m["error"], {c: v for c, v in m["history"].items() if c not in TIMING})
            for m in store.members(name)}


def _same(a, b):
    assert a.keys() == b.keys()
    for key in a:
        (status_a, error_a, hist_a), (status_b, error_b, hist_b) = a[key], b[key]
        assert (status_a, error_a) == (status_b, error_b)
        assert hist_a.keys() == hist_b.keys()
        for column in hist_a:
            np.testing.assert_allclose(np.asarray(hist_a[column], dtype=float), np.asarray(hist_b[column], dtype=float),
                                       rtol=1e-12, atol=0, err_msg=column)


def _record_tasks(monkeypatch, runner) -> list:
    """The number of runs in each task that ``runner`` (a runner class) submits."""
    sizes = []
    submit = runner.submit

    def recorded(self, unit):
        sizes.append(len(unit))
        return submit(self, unit)

    monkeypatch.setattr(runner, "submit", recorded)
    return sizes


@pytest.fixture
def single_runs(monkeypatch):
    """Counts the runs executed alone (through execute_run) and the batches that fell back to them."""
    calls = {"alone": 0, "batches": 0, "fell_back": 0}
    run, run_batch = execute.execute_run, fedopt.run_batch

    def counted_run(config, **kwargs):
        calls["alone"] += 1
        return run(config, **kwargs)

    def counted_batch(*args, **kwargs):
        calls["batches"] += 1
        try:
            return run_batch(*args, **kwargs)
        except Exception:
            calls["fell_back"] += 1
            raise

    monkeypatch.setattr(execute, "execute_run", counted_run)
    monkeypatch.setattr(fedopt, "run_batch", counted_batch)
    return calls


# ------------------------------------------------------------------------------------------ grouping
@pytest.mark.parametrize("change", [{"seed": 7}, {"metric_gamma": 2.0}, {"metric_gamma": None},
                                    {"algorithm.lr_local": 0.3}, {"algorithm.gamma": 2.0},
                                    {"algorithm.lr_server": 0.5}, {"regularizer.l1": 0.1}, {"regularizer.l2": 0.0},
                                    {"dataset.seed": 1}])
def test_runs_that_differ_in_seed_real_hyperparameters_strengths_or_partition_group_together(change):
    base = _base()
    assert signature(base) is not None and signature(_with(base, **change)) == signature(base)


@pytest.mark.parametrize("change", [{"algorithm.local_steps": 3}, {"algorithm.batch_size": 8},
                                    {"algorithm.batch_size": None}, {"dataset.n_clients": 5},
                                    {"problem.fit_intercept": True}, {"rounds": 6}, {"eval_every": 1},
                                    {"tol": 1e-3}, {"backend": "numpy"}, {"divergence": False},
                                    {"regularizer": {"name": "l1", "lam": 1e-3, "block": None}},
                                    {"regularizer.block": "coef"}, {"algorithm": {"name": "zhang"}}])
def test_runs_that_differ_in_shape_problem_or_regularizer_do_not(change):
    base = _base()
    assert signature(_with(base, **change)) != signature(base)


def test_a_groups_runs_keep_their_order_and_batches_follow_their_first_run():
    base = _base()
    configs = [_with(base, seed=0), _with(base, **{"algorithm.local_steps": 3}), _with(base, seed=1),
               _with(base, **{"algorithm.local_steps": 3, "seed": 1}), _with(base, seed=2)]
    specs = [_spec(c, key=str(i)) for i, c in enumerate(configs)]
    assert [[s.key for s in b] for b in batches(specs, "auto")] == [["0", "2", "4"], ["1", "3"]]
    assert [[s.key for s in b] for b in batches(specs, "off")] == [["0"], ["1"], ["2"], ["3"], ["4"]]
    assert [[s.key for s in b] for b in batches(specs, 2)] == [["0", "2"], ["4"], ["1", "3"]]


@pytest.mark.parametrize(("runs", "batch", "workers", "sizes"), [
    (7, 3, 1, [3, 2, 2]), (7, 7, 4, [7]), (7, 100, 1, [7]), (7, 1, 1, [1] * 7), (7, "off", 1, [1] * 7),
    (7, "auto", 1, [7]), (10, "auto", 4, [2, 2, 2, 2, 2]), (3, "auto", 16, [1, 1, 1]),
    (130, "auto", 1, [44, 43, 43]), (200, "auto", 2, [50, 50, 50, 50]),
])
def test_groups_are_cut_into_even_batches_of_at_most_n_or_auto_size(runs, batch, workers, sizes):
    specs = [_spec(_with(_base(), seed=s), key=str(s)) for s in range(runs)]
    out = batches(specs, batch, workers)
    assert [len(b) for b in out] == sizes
    assert [s.key for b in out for s in b] == [str(s) for s in range(runs)]
    assert max(len(b) for b in batches(specs * 3, "auto", 1)) <= AUTO_LIMIT


def test_the_largest_batches_start_first():
    small, large = _with(_base(), seed=0), _with(_base(), seed=1, **{"algorithm.local_steps": 9})
    units = [[_spec(small, key="small")], [_spec(large, key="large")], [_spec(small, key="small2")]]
    assert [u[0].key for u in largest_first(units)] == ["large", "small", "small2"]


def test_auto_keeps_many_small_groups_whole():
    """A grid of 11 points x 8 seeds on 2 workers: 11 batches of 8 (enough tasks for both workers)."""
    specs = [_spec(_with(_base(), seed=s, **{"algorithm.local_steps": q}), key=f"{q}-{s}")
             for q in range(1, 12) for s in range(8)]
    assert [len(b) for b in batches(specs, "auto", workers=2)] == [8] * 11


@pytest.mark.parametrize("algorithm", [{"name": "scaffnew", "random_steps": True},
                                       {"name": "fednmap", "lr_local": -1.0}])
def test_methods_that_cannot_batch_and_invalid_runs_run_alone(algorithm):
    config = _with(_base(), algorithm=algorithm)
    assert signature(config) is None
    specs = [_spec(_with(config, seed=s), key=str(s)) for s in range(3)]
    assert [len(b) for b in batches(specs, 8)] == [1, 1, 1]


def test_vi_methods_and_shared_real_hyperparameters():
    from test_sweep_vi import vi

    vi_specs = vi().expand()  # 2 methods x 3 noise levels x 2 seeds: the two seeds of each point batch together
    vi_signatures = {signature(s.config) for s in vi_specs}
    assert len(vi_signatures) == 6 and None not in vi_signatures
    assert [len(unit) for unit in batches(vi_specs, "auto")] == [2] * 6
    scaffnew = _with(_base(), algorithm={"name": "scaffnew", "random_steps": False, "comm_prob": 0.5})
    assert signature(scaffnew) is not None
    assert signature(_with(scaffnew, **{"algorithm.lr_local": 0.3})) == signature(scaffnew)
    assert signature(_with(scaffnew, **{"algorithm.comm_prob": 0.25})) != signature(scaffnew)  # sets the steps
    depositum = _with(_base(), algorithm={"name": "depositum", "topology": "erdos_renyi", "edge_prob": 0.5})
    assert signature(_with(depositum, **{"algorithm.lr": 0.3})) == signature(depositum)
    assert signature(_with(depositum, **{"algorithm.edge_prob": 0.6})) != signature(depositum)  # sets the graph


def test_the_batch_option_is_auto_off_or_a_positive_integer(capsys):
    assert [batch_option(v) for v in ("auto", "OFF", " 4 ", 3)] == ["auto", "off", 4, 3]
    for bad in ("0", "-2", "two", "2.5", 0, -1, 2.5, True, None):
        with pytest.raises(ValueError, match="batch must be 'auto', 'off' or an integer >= 1"):
            batch_option(bad)
    for bad in ("0", "many"):
        with pytest.raises(SystemExit) as exc:
            main(["sweep", "speedup_demo", "--batch", bad])
        assert exc.value.code == 2
        assert f"--batch: must be auto, off or an integer >= 1 (the most runs in one batch), got '{bad}'" \
            in capsys.readouterr().err


def test_the_command_passes_batch_to_the_sweep(tmp_path, monkeypatch):
    toml = tmp_path / "tiny.toml"
    toml.write_text(TINY)
    seen = []

    def fake(exp, store, **kwargs):
        seen.append(kwargs["batch"])
        return sweep.SweepSummary("tiny", total=0, skipped=0, sweep="0" * 12)

    monkeypatch.setattr(execute, "run_sweep", fake)
    for flags, expected in (((), "auto"), (("--batch", "off"), "off"), (("--batch", "5"), 5)):
        assert main(["sweep", str(toml), "--store", str(tmp_path / "s.db"), *flags]) == 0
        assert seen[-1] == expected


# ----------------------------------------------------------------------------------------- execution
def test_execute_batch_gives_each_run_its_record_and_share_of_the_time(single_runs):
    configs = [s.config for s in tiny(MIXED).expand()[:3]]
    records = execute.execute_batch(configs)
    assert single_runs == {"alone": 0, "batches": 1, "fell_back": 0}
    assert [r["status"] for r in records] == ["done"] * 3
    assert len({r["run_seconds"] for r in records}) == 1 and records[0]["run_seconds"] <= records[0]["wall_seconds"]
    alone = [execute.execute_run(c) for c in configs]
    for one, batched in zip(alone, records, strict=True):
        assert set(one) == set(batched) and one["backend"] == batched["backend"]
        assert one["history"]["stationarity"] == batched["history"]["stationarity"]


def test_a_batch_that_fails_runs_its_configurations_alone(single_runs):
    good = tiny(seeds=[0]).expand()[0].config
    bad = _with(good, **{"algorithm.lr_local": -0.1})
    records = execute.execute_batch([good, bad])
    assert single_runs["fell_back"] == 1 and single_runs["alone"] == 2
    assert [r["status"] for r in records] == ["done", "failed"]
    assert "lr_local must be a finite number > 0" in records[1]["error"] and "Traceback" in records[1]["error"]


@pytest.mark.parametrize("executor", ["serial", "local"])
def test_batched_sweep_stores_what_single_runs_store(executor, tmp_path, single_runs, monkeypatch):
    exp = tiny(MIXED)
    tasks = _record_tasks(monkeypatch, runners._Serial if executor == "serial" else runners._Local)
    with sweep.Store(tmp_path / "off.db") as off, sweep.Store(tmp_path / "auto.db") as auto:
        alone = sweep.run_sweep(exp, off, executor="serial", batch="off", progress=False)
        assert alone.statuses == {"done": 24} and single_runs["alone"] == 24 and single_runs["batches"] == 0
        del tasks[:]
        batched = sweep.run_sweep(exp, auto, executor=executor, workers=2, batch="auto", progress=False)
        assert batched.statuses == {"done": 24} and batched.complete
        if executor == "serial":  # 2 groups of 12 runs, one batch each, none fell back
            assert tasks == [12, 12] and single_runs == {"alone": 24, "batches": 2, "fell_back": 0}
        else:  # each group in halves, one for each worker
            assert tasks == [6, 6, 6, 6]
        _same(_histories(auto, "tiny"), _histories(off, "tiny"))


#: A second grid whose methods a claim compares by wall time.
TIMED = MIXED + """
[[grid]]
name = "timed"
"algorithm.name" = ["fednmap", "zhang"]

[[claim]]
name = "zhang-slower"
source = "a table"
quote = "zhang takes longer"
grid = "timed"
kind = "ratio"
axis = "algorithm.name"
values = ["zhang", "fednmap"]
metric = "seconds"
interval = [1.0, inf]
"""


def test_runs_a_claim_compares_by_wall_time_run_alone(tmp_path, single_runs, monkeypatch):
    """The runs of a batch share its time equally: batched seeds had equal times and a claim on them a
    zero-width interval (a certain verdict from no evidence)."""
    exp = tiny(TIMED)
    tasks = _record_tasks(monkeypatch, runners._Serial)
    with sweep.Store(tmp_path / "auto.db") as store:
        summary = sweep.run_sweep(exp, store, executor="serial", batch="auto", progress=False)
        # 6 timed runs alone (3 of them are also runs of the first grid) and that grid's 21 others batched
        assert summary.statuses == {"done": 27}
        assert sorted(tasks) == [1] * 6 + [9, 12] and single_runs["alone"] == 6
        timed = [m for m in store.members("tiny") if m["grid"] == "timed"]
        assert len({m["history"]["seconds"][-1] for m in timed}) == len(timed)


#: The same on Dirichlet partitions with sample-count client weights: each run has weights of its own.
WEIGHTED_PARTITIONS = PARTITIONS.replace('partition = "iid"', 'partition = "dirichlet"').replace(
    'name = "softmax"', 'name = "softmax"\nweights = "samples"')


@pytest.mark.parametrize("config", [PARTITIONS, WEIGHTED_PARTITIONS], ids=["iid", "dirichlet-sample-weights"])
def test_runs_on_other_partitions_share_a_batch(tmp_path, single_runs, config):
    exp = tiny(config)
    with sweep.Store(tmp_path / "off.db") as off, sweep.Store(tmp_path / "auto.db") as auto:
        sweep.run_sweep(exp, off, executor="serial", batch="off", progress=False)
        batched = sweep.run_sweep(exp, auto, executor="serial", batch="auto", progress=False)
        assert batched.statuses == {"done": 8} and single_runs["batches"] == 1 and single_runs["fell_back"] == 0
        _same(_histories(auto, "tiny"), _histories(off, "tiny"))


def test_a_batched_vi_sweep_stores_what_single_runs_store(tmp_path, single_runs):
    from test_sweep_vi import vi

    with sweep.Store(tmp_path / "off.db") as off, sweep.Store(tmp_path / "auto.db") as auto:
        sweep.run_sweep(vi(), off, executor="serial", batch="off", progress=False)
        batched = sweep.run_sweep(vi(), auto, executor="serial", batch="auto", progress=False)
        assert batched.statuses == {"done": 12}
        assert single_runs == {"alone": 12, "batches": 6, "fell_back": 0}  # the two seeds of each point together
        _same(_histories(auto, "vi"), _histories(off, "vi"))


def test_dask_runs_one_task_per_batch(tmp_path, monkeypatch):
    pytest.importorskip("distributed", reason="the Dask executor needs dask[distributed]")
    exp = tiny(MIXED)
    tasks = _record_tasks(monkeypatch, runners._Dask)
    with sweep.Store(tmp_path / "off.db") as off, sweep.Store(tmp_path / "dask.db") as store:
        sweep.run_sweep(exp, off, executor="serial", batch="off", progress=False)
        summary = sweep.run_sweep(exp, store, executor="dask", workers=2, dask_processes=False, batch=4,
                                  progress=False)
        assert summary.statuses == {"done": 24} and tasks == [4] * 6
        _same(_histories(store, "tiny"), _histories(off, "tiny"))


def test_a_diverging_run_is_stored_diverged_and_its_batch_done(tmp_path, single_runs):
    exp = tiny(DIVERGING, seeds=[0, 1])
    with sweep.Store(tmp_path / "auto.db") as auto, sweep.Store(tmp_path / "off.db") as off:
        summary = sweep.run_sweep(exp, auto, executor="serial", progress=False)
        assert single_runs == {"alone": 0, "batches": 1, "fell_back": 0}
        assert summary.statuses == {"done": 2, "diverged": 2}
        for member in auto.members("tiny"):
            if member["config"]["algorithm"]["lr_local"] == 1e300:
                assert member["status"] == "diverged" and "diverged" in member["error"]
                assert member["history"]["round"][0] == 0
            else:
                assert member["status"] == "done" and member["history"]["round"] == [0, 2, 4]
        sweep.run_sweep(exp, off, executor="serial", batch="off", progress=False)
        _same(_histories(auto, "tiny"), _histories(off, "tiny"))


def test_an_interrupted_batched_sweep_resumes_with_the_missing_runs_only(tmp_path):
    exp = tiny(MIXED)
    stored = []

    def stop_after_three(spec, record):
        stored.append(spec.key)
        if len(stored) == 3:  # Ctrl-C while a batch of 12 is being stored: the rest of it is lost
            raise KeyboardInterrupt

    with sweep.Store(tmp_path / "s.db") as store, sweep.Store(tmp_path / "off.db") as off:
        first = sweep.run_sweep(exp, store, executor="serial", on_result=stop_after_three, progress=False)
        assert first.interrupted and first.executed == 3 and store.count() == 3
        assert store._db.execute("SELECT COUNT(*) FROM claims").fetchone()[0] == 0
        again = []
        second = sweep.run_sweep(exp, store, executor="serial", progress=False,
                                 on_result=lambda spec, record: again.append(spec.key))
        assert (second.skipped, second.executed) == (3, 21) and second.complete
        assert set(again) == {s.key for s in exp.expand()} - set(stored[:3])
        sweep.run_sweep(exp, off, executor="serial", batch="off", progress=False)
        _same(_histories(store, "tiny"), _histories(off, "tiny"))


def test_a_run_held_by_another_sweep_leaves_its_batch(tmp_path):
    exp = tiny(seeds=[0, 1, 2])
    specs = exp.expand()
    held = specs[1].key
    with sweep.Store(tmp_path / "s.db") as store:
        store.claim([held], "other-host:3:0", lease=30.0)

        def other_sweep_finishes(spec, record):  # meanwhile, the other sweep stores its run
            if store.run(held) is None:
                store.put(held, specs[1].config, record, owner="other-host:3:0")

        summary = sweep.run_sweep(exp, store, executor="serial", on_result=other_sweep_finishes, progress=False)
    assert (summary.executed, summary.by_others, summary.counts["done"]) == (11, 1, 12)
