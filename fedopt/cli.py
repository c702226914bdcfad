"""The ``fedopt`` command line (also ``python -m fedopt``).

``fedopt run``      one run from flags or a TOML file: prints a summary, writes its history (CSV)
``fedopt sweep``    expand an experiment (TOML file or built-in name) into runs, execute, store
``fedopt report``   tables, PNG figures, fitted slopes and the papers' claims checked (``--csv``: the rows as data)
``fedopt store``    the sweeps a store keeps: ``ls``, ``show``, ``rm``
``fedopt data``     the papers' data sets (MNIST, Fashion-MNIST, a9a) in the cache: ``ls``, ``download NAME``
``fedopt list``     algorithms, problems, regularizers, datasets, built-in experiments, backends
``fedopt bench``    the standard shapes against their floor; ``--sweep``: runs/s; ``--startup``
``fedopt demo``     the linear-speedup sweep on the bundled digits and its report (``--quick``: the tour)
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys
import textwrap
from pathlib import Path

RESULTS = Path("results")
#: Sweeps with more distinct runs than this need ``--yes`` (after a look at ``--dry-run``).
LARGE_SWEEP = 20_000
#: The exit status of ``sweep --check`` and ``report --check`` when a claim of the paper fails.
CLAIM_FAILED = 3
#: The last round's values that `fedopt run` prints (those the run has: a game has no test accuracy).
_SUMMARY = (("||F_nat||^2", "stationarity", ".4e"), ("objective", "objective", ".6g"), ("gap", "gap", ".4e"),
            ("distance to z*", "distance", ".4e"), ("test accuracy", "test_accuracy", ".4f"),
            ("nonzeros", "nnz", "d"), ("prox evals", "prox_evals", "d"))

#: What ``fedopt run`` starts from when no TOML file is given.
DEFAULT_RUN = """
[run]
rounds = 100
eval_every = 10
seeds = [0]

[run.dataset]
name = "digits"
partition = "sorted"
n_clients = 10

[run.problem]
name = "softmax"

[run.regularizer]
name = "elasticnet"
l1 = 1e-3
l2 = 2e-2

[run.algorithm]
name = "fednmap"
"""


def _assignments(items) -> dict:
    from fedopt.sweep.config import parse_assignment

    return dict(parse_assignment(item) for item in items or [])


# --------------------------------------------------------------------------------------------- list
def _list(args) -> int:
    from fedopt import _backend, algorithms, problems, regularizers
    from fedopt.sweep.config import builtin_experiments, dataset_names
    from fedopt.sweep.execute import EXECUTORS

    print("algorithms:", ", ".join(algorithms.available()))
    print("problems:", ", ".join(problems.PROBLEMS))
    print("regularizers:", ", ".join(regularizers.available()))
    print("datasets:", ", ".join(dataset_names()))
    print("backends:", ", ".join(_backend.available()), "(and 'auto')")
    print("executors:", ", ".join(EXECUTORS))
    print("experiments (fedopt sweep NAME):")
    for name, path in builtin_experiments().items():
        title = _title(path)
        print(f"    {name:28s} {title}")
    return 0


def _title(path) -> str:
    try:
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover
        import tomli as tomllib
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8")).get("experiment", {}).get("title", "")
    except (OSError, ValueError):
        return ""


# ---------------------------------------------------------------------------------------------- run
def _run(args) -> int:
    from fedopt import algorithms
    from fedopt.problems import VI_PROBLEMS
    from fedopt.run import objective_rose
    from fedopt.sweep.config import ConfigError, load_experiment, parse_experiment
    from fedopt.sweep.execute import execute_run
    from fedopt.sweep.validate import validate

    exp = load_experiment(args.config) if args.config else parse_experiment(DEFAULT_RUN, source="fedopt run",
                                                                               name="run")
    for section in ("dataset", "problem", "regularizer", "algorithm"):
        value = getattr(args, section)
        if value is not None:  # a new dataset, model or method starts from its own defaults
            keep = {k: v for k, v in exp.run.get(section, {}).items() if section == "dataset" and k == "n_clients"}
            exp = exp.override({section: {"name": value, **keep}}, origin=f"--{section}")
    try:
        smooth_only = algorithms.ALGORITHMS[algorithms.canonical(exp.run["algorithm"]["name"])].smooth_only
    except ValueError:  # an unknown method: the validation below names its flag
        smooth_only = False
    if not args.config and args.regularizer is None and smooth_only:
        exp.run.pop("regularizer", None)  # the default run's elastic net: the method takes phi = 0 only
    synthetic = exp.run["problem"]["name"] in VI_PROBLEMS  # a game: no data set, its own n_clients
    if synthetic and args.dataset is not None:
        raise ConfigError(f"--dataset {args.dataset}: problem {exp.run['problem']['name']!r} is a synthetic operator "
                          "without a data set: leave out --dataset (--n-clients sets the game's clients)")
    if synthetic:
        if not args.config or args.problem is not None:  # the data set of the run that --problem replaced
            exp.run.pop("dataset", None)
        if args.regularizer is None and not args.config:  # the default run's elastic net is for models:
            exp.run.pop("regularizer", None)  # the game's own phi (zero for most)
    clients = ("problem" if synthetic else "dataset") + ".n_clients"
    for flag, key, value in (("--rounds", "rounds", args.rounds), ("--n-clients", clients, args.n_clients),
                             ("--backend", "backend", args.backend),
                             ("--seed", "seeds", None if args.seed is None else [args.seed])):
        if value is not None:
            exp = exp.override({key: value}, origin=flag)
    exp = exp.override(_assignments(args.set))
    if "seeds" not in exp.overrides and len(exp.seeds) > 1:  # one run: the first seed, recorded as a change
        exp = exp.override({"seeds": exp.seeds[:1]}, origin="fedopt run")
    if args.regularizer is not None:
        exp = _fit_steps_to(exp)
    specs = exp.expand()
    if len({s.key for s in specs}) != 1:
        raise ValueError(f"{args.config or 'the run'} expands to {len({s.key for s in specs})} runs; `fedopt run` "
                         "runs one: use `fedopt sweep`, or fix the grid's axes with --set KEY=VALUE")
    validate(specs)
    spec = specs[0]
    cfg = spec.config
    out = Path(args.out) if args.out else RESULTS / f"run-{spec.key[:12]}.csv"
    for flag, path in (("--out", out), ("--store", args.store and Path(args.store))):
        if path:
            _check_writable(path, flag)  # before the run, not after it: its work is not lost to a typo
    if args.store:
        _check_store(Path(args.store))
    data = cfg.get("dataset") or {"name": "no data set", "n_clients": cfg["problem"].get("n_clients")}
    print(f"{cfg['algorithm']['name']} on {cfg['problem']['name']} + {cfg['regularizer']['name']}, "
          f"{data['name']} with {data.get('n_clients')} clients, {cfg['rounds']} rounds, "
          f"seed {cfg['seed']} (run {spec.key[:12]})", flush=True)
    record = execute_run(cfg, progress=None)
    if record["status"] == "failed":
        if args.store:
            _store_run(args.store, exp, specs, record)
        print(f"fedopt run: the run failed: {record['error'].strip().splitlines()[-1]}", file=sys.stderr)
        return 1
    history = record["history"]
    hyper = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                      for k, v in cfg["algorithm"].items() if k != "name")
    print(f"    hyperparameters: {hyper}")
    print(f"    status {record['status']} on backend {record['backend']}, {record['run_seconds']:.2f}s")
    if history["round"]:  # empty when the run diverged at its first evaluation
        last = {k: v[-1] for k, v in history.items()}
        shown = ", ".join(f"{label} = {last[key]:{form}}" for label, key, form in _SUMMARY
                          if key in last and not (isinstance(last[key], float) and math.isnan(last[key])))
        print(f"    round {last['round']}: {shown}")
        _note_pruned(last["nnz"], cfg["regularizer"])
    rose = objective_rose(history) if record["status"] == "done" else None  # (a diverged run says more below)
    if rose:
        print(f"    the objective rose from {rose[0]:.6g} to {rose[1]:.6g}: the steps may be too large")
    with open(out, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(list(history))
        writer.writerows(zip(*history.values(), strict=True))
    print(f"    history: {out}")
    if args.store:
        _store_run(args.store, exp, specs, record)
    if record["status"] == "diverged":
        print(f"    {record['error']}", file=sys.stderr)
        return 1
    return 0


def _note_pruned(nonzeros, table) -> None:
    """A hint when the regularizer's strength zeroes the whole model (``lam = 1``, the default of
    ``--regularizer``, prunes every weight of the bundled problems): a stationary point, but rarely the one wanted."""
    from fedopt.sweep.execute import make_regularizer

    lam = getattr(make_regularizer(table), "lam", None)
    if nonzeros == 0 and lam:
        print(f"    every weight is 0: lam = {lam:g} prunes them all; keep some with a smaller one, "
              f"e.g. --set regularizer.lam={lam / 1000:g}")


def _fit_steps_to(exp):
    """Lower the default prox steps (``gamma``, ``metric_gamma``) that a weakly convex regularizer chosen with
    ``--regularizer`` cannot take (they need ``step * rho < 1``); values set with ``--set`` are left to the checks."""
    from fedopt import algorithms
    from fedopt.sweep.execute import make_regularizer

    regularizer = make_regularizer(exp.run["regularizer"])
    rho, limit = regularizer.weak_convexity, regularizer.step_limit
    if rho <= 0:
        return exp
    safe = 0.5 / rho
    method = algorithms.canonical(exp.run["algorithm"]["name"])
    lowered = {}
    if "gamma" in algorithms.hyperparameters(method) and "algorithm.gamma" not in exp.overrides:
        gamma = exp.run["algorithm"].get("gamma", algorithms.hyperparameters(method)["gamma"])
        if isinstance(gamma, (int, float)) and gamma >= limit:
            lowered["algorithm.gamma"] = safe
    metric_gamma = exp.run.get("metric_gamma")
    if "metric_gamma" not in exp.overrides and isinstance(metric_gamma, (int, float)) and metric_gamma >= limit:
        lowered["metric_gamma"] = safe
    if lowered:
        print(f"{', '.join(k.rpartition('.')[2] for k in lowered)} = {safe:g} (= 1 / (2 rho)): "
              f"{exp.run['regularizer']['name']} is rho = {rho:g}-weakly convex and its prox needs step * rho < 1")
        exp = exp.override(lowered, origin="--regularizer")
    return exp


# -------------------------------------------------------------------------------------------- sweep
def _sweep(args) -> int:
    from fedopt.sweep.config import load_experiment
    from fedopt.sweep.execute import check_options, run_sweep
    from fedopt.sweep.store import Store
    from fedopt.sweep.validate import estimate, validate

    check_options(args.executor, args.workers, args.scheduler, args.lease)  # before the store is created
    exp = load_experiment(args.experiment, _assignments(args.set), data=args.data)
    if args.quick:
        exp = exp.shortened(rounds=args.quick_rounds, seeds=1, values=2)
    if args.backend is not None:
        exp = exp.override({"backend": args.backend}, origin="--backend")
    store_path = Path(args.store) if args.store else RESULTS / f"{exp.name}.db"
    specs = exp.expand()
    distinct = len({s.key for s in specs})
    note = ""
    if args.executor == "serial" and args.workers is not None:
        note = f" (one batch at a time: --workers {args.workers} is not used)"
    print(f"{exp.name}: {len(specs)} grid points x seeds, {distinct} distinct runs; store {store_path}; "
          f"executor {args.executor}{note}\ndata: {exp.data}", flush=True)
    validate(specs)  # bad values stop here, before the store is touched
    if args.dry_run:
        workers = 1 if args.executor == "serial" else args.workers
        if store_path.exists() and not _empty_file(store_path) and args.resume:  # --no-resume reruns them too
            with Store(store_path, readonly=True) as store:
                print(estimate(specs, store, workers, retry_failed=args.retry_failed)["text"])
        else:
            print(estimate(specs, None, workers, retry_failed=args.retry_failed)["text"])
        return 0
    if distinct > LARGE_SWEEP and not args.yes:
        raise ValueError(f"{distinct} runs is more than {LARGE_SWEEP}: see the time it takes with --dry-run, "
                         "then run it with --yes")
    with Store(store_path) as store:
        summary = run_sweep(exp, store, executor=args.executor, workers=args.workers, scheduler=args.scheduler,
                            resume=args.resume, retry_failed=args.retry_failed, lease=args.lease, batch=args.batch)
    print(summary, flush=True)
    if summary.interrupted:
        return 143 if summary.signal == "SIGTERM" else 130
    code = 0 if summary.ok else 1
    if not summary.ok:
        print(f"`fedopt store show {store_path} {summary.sweep[:12]}` lists the errors; --retry-failed runs the "
              "failed runs again", file=sys.stderr)
    if args.report:
        code = max(code, _report(argparse.Namespace(store=str(store_path), out=None, experiment=exp.name,
                                                    sweep=summary.sweep, no_plots=False, csv=None, parquet=None,
                                                    check=args.check)))
    elif args.check:
        code = max(code, _check(store_path, summary.sweep))
    return code


def _check(store_path, sweep) -> int:
    """Print the claims of a sweep; :data:`CLAIM_FAILED` when one fails that the experiment does not document."""
    from fedopt.sweep.claims import summary
    from fedopt.sweep.report import check_claims

    verdicts = check_claims(store_path, sweep)
    if not verdicts:
        print("the experiment states no claims ([[claim]] tables) to check")
        return 0
    print(f"the paper's claims ({summary(verdicts)}):")
    for verdict in verdicts:
        print(textwrap.indent(str(verdict), "    "))
    return _claims_code(verdicts)


def _claims_code(verdicts) -> int:
    failed = [v.claim.name for v in verdicts if v.unexpected_failure]
    if failed:
        print(f"claims that fail: {', '.join(failed)}", file=sys.stderr)
        return CLAIM_FAILED
    return 0


def _report(args) -> int:
    from fedopt.sweep.report import check_export, export, report

    for flag, path in (("--csv", args.csv), ("--parquet", args.parquet)):
        if path:  # before the report, so that a missing pyarrow is not found after all its work
            try:
                check_export(path)
            except (ImportError, ValueError) as err:
                raise ValueError(f"{flag}: {err}") from None
    result = report(args.store, out=args.out, experiment=args.experiment, sweep=args.sweep, plots=not args.no_plots)
    for path in (args.csv, args.parquet):
        if path:
            export(args.store, path, sweep=result["sweeps"])  # the runs of the reported sweeps, not the whole store
            print(f"one row per run and evaluated round: {path}")
    if not args.check:
        return 0
    # as `fedopt sweep --check`: 1 when a run failed, CLAIM_FAILED when a claim fails (it takes precedence)
    return max(0 if _runs_ok(args.store, result["sweeps"]) else 1, _claims_code(result["claims"]))


def _runs_ok(store_path, sweeps) -> bool:
    """Whether the stored runs of ``sweeps`` are what ``fedopt sweep`` exits 0 on (:attr:`SweepSummary.ok`);
    prints where to look when they are not."""
    from fedopt.sweep.execute import SweepSummary
    from fedopt.sweep.store import Store

    ok = True
    with Store(store_path, readonly=True) as store:
        for sweep in sweeps:
            info = store.sweep(sweep)  # its runs counted by stored status, and missing
            counts = info["counts"]
            summary = SweepSummary(info["experiment"], total=info["runs"], skipped=info["runs"], sweep=sweep,
                                   counts=counts)
            if not summary.ok:
                ok = False
                bad = ", ".join(f"{counts[s]} {s}" for s in ("failed", "missing") if counts[s])
                print(f"{summary.experiment}: {bad} of {summary.total} runs; `fedopt store show {store_path} "
                      f"{sweep[:12]}` lists the errors; `fedopt sweep` runs the missing runs, with --retry-failed "
                      "the failed ones too", file=sys.stderr)
    return ok


def _store(args) -> int:
    from fedopt.sweep.report import sweep_line
    from fedopt.sweep.store import Store

    if args.action == "rm":
        if not args.sweep:
            raise ValueError("`fedopt store rm STORE SWEEP` needs the sweep: an id from `fedopt store ls` or an "
                             "experiment name (its latest sweep)")
        if not Path(args.store).exists():  # opening it for writing would create it
            raise ValueError(f"no store at {args.store}; give the path of an existing store (`fedopt store ls "
                             "STORE` lists its sweeps)")
        with Store(args.store) as store:
            removed = store.remove_sweep(args.sweep)
        print(f"removed sweep {removed['sweep'][:12]} and {removed['runs_removed']} runs no other sweep uses")
        return 0
    if args.action == "ls" and args.sweep:
        raise ValueError(f"`fedopt store ls` lists every sweep; `fedopt store show {args.store} {args.sweep}` "
                         "shows one")
    with Store(args.store, readonly=True) as store:
        if args.action == "ls":
            sweeps = store.sweeps()
            print(f"{len(sweeps)} sweeps in {args.store} (the latest of each experiment is what `fedopt report` shows)")
            for sweep in sweeps:
                print("    " + sweep_line(sweep, experiment=True))
            return 0
        sweep = store.sweep(args.sweep) if args.sweep else None
        for item in [sweep] if sweep else store.sweeps():
            _show_sweep(store, item)
    return 0


def _store_run(path, exp, specs, record) -> None:
    """Keep ``fedopt run``'s one run (done, diverged or failed, with its traceback) in the store at ``path``."""
    from fedopt.sweep.store import Store

    with Store(path) as store:
        store.register(exp, specs)
        store.put(specs[0].key, specs[0].config, record)
    print(f"    stored in {path} (experiment {exp.name!r})")


def _data(args) -> int:
    from fedopt.datasets import catalog

    if args.action == "download":
        if not args.name:
            names = [name for name, entry in catalog.PAPER_DATA.items() if entry.downloadable]
            manual = [name for name, entry in catalog.PAPER_DATA.items() if not entry.downloadable]
            raise ValueError(f"`fedopt data download NAME` needs a name: {' or '.join(names)}"
                             + (f" ({', '.join(manual)}: by hand, `fedopt data ls` says how)" if manual else ""))
        print(f"{args.name}: in {catalog.download(args.name)}")
        return 0
    for row in catalog.status(name=args.name):
        state = "present" if row["present"] else f"missing {', '.join(row['missing'])}"
        print(f"{row['name']}: {state} in {row['folder']}\n    {row['description']}; used by "
              f"{', '.join(row['papers'])}")
        if not row["present"]:
            print(f"    to get it: {row['how_to_get']}")
    print("the built-in experiments run on a paper's data set when its files are present (fedopt sweep --data)")
    return 0


def _show_sweep(store, sweep) -> None:
    from fedopt.sweep.report import sweep_line

    print(sweep_line(sweep, experiment=True))
    for key, value in sweep["provenance"].items():
        print(f"    {key}: {value}")
    for grid in sweep["meta"].get("grids", []):
        axes = ", ".join(f"{k} = {v}" for k, v in grid["axes"].items())
        print(f"    grid {grid['name']}: {axes or 'one point'}")
    bad = [m for m in store.members(sweep["id"], with_history=False) if m["status"] in ("failed", "diverged")]
    for member in bad[:5]:
        last = ((member["error"] or "").strip().splitlines() or ["?"])[-1]
        if member["status"] == "diverged":
            last = last.split(". ")[0]  # the rule and its numbers; the advice that follows is the same for all
        print(f"    {member['status']} {member['key'][:12]} {member['labels']}: {last}")
    if len(bad) > 5:
        print(f"    ... and {len(bad) - 5} more failed or diverged runs")


# -------------------------------------------------------------------------------------------- bench
def _bench(args) -> int:
    if args.list:
        return _bench_list()
    if args.json:
        _check_writable(Path(args.json), "--json")  # before the measurements, not after them
    if args.sweep:
        from fedopt.sweep.bench import bench_batch, bench_sweep, sweep_breakdown

        backend = None if args.backend == "auto" else args.backend
        rows = bench_sweep(workers=args.workers or [1, 2], experiment=args.experiment, rounds=args.rounds,
                           seeds=args.seeds, backend=backend)
        breakdown = sweep_breakdown(args.experiment, rounds=args.rounds, seeds=args.seeds) if args.breakdown else None
        batched = bench_batch(runs=args.batch_runs, backend=backend or "numba") if args.batch_runs else None
        _bench_json(args.json, {"sweep": rows, "breakdown": breakdown, "batch": batched})
        return 0
    if args.startup:
        from fedopt.bench import import_seconds, startup_seconds

        result = startup_seconds(repeats=args.repeats)
        result["imports"] = imports = import_seconds()
        print("    imports (each with what it imports first): "
              + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in imports.items()))
        _bench_json(args.json, {"startup": result})
        return 0
    from fedopt import bench

    bench.main(backend=args.backend, quick=args.quick, dtypes=args.dtype, clients=args.clients,
               families=args.family, peers=args.peers, json_path=args.json)
    return 0


def _bench_json(path, document) -> None:
    if path:
        import json

        from fedopt.bench import machine

        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps({"machine": machine(), **document}, indent=1), encoding="utf-8")
        print(f"written to {path}")


def _bench_list() -> int:
    root = Path(__file__).resolve().parent.parent
    bench_dir = root / "bench"
    print("benchmark suite (pytest-benchmark; `make bench` runs it, results in BENCHMARKS.md):")
    if bench_dir.is_dir():
        for path in sorted(bench_dir.glob("bench_*.py")):
            text = path.read_text(encoding="utf-8")
            doc = text.split('"""')[1].strip().splitlines()[0] if text.startswith('"""') else ""
            count = text.count("\ndef bench_") + text.count("\ndef test_")
            print(f"    {path.name:24s} {count:3d} benchmarks  {doc}")
    else:
        print("    (bench/ is in the source tree; this installation has none)")
    notes = root / "BENCHMARKS.md"
    if notes.is_file():
        print("recorded in BENCHMARKS.md:")
        for line in notes.read_text(encoding="utf-8").splitlines():
            if line.startswith("## "):
                print(f"    {line[3:]}")
    return 0


# --------------------------------------------------------------------------------------------- demo
def _demo(args) -> int:
    if args.quick:
        from fedopt import demo

        demo.main(backend=args.backend)
        return 0
    from fedopt.demo import sweep_demo

    return sweep_demo(store=args.store, workers=args.workers, backend=args.backend)


# ------------------------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fedopt", description="Composite federated optimization on compiled kernels.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    backends = ["numpy", "numba", "gpu", "auto"]

    run = commands.add_parser("run", help="one run from flags or a TOML file; prints a summary and writes its history")
    run.add_argument("config", nargs="?", help="a TOML file or built-in experiment with one configuration "
                     "(default: FedNMap, softmax + elastic net on digits, 10 clients)")
    run.add_argument("--algorithm", help="a method of `fedopt list` (starts from its default hyperparameters)")
    run.add_argument("--problem", help="a problem of `fedopt list`: least_squares, logistic, softmax or mlp (on "
                     "--dataset), or a game without a data set: bilinear_game, quadratic_game, smooth_game, "
                     "robust_least_squares or l1_bilinear_game")
    run.add_argument("--dataset", help="a dataset of `fedopt list`")
    run.add_argument("--regularizer", help="a regularizer of `fedopt list` (with its default parameters)")
    run.add_argument("--n-clients", type=_positive, help="the number of clients (a game's n_clients)")
    run.add_argument("--rounds", type=int, help="communication rounds (default: the config file's; 100 without one)")
    run.add_argument("--seed", type=int, help="the run's seed: minibatches and the initial model (default: the "
                     "config file's first seed; 0 without one)")
    run.add_argument("--backend", choices=backends)
    run.add_argument("--set", action="append", metavar="KEY=VALUE",
                     help="any key below [run], e.g. algorithm.lr_local=0.05 or 'algorithm.lr_local=\"1/Q\"'")
    run.add_argument("--out", help="the history CSV (default results/run-<key>.csv)")
    run.add_argument("--store", help="also keep the run in this SQLite store")
    run.set_defaults(handler=_run)

    sweep = commands.add_parser("sweep", help="execute the runs of an experiment that the store lacks")
    sweep.add_argument("experiment", help="a TOML file or the name of a built-in experiment (`fedopt list`)")
    sweep.add_argument("--store", help="the SQLite store (default results/<experiment>.db)")
    sweep.add_argument("--executor", default="local", choices=["local", "dask", "serial"])
    sweep.add_argument("--workers", type=_positive, help="local processes or LocalCluster workers (default: the cores)")
    sweep.add_argument("--scheduler", metavar="ADDRESS", help="a running Dask scheduler, tcp://host:8786 "
                       "(with --executor dask; without it a LocalCluster is started)")
    sweep.add_argument("--backend", choices=backends, help="run every configuration on this backend")
    sweep.add_argument("--resume", action=argparse.BooleanOptionalAction, default=True,
                       help="skip the runs already stored (default); --no-resume runs everything again")
    sweep.add_argument("--retry-failed", action="store_true", help="run the stored failed runs again")
    sweep.add_argument("--set", action="append", metavar="KEY=VALUE",
                       help="fix a key below [run] for every run (a grid axis on it is dropped), e.g. seeds=[0,1] "
                            "or dataset.name=mnist; algorithm.METHOD.key drops a grid's axis on the shared "
                            "algorithm.key only when it fixes the key for every method of that grid that has it")
    sweep.add_argument("--data", choices=["auto", "paper", "embedded"], default="auto",
                       help="the paper's data set when its files are present (auto, the default; `fedopt data ls`), "
                            "always (paper) or never (embedded: the experiment's [run.dataset], e.g. digits)")
    sweep.add_argument("--quick", action="store_true", help="a smoke test: 1 seed, 2 values per axis, few rounds "
                       "(the rounds, eval_every and seeds that --set fixes stay as set)")
    sweep.add_argument("--quick-rounds", type=int, default=5, help=argparse.SUPPRESS)
    sweep.add_argument("--report", action="store_true", help="report the experiment when the sweep is done")
    sweep.add_argument("--dry-run", action="store_true",
                       help="print the number of runs, how many are stored and an estimate of the time (from a few "
                            "short timing runs); store nothing")
    sweep.add_argument("--yes", action="store_true", help=f"run a sweep of more than {LARGE_SWEEP} runs")
    sweep.add_argument("--check", action="store_true",
                       help=f"check the paper's claims ([[claim]] tables) on the sweep; exit {CLAIM_FAILED} when one "
                            "fails that the experiment does not document")
    sweep.add_argument("--lease", type=float, default=60.0, metavar="SECONDS",
                       help="how long a claim on a run outlives a process that stopped renewing it (default 60): "
                            "several sweeps on one store share its runs; --executor serial renews it between the "
                            "evaluations of its run or batch")
    sweep.add_argument("--batch", type=_batch, default="auto", metavar="auto|N|off",
                       help="run compatible runs (other seeds, real hyperparameters, regularization strengths, "
                            "partition seeds) together as one batch: auto (default) makes batches of at most "
                            "ceil(runs / (2 x workers)) runs (one worker: all; at most 64), N of at most N; off runs "
                            "each run alone")
    sweep.set_defaults(handler=_sweep)

    rep = commands.add_parser("report", help="tables, PNG figures and fitted slopes of a store")
    rep.add_argument("store")
    rep.add_argument("--out", help="folder of the CSV, Markdown and PNG files (default <store>_report)")
    rep.add_argument("--experiment", help="only this experiment of the store")
    rep.add_argument("--sweep", help="this sweep (an id or prefix from `fedopt store ls`; default: the latest of "
                     "each experiment)")
    rep.add_argument("--no-plots", action="store_true", help="tables and slopes only")
    rep.add_argument("--csv", metavar="FILE", help="also write one row per run and evaluated round of the reported "
                     "sweeps to this CSV file; each row names its grid point too (point.* columns, the axes' values "
                     "as written), so a run that two points share has rows under each")
    rep.add_argument("--parquet", metavar="FILE", help="the same rows as Parquet (needs pyarrow)")
    rep.add_argument("--check", action="store_true",
                     help=f"exit {CLAIM_FAILED} when a claim of the paper fails that the experiment does not document")
    rep.set_defaults(handler=_report)

    store = commands.add_parser("store", help="the sweeps kept in a store: ls, show, rm")
    store.add_argument("action", choices=["ls", "show", "rm"])
    store.add_argument("store")
    store.add_argument("sweep", nargs="?", help="a sweep id or prefix, or an experiment name (its latest sweep)")
    store.set_defaults(handler=_store)

    data = commands.add_parser("data", help="the papers' data sets in the cache: ls [NAME], download NAME")
    data.add_argument("action", choices=["ls", "download"])
    data.add_argument("name", nargs="?", help="ls: only this data set; download: mnist or fashion_mnist "
                                           "(a9a is downloaded by hand: see ls)")
    data.set_defaults(handler=_data)

    listing = commands.add_parser("list", help="algorithms, problems, regularizers, datasets, experiments, backends")
    listing.set_defaults(handler=_list)

    bench = commands.add_parser("bench", help="time the standard shapes against a same-process copy or GEMM floor")
    bench.add_argument("--quick", action="store_true", help="fewer rows and calls, MLP rounds at the small shape")
    bench.add_argument("--json", metavar="FILE", help="also write the rows (and the machine) to this JSON file")
    bench.add_argument("--backend", default="auto", choices=backends,
                       help="the backend of the shapes; with --sweep, of every run of the sweep and the batch")
    bench.add_argument("--dtype", nargs="+", default=["float64", "float32"], choices=["float64", "float32"])
    bench.add_argument("--clients", type=_positive, nargs="+", metavar="N", help="numbers of clients (default 100)")
    bench.add_argument("--family", nargs="+", choices=["prox", "gossip", "gradient", "round"],
                       help="only these families")
    bench.add_argument("--peers", action="store_true",
                       help="also time the peers of bench/peers/ (a source checkout) on the FedNMap rounds")
    bench.add_argument("--list", action="store_true", help="list the pytest-benchmark files instead")
    bench.add_argument("--sweep", action="store_true", help="instead: runs per second of a whole sweep")
    bench.add_argument("--experiment", default="speedup_demo", help="the sweep of --sweep (e.g. fednmap_fig2)")
    bench.add_argument("--workers", type=_positive, nargs="+", help="worker counts for --sweep (default 1 2)")
    bench.add_argument("--rounds", type=_positive, help="shorten the --sweep experiment to this many rounds")
    bench.add_argument("--seeds", type=_positive, help="keep the first SEEDS seeds of the --sweep experiment")
    bench.add_argument("--batch-runs", type=_skippable, default=64, metavar="R",
                       help="with --sweep: also R FedNMap runs at the sweep shape one at a time, as one batch and "
                            "as the fused kernel alone (0: skip)")
    bench.add_argument("--breakdown", action="store_true",
                       help="with --sweep: also run it serially and split the time (compile, data, rounds, "
                            "metrics, store)")
    bench.add_argument("--startup", action="store_true",
                       help="instead: wall time of a small `fedopt run`, cold (empty kernel cache) and warm")
    bench.add_argument("--repeats", type=_positive, default=3, help=argparse.SUPPRESS)
    bench.set_defaults(handler=_bench)

    demo = commands.add_parser("demo", help="the FedNMap linear-speedup sweep on the bundled digits and its report")
    demo.add_argument("--quick", action="store_true",
                      help="instead: train federated models on digits, check a federated Lasso, time the kernels")
    demo.add_argument("--backend", default="auto", choices=backends)
    demo.add_argument("--store", default=str(RESULTS / "demo.db"), help="the SQLite store (default %(default)s)")
    demo.add_argument("--workers", type=_positive, help="local worker processes (default: the cores)")
    demo.set_defaults(handler=_demo)
    return parser


def _check_writable(path: Path, flag: str) -> None:
    """Create ``path``'s folder and try to write ``path`` (leaving it as it was), or say which flag to fix."""
    existed = path.exists()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        open(path, "a").close()
    except OSError as exc:
        raise ValueError(f"{flag} {str(path)!r} cannot be written ({exc}): "
                         f"give {flag} a file in a writable folder") from None
    if not existed:
        path.unlink()


def _empty_file(path: Path) -> bool:
    """Whether ``path`` is a file of 0 bytes: a store with nothing stored yet, which `Store` fills when it writes."""
    return path.is_file() and path.stat().st_size == 0


def _check_store(path: Path) -> None:
    """Refuse a ``--store`` file that is not a fedopt store this fedopt can write, reading it only."""
    from fedopt.sweep.store import Store, StoreError

    if path.exists() and not _empty_file(path):
        try:
            Store(path, readonly=True).close()
        except StoreError as err:
            raise ValueError(f"--store: {err}") from None


def _positive(text: str, minimum: int = 1, meaning: str = "") -> int:
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}{meaning}, got {text!r}")
    return value


def _skippable(text: str) -> int:
    """A count where 0 means skip."""
    return _positive(text, 0, " (0: skip)")


def _batch(text: str):
    from fedopt.sweep.batching import batch_option

    try:
        return batch_option(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be auto, off or an integer >= 1 (the most runs in one batch), "
                                         f"got {text!r}") from None


def main(argv: list[str] | None = None) -> int:
    from fedopt.sweep.config import ConfigError

    args = build_parser().parse_args(argv)
    try:
        code = args.handler(args)
        sys.stdout.flush()  # a reader that left shows here, not in Python's flush at exit
        return code
    except ConfigError as exc:
        print(f"fedopt {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"fedopt {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of stdout left (`| head`): stop quietly, as SIGPIPE would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes it
        return 141
    except (ValueError, RuntimeError, OSError) as exc:
        print(f"fedopt {args.command}: error: {exc}", file=sys.stderr)
        return 2
