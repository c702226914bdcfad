"""Reports of a store: tables over seeds, curves in the style of the papers' figures, fitted slopes.

A store keeps every sweep it was given (another grid, seed list or override is another sweep).
For each experiment the report shows its latest sweep, or the one ``sweep=`` names, and lists the
others with how to choose one. Beside every table it states the sweep id, its overrides (``--set``,
``--quick``; "as written in the experiment file" when there are none), the fedopt version and
commit, the machine and the date; the same line is the footer of every figure and the top of
``report.md``.

For every grid of a sweep, the runs are grouped by their grid point (all labels but the seed). A
group's row gives the mean and the standard deviation over its seeds of the final
``||F_nat||^2`` (the last evaluated round), the mean final objective, test accuracy, prox
evaluations and run time (and consensus error, for the decentralized methods), and how many
seeds are done, diverged, failed or missing. Only ``done``
runs enter the means, the curves and the slopes: a grid says how many of its runs diverged,
failed or are missing (``3 of 40 runs diverged, excluded``). A grid with ``metric = "gap"`` (any
history column: the gap measures of the VI methods, ``distance``, ...) tabulates, fits and plots
that column's final value instead of ``||F_nat||^2``; columns without their own store column are
read from the stored history.

Slopes: on a grid with ``slope = "dataset.n_clients"`` (or ``"algorithm.local_steps"``) and for
each setting of its other axes, the least-squares line through ``(log x, log mean_seeds S_final)``
over the grid points whose seeds all finished ``done`` and whose axis value and final values (of
every seed) have a logarithm (> 0); the others are left out, and the slope line says how many and
why (a mean over fewer seeds is not the same measurement; a final value of exactly 0 has no place
on a log-log line); the 95 % confidence interval of the slope is ``b +- t_{0.975, k-2} * se(b)``
(:func:`t_quantile`), with ``k`` points (none below 3 points). This is the FedNMap paper's measure
of linear speedup (-1.436 against log n in Fig. 3, -1.181 against log Q in Fig. 4). A grid's
``paper_slope`` (the paper's measured value) and ``predicted_slope`` (what a theorem's rate
predicts) are printed beside the fitted one; beside a sweep with overrides the paper's value is
marked as measured on the paper's grid, not comparable.

Claims: an experiment's ``[[claim]]`` tables (:mod:`fedopt.sweep.claims`) are checked against
the sweep and printed after its tables, each as holds, fails or inconclusive with the statistics
behind the verdict; on a sweep with overrides each carries the caution that the claim is about
the paper's setting. ``claims.csv`` beside each experiment's ``summary.csv`` holds the verdicts
as data.

Figures (PNG, matplotlib, the ``plot`` extra; without it the tables and slopes are still
printed): per grid, ``GRID_curves.png`` with one panel per setting of the axes other than the
``lines`` axis and the mean over seeds of the grid's metric against rounds (min-max band over
seeds; log scale for the :data:`LOG_METRICS`, not for a test accuracy), one ``GRID_Y_vs_X.png``
for each of the grid's ``curves`` (test accuracy against training time or prox evaluations, the
FedCanon paper's measures), and ``GRID_slope.png`` with final
stationarity against the slope axis on log-log axes, the seeds, their mean and the fitted line.

:func:`export` writes the runs as data, one row per run per evaluated round (CSV, or Parquet
with pyarrow), for plotting with other tools; ``fedopt report --csv`` writes the runs of the sweeps
it reported, each row naming its sweep and grid point.
"""

from __future__ import annotations

import csv
import datetime
import io
import json
import math
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedopt.run import STALLED

#: History columns shown and compared on the log scale (they shrink by orders of magnitude).
LOG_METRICS = ("stationarity", "normal_map", "gap", "gap_bound", "distance", "consensus")
#: Axis labels of the history columns a figure can plot against.
AXIS_LABELS = {"round": "communication round", "seconds": "training time (s, evaluations excluded)",
               "prox_evals": "prox evaluations", "grad_evals": "gradient evaluations",
               "floats_up": "floats sent up", "floats_down": "floats sent down"}
PLOT_HINT = "matplotlib is not installed, so no PNG figures: pip install 'fedopt[plot]'"
#: Overrides that do not change what a run computes (where it ran), so leave a sweep comparable to the paper.
NEUTRAL_OVERRIDES = ("backend",)
NOT_DONE = ("diverged", "failed", "missing")
#: History columns of some methods that get a column of the table when the runs record them
#: (the decentralized methods' consensus error ``sum_i ||x_i - xbar||^2``).
EXTRA_COLUMNS = ("consensus",)


@dataclass
class Slope:
    """A fitted line ``log y = intercept + slope * log x`` with the 95 % interval of the slope.

    ``left_out`` grid points of the setting were not fitted (``left_out_why``: a seed not done, or no logarithm);
    ``caution`` qualifies the paper's value when the sweep does not use the paper's grid.
    """

    experiment: str
    grid: str
    axis: str
    setting: dict
    slope: float
    intercept: float
    low: float
    high: float
    points: int
    paper: float | None = None
    predicted: float | None = None
    metric: str = "stationarity"
    left_out: int = 0
    left_out_why: str = ""
    caution: str | None = None

    def __str__(self) -> str:
        axes = [*self.setting, self.axis]
        setting = ", ".join(f"{_short(k, axes)}={_fmt(v)}" for k, v in self.setting.items())
        ci = f"95% CI [{self.low:.3f}, {self.high:.3f}]" if math.isfinite(self.low) else "no CI with < 3 points"
        left = f", {_left_out(self.left_out, self.left_out_why)}" if self.left_out else ""
        predicted = f"; predicted {self.predicted:g}" if self.predicted is not None else ""
        return (f"{self.experiment}/{self.grid}{' (' + setting + ')' if setting else ''}: slope of log {self.metric} "
                f"against log {_short(self.axis, axes)} = {self.slope:.3f}, {ci}, {self.points} points{left}{predicted}"
                f"{self.paper_text()}")

    def paper_text(self) -> str:
        """``"; paper -1.436"``, with the caution when the sweep is not the paper's grid; empty without a value."""
        if self.paper is None:
            return ""
        return f"; paper {self.paper:g}" + (f" ({self.caution})" if self.caution else "")


def _left_out(count: int, why: str) -> str:
    return f"{count} point{'s' * (count != 1)} left out ({why})"


def fit_slope(x, y, level: float = 0.95) -> tuple[float, float, float, float]:
    """``(slope, intercept, low, high)`` of the least-squares line of ``log y`` on ``log x``.

    ``low, high`` is the ``level`` confidence interval of the slope from the t distribution with
    ``k - 2`` degrees of freedom (NaN with fewer than 3 points).
    """
    lx, ly = np.log(np.asarray(x, float)), np.log(np.asarray(y, float))
    k = len(lx)
    if k < 2 or np.ptp(lx) == 0:
        raise ValueError(f"a slope needs at least 2 distinct x values, got {list(x)}")
    slope, intercept = np.polyfit(lx, ly, 1)
    if k < 3:
        return float(slope), float(intercept), math.nan, math.nan
    residuals = ly - (intercept + slope * lx)
    se = math.sqrt(residuals @ residuals / (k - 2) / ((lx - lx.mean()) @ (lx - lx.mean())))
    half = t_quantile(0.5 + level / 2, k - 2) * se
    return float(slope), float(intercept), float(slope - half), float(slope + half)


def t_quantile(probability: float, dof: float) -> float:
    """The ``probability`` quantile of Student's t with ``dof`` (real) degrees of freedom: what
    ``scipy.stats.t.ppf`` gives, through ``scipy.special`` (a third of the import time of
    ``scipy.stats``, 0.17 against 0.51 s, which a report paid for this one number)."""
    from scipy.special import stdtrit

    return float(stdtrit(dof, probability))


# ------------------------------------------------------------------------------------- provenance
def overrides_text(overrides: dict) -> str:
    """The overrides of a sweep in words: ``rounds=5, seeds=[0]``, or "as written in the experiment file"."""
    if not overrides:
        return "as written in the experiment file"
    if "unrecorded" in overrides:
        return "overrides not recorded (stored by an older fedopt)"
    parts = []
    for key, value in overrides.items():
        if key == "quick" and isinstance(value, dict):
            parts.append("quick (" + ", ".join(f"{k}={_fmt(v)}" for k, v in value.items()) + ")")
        else:
            parts.append(f"{key}={_fmt(value)}")
    return ", ".join(parts)


def provenance_line(sweep: dict) -> str:
    """Sweep id, overrides, fedopt version and commit, machine and date: what stands beside a table or figure."""
    origin = sweep.get("provenance") or {}
    commit = origin.get("commit")
    version = f"fedopt {origin.get('fedopt_version') or '?'}" + (f" (commit {commit[:10]})" if commit else "")
    machine = origin.get("machine") or origin.get("cpu_name") or "machine not recorded"
    host = f" on {origin['host']}" if origin.get("host") else ""
    date = origin.get("date") or "date not recorded"
    overrides = overrides_text(sweep.get("overrides") or {})
    return f"sweep {sweep['id'][:12]}: {overrides}; {version}; {machine}{host}; {date}"


def _comparable(overrides: dict) -> bool:
    """Whether a sweep runs the grid as written (the only overrides are where it ran)."""
    return all(key in NEUTRAL_OVERRIDES for key in overrides)


def _caution(overrides: dict, subject: str = "the paper's grid") -> str | None:
    if _comparable(overrides):
        return None
    if "unrecorded" in overrides:
        return f"{subject}; this sweep's overrides were not recorded: compare with care"
    changed = {k: v for k, v in overrides.items() if k not in NEUTRAL_OVERRIDES}
    return f"{subject}; this sweep overrides {overrides_text(changed)}: not comparable"


def _date(seconds) -> str:
    return datetime.datetime.fromtimestamp(seconds).strftime("%Y-%m-%d %H:%M")


def sweep_line(sweep: dict, experiment: bool = False) -> str:
    """One line of a stored sweep: id, (experiment,) date, runs by status, overrides."""
    counts = ", ".join(f"{n} {status}" for status, n in sweep["counts"].items() if n) or "nothing stored"
    name = f"{sweep['experiment']:24s} " if experiment else ""
    return (f"{sweep['id'][:12]}  {name}{_date(sweep['updated'])}  {sweep['runs']} runs ({counts})  "
            f"{overrides_text(sweep['overrides'])}")


# ---------------------------------------------------------------------------------------- grouping
def _short(key: str, axes=()) -> str:
    """``n_clients`` for ``dataset.n_clients`` (``algorithm`` for ``algorithm.name``), or ``key`` itself when
    another of ``axes`` has the same short name (``algorithm.gamma`` beside ``regularizer.gamma``)."""
    def short(name):
        parts = name.split(".")
        return parts[0] if parts[-1] == "name" and len(parts) == 2 else parts[-1]

    return key if any(short(a) == short(key) for a in axes if a != key) else short(key)


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _group(members):
    """``{grid: {point_json: [members]}}`` in sweep order."""
    grids: dict = {}
    for m in members:
        point = {k: v for k, v in m["labels"].items() if k != "seed"}
        grids.setdefault(m["grid"], {}).setdefault(json.dumps(point, sort_keys=True), []).append(m)
    return grids


def _final(run, column):
    """The last recorded value of ``column`` in a run: its store column, else the end of its history."""
    value = run["final"].get(column)
    if value is None and column not in run["final"] and run.get("history"):
        values = run["history"].get(column) or [None]
        value = values[-1]
    return value if value is None or math.isfinite(value) else None


def _status(run) -> str:
    return run["status"] or "missing"


def _stats(runs, metric="stationarity"):
    done = [r for r in runs if r["status"] == "done" and _final(r, "stationarity") is not None]
    s = np.array([r["final"]["stationarity"] for r in done])

    def mean(column):
        values = [r["final"][column] for r in done if r["final"][column] is not None]
        return float(np.mean(values)) if values else math.nan

    return {
        "seeds": len(runs), "done": len(done), **{word: sum(_status(r) == word for r in runs) for word in NOT_DONE},
        "stationarity_mean": float(s.mean()) if len(s) else math.nan,
        "stationarity_std": float(s.std(ddof=1)) if len(s) > 1 else (0.0 if len(s) else math.nan),
        "stationarity_min": float(s.min()) if len(s) else math.nan,
        "stationarity_max": float(s.max()) if len(s) else math.nan,
        "objective_mean": mean("objective"), "test_accuracy_mean": mean("test_accuracy"),
        "prox_evals_mean": mean("prox_evals"), "grad_evals_mean": mean("grad_evals"),
        "run_seconds_mean": float(np.mean([r["run_seconds"] for r in done])) if done else math.nan,
        **({} if metric == "stationarity" else _metric_stats(done, metric)),
        **{f"{c}_mean": _mean_final(done, c) for c in EXTRA_COLUMNS if any(c in (r["history"] or {}) for r in done)},
    }


def _mean_final(done, column) -> float:
    values = [v for v in (_final(r, column) for r in done) if v is not None]
    return float(np.mean(values)) if values else math.nan


def _metric_stats(done, metric):
    values = np.array([v for v in (_final(r, metric) for r in done) if v is not None], dtype=float)
    with np.errstate(over="ignore"):  # a run that blew up without reaching inf has a huge final value
        return {f"{metric}_mean": float(values.mean()) if len(values) else math.nan,
                f"{metric}_std": float(values.std(ddof=1)) if len(values) > 1 else (0.0 if len(values) else math.nan),
                f"{metric}_min": float(values.min()) if len(values) else math.nan}


def _excluded(runs) -> str | None:
    """``3 of 40 runs diverged, excluded; 1 of 40 failed, excluded`` for the runs of a grid; None when all are done."""
    total = len(runs)
    stalled = sum(_status(r) == "diverged" and STALLED in (r.get("error") or "") for r in runs)
    detail = {"diverged": f" ({stalled} of them did not converge)" if stalled else ""}
    parts = [f"{n} of {total} runs {word}{detail.get(word, '')}, excluded" for word in NOT_DONE
             if (n := sum(_status(r) == word for r in runs))]
    return "; ".join(parts) or None


def _rose(runs) -> str | None:
    """A caution naming the done runs of a grid that ended above their starting objective (kept in the table)."""
    from fedopt.run import objective_rose

    rose = [r for r in runs if r["status"] == "done" and r.get("history") and objective_rose(r["history"])]
    if not rose:
        return None
    return (f"caution: {len(rose)} of {len(runs)} runs ended with a higher objective than they started with "
            "(kept as done; too large a step?)")


def metric_label(metric: str, tex: bool = False) -> str:
    """The name of a grid's metric on an axis or in a table: ``||F_nat||^2`` for the stationarity, else the column."""
    if metric != "stationarity":
        return metric
    return r"$\|F_{nat}(x_t)\|^2$" if tex else "||F_nat||^2"


def _table(axes, rows, metric="stationarity") -> str:
    header = [_short(a, axes) for a in axes] + ["seeds ok", f"{metric_label(metric)} mean", "std", "objective",
                                                "test acc", "prox evals", "seconds"]
    extra = [c for c in EXTRA_COLUMNS if any(f"{c}_mean" in st for _, st in rows)]
    header += extra
    body = []
    for point, st in rows:
        status = f"{st['done']}/{st['seeds']}"
        for word in NOT_DONE:
            if st[word]:
                status += f" ({st[word]} {word})"
        body.append([_fmt(point.get(a)) for a in axes] + [
            status, f"{st[metric + '_mean']:.3e}", f"{st[metric + '_std']:.1e}", f"{st['objective_mean']:.5g}",
            f"{st['test_accuracy_mean']:.3f}", f"{st['prox_evals_mean']:.0f}", f"{st['run_seconds_mean']:.2f}"]
            + [f"{st.get(c + '_mean', math.nan):.3e}" for c in extra])
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in body]
    return "\n".join("    " + line for line in lines)


# ------------------------------------------------------------------------------------------ report
def _chosen(db, experiment, sweep):
    """The sweeps to report: the one ``sweep`` names, else the latest of each experiment (of ``experiment``)."""
    if sweep is not None:
        chosen = db.sweep(sweep)
        if experiment is not None and chosen["experiment"] != experiment:
            raise ValueError(f"sweep {sweep!r} of {db.path} is of experiment {chosen['experiment']!r}, not "
                             f"{experiment!r}: give one of them")
        return [chosen]
    latest: dict = {}
    for item in db.sweeps():
        latest.pop(item["experiment"], None)  # oldest first: keep each experiment's last one, in that order
        latest[item["experiment"]] = item
    if experiment is not None:
        if experiment not in latest:
            names = ", ".join(latest) or "none"
            raise ValueError(f"{db.path} holds no experiment {experiment!r}; it holds {names}")
        return [latest[experiment]]
    if not latest:
        raise ValueError(f"{db.path} holds no experiment yet; run `fedopt sweep` first")
    return list(latest.values())


def report(store, out=None, experiment: str | None = None, plots: bool = True, stream=None,
           sweep: str | None = None) -> dict:
    """Print the tables and slopes of ``store`` (a :class:`Store` or a path) and write CSV, Markdown and PNG files.

    Parameters
    ----------
    store : Store or path
        A path is opened read-only: the report never writes into the store.
    out : path or None
        The folder of the files (default: ``<store stem>_report`` beside the store).
    experiment : str or None
        Only this experiment (default: all of them), its latest sweep.
    plots : bool
        Write the PNG figures (when matplotlib is installed).
    stream : file or None
        Where the text goes (default ``sys.stdout``).
    sweep : str or None
        Report this sweep (an id, an id prefix or an experiment name) instead of the latest of
        each experiment; ``fedopt store ls`` lists them.

    Returns
    -------
    dict
        ``text`` (what was printed), ``slopes`` (list of :class:`Slope`), ``claims`` (list of
        :class:`~fedopt.sweep.claims.Verdict`, the experiments' claims checked), ``figures`` (paths),
        ``tables`` (paths of the CSV files), ``sweeps`` (the ids reported) and ``out``.
    """
    from fedopt.sweep.store import Store

    own = not isinstance(store, Store)
    db = Store(store, readonly=True) if own else store
    stream = sys.stdout if stream is None else stream
    text = io.StringIO()

    def say(line=""):
        print(line, file=stream)
        print(line, file=text)

    out = Path(out) if out is not None else db.path.with_name(db.path.stem + "_report")
    result = {"slopes": [], "claims": [], "figures": [], "tables": [], "sweeps": [], "out": out}
    try:
        chosen = _chosen(db, experiment, sweep)
        every = db.sweeps()
        figure_module = _matplotlib() if plots else None
        if plots and figure_module is None:
            say(PLOT_HINT)
        out.mkdir(parents=True, exist_ok=True)
        for item in chosen:
            result["sweeps"].append(item["id"])
            _report_sweep(db, item, [s for s in every if s["experiment"] == item["experiment"]], out, figure_module,
                          say, result)
        if result["slopes"]:
            say("slopes (log of the final metric against log of the axis, mean over seeds, 95% t interval):")
            for slope in result["slopes"]:
                say(f"    {slope}")
        if result["figures"]:
            say(f"figures: {out}/ ({len(result['figures'])} PNG files)")
        result["text"] = text.getvalue()
        top = "\n".join(f"- {item['experiment']}, {provenance_line(item)}" for item in chosen)
        (out / "report.md").write_text(f"# fedopt report of {db.path}\n\n{top}\n\n```\n{result['text']}```\n",
                                       encoding="utf-8")
    finally:
        if own:
            db.close()
    return result


def _report_sweep(db, item, siblings, out, figure_module, say, result) -> None:
    """The header, the tables, the exclusions and the slopes of one sweep (and its figures)."""
    members = db.members(item["id"])
    meta = item["meta"]
    distinct = len({m["key"] for m in members})
    size = f"{distinct} runs" if distinct == len(members) else \
        f"{len(members)} grid points x seeds, {distinct} distinct runs"
    say(f"== {item['experiment']}: {meta.get('title') or ''} ({size})")
    say(f"   {provenance_line(item)}")
    if meta.get("data"):
        say(f"   data: {meta['data']}")
    others = [s for s in siblings if s["id"] != item["id"]]
    if others:
        say(f"   {len(others)} other sweep{'s' * (len(others) != 1)} of {item['experiment']} in this store "
            f"(report one with `fedopt report {db.path} --sweep ID`):")
        for other in others:
            say(f"      {sweep_line(other)}")
    footer = f"{item['experiment']} {provenance_line(item)}"
    caution = _caution(item.get("overrides") or {})
    grids = {g["name"]: g for g in meta.get("grids", [])}
    folder = out / item["experiment"]
    folder.mkdir(parents=True, exist_ok=True)
    csv_rows = []
    # summary.csv names every axis of every grid (the single-valued ones too) in one header, so a short name
    # is used only where no other axis of the sweep shares it
    names = list(dict.fromkeys(k for m in members for k in m["labels"] if k != "seed"))
    for grid_name, points in _group(members).items():
        grid = grids.get(grid_name, {"name": grid_name, "varied": [], "axes": {}})
        axes = grid.get("varied") or []
        say(f"-- {grid_name}{': ' + grid['title'] if grid.get('title') else ''}")
        metric = grid.get("metric") or "stationarity"
        rows = [(json.loads(p), _stats(runs, metric)) for p, runs in points.items()]
        say(_table(axes, rows, metric))
        excluded = _excluded([r for runs in points.values() for r in runs])
        if excluded:
            say(f"   {excluded}")
        rose = _rose([r for runs in points.values() for r in runs])
        if rose:
            say(f"   {rose}")
        for point, st in rows:
            csv_rows.append({"grid": grid_name, **{_short(k, names): v for k, v in point.items()}, **st})
        slopes, unfitted = _slopes(item["experiment"], grid, rows, caution)
        for slope in slopes:
            result["slopes"].append(slope)
            say(f"   slope: {slope}")
        for line in unfitted:
            say(f"   slope: {line}")
        if figure_module is not None:
            result["figures"] += _plot_grid(figure_module, folder, item["experiment"], grid, points, rows, slopes,
                                            footer)
    failed = [m for m in members if m["status"] == "failed"]
    if failed:
        first = failed[0]["error"].strip().splitlines()[-1] if failed[0]["error"] else "?"
        say(f"   {len(failed)} failed runs; the first: {first}")
    if meta.get("claims"):
        from fedopt.sweep.claims import summary

        verdicts = _verdicts(item, members)
        result["claims"] += verdicts
        say(f"-- the paper's claims ({summary(verdicts)})")
        for verdict in verdicts:
            say(textwrap.indent(str(verdict), "   "))
        path = folder / "claims.csv"
        _write_csv(path, [{"claim": v.claim.name, "source": v.claim.source, "verdict": v.verdict,
                           "expected": v.claim.expected or "", "unexpected_failure": v.unexpected_failure,
                           "settings": " | ".join(v.lines)} for v in verdicts])
        result["tables"].append(path)
    path = folder / "summary.csv"
    _write_csv(path, csv_rows)
    result["tables"].append(path)
    say()


def check_claims(store, sweep: str) -> list:
    """The experiment's claims checked against the sweep ``sweep`` of ``store`` (a :class:`Store` or a path):
    a list of :class:`~fedopt.sweep.claims.Verdict` (empty when the experiment states none)."""
    from fedopt.sweep.store import Store

    own = not isinstance(store, Store)
    db = Store(store, readonly=True) if own else store
    try:
        item = db.sweep(sweep)
        return _verdicts(item, db.members(item["id"])) if item["meta"].get("claims") else []
    finally:
        if own:
            db.close()


def _verdicts(item, members) -> list:
    """The claims of the sweep ``item`` checked on its runs, cautioned when the sweep has overrides."""
    from fedopt.sweep.claims import check

    return check(item["meta"]["claims"], members, _caution(item.get("overrides") or {}, "the paper's setting"))


def _write_csv(path, rows, columns=None):
    if columns is None:
        columns = []
        for row in rows:
            columns += [k for k in row if k not in columns]
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, columns)
        writer.writeheader()
        writer.writerows(rows)


def _slopes(experiment, grid, rows, caution=None):
    """The slopes of a grid, one per setting of its other axes, and a line for each setting left unfitted.

    Only grid points whose seeds all finished ``done`` are fitted, and only those with a logarithm (an
    axis value > 0, and the final metric of every seed > 0 with a finite mean); the others are counted
    and named in the lines.
    """
    axis = grid.get("slope")
    if not axis:
        return [], []
    others = [a for a in grid["varied"] if a != axis]
    metric = grid.get("metric") or "stationarity"
    settings: dict = {}
    for point, st in rows:
        setting = json.dumps({a: point.get(a) for a in others}, sort_keys=True)
        settings.setdefault(setting, []).append((point.get(axis), st))
    slopes, unfitted = [], []

    def unlogged(x, mean, low) -> str:
        name = f"{_short(axis, grid['varied'])}={_fmt(x)}" + ("" if _loggable(x) else " (not a number > 0)")
        if not _loggable(low):
            return name + f" with final {metric} {low:.4g}" + (" in a seed" if low < mean else "")
        return name + ("" if _loggable(mean) else f" with final {metric} {mean:.4g}")

    for setting, entries in settings.items():
        done = [(x, st[f"{metric}_mean"], st[f"{metric}_min"]) for x, st in entries if st["done"] == st["seeds"]]
        logged = [_loggable(x) and _loggable(y) and _loggable(low) for x, y, low in done]
        pairs = [(x, y) for (x, y, _), ok in zip(done, logged, strict=True) if ok]
        not_done = [st for _, st in entries if st["done"] != st["seeds"]]
        reasons = []
        if not_done:
            counts = ", ".join(f"{n} {word}" for word in NOT_DONE if (n := sum(st[word] for st in not_done)))
            reasons.append(f"seeds not done: {counts}" if counts else "a seed without a finite final value")
        # a log-log line has no place for a value <= 0 (a stationarity of exactly 0, in any seed): name those points
        off_scale = [unlogged(*point) for point, ok in zip(done, logged, strict=True) if not ok]
        if off_scale:
            reasons.append(f"no logarithm at {', '.join(off_scale)}")
        left, why = len(not_done) + len(off_scale), "; ".join(reasons)
        if len({x for x, _ in pairs}) < 2:
            if left:
                where = ", ".join(f"{_short(k, grid['varied'])}={_fmt(v)}" for k, v in json.loads(setting).items())
                unfitted.append(f"{experiment}/{grid['name']}{' (' + where + ')' if where else ''}: not fitted, "
                                f"{len(pairs)} point{'s' * (len(pairs) != 1)} to fit (a slope needs 2); "
                                f"{_left_out(left, why)}")
            continue
        b, a, low, high = fit_slope([x for x, _ in pairs], [y for _, y in pairs])
        slopes.append(Slope(experiment, grid["name"], axis, json.loads(setting), b, a, low, high, len(pairs),
                            grid.get("paper_slope"), grid.get("predicted_slope"), metric, left, why, caution))
    return slopes, unfitted


def _loggable(value) -> bool:
    """Whether ``value`` has a real logarithm: a finite number > 0."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


# ------------------------------------------------------------------------------------------- export
def export(store, path, sweep: str | list[str] | None = None) -> Path:
    """Write the runs of ``store`` as data: one row per run per evaluated round (see :meth:`Store.records`).

    ``path`` ending in ``.csv`` gives CSV, ``.parquet`` Parquet (needs pyarrow). ``sweep`` (an id,
    id prefix or experiment name, or a list of them: the ``sweeps`` of a :func:`report`) limits the
    rows to the runs of those sweeps; default every stored run.
    Columns: the run (``sweep`` when ``sweep`` is given, ``experiment``, ``grid``, ``key``, ``status``,
    ``seed``), every configuration field (``algorithm.lr_local``, ...), when ``sweep`` is given the grid
    point (``point.params.alpha``, ... : each axis of the run's grid as written), then the history
    (``round``, ``stationarity``, ...). In Parquet, a column whose values are of several kinds (a grid
    point written ``0.05`` beside ``"alpha / Q"``) is text, as in the CSV.
    """
    from fedopt.sweep.store import Store, head_columns, no_run_columns

    path = check_export(path)
    kind = path.suffix.lower()
    own = not isinstance(store, Store)
    db = Store(store, readonly=True) if own else store
    try:
        refs = [sweep] if sweep is None or isinstance(sweep, str) else sweep
        rows = [row for ref in refs for row in db.records(ref)]
    finally:
        if own:
            db.close()
    head, history = {}, {}
    for row in rows:  # run, configuration and grid-point columns first, then the history from "round" on
        keys = list(row)
        split = keys.index("round") if "round" in keys else len(keys)
        head.update(dict.fromkeys(keys[:split]))
        history.update(dict.fromkeys(keys[split:]))
    columns = head_columns(head) + [c for c in history if c not in head]
    if not rows:  # nothing stored yet: the run columns, so that the file still loads as a table
        columns = no_run_columns(sweep is not None)
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == ".csv":
        _write_csv(path, rows, columns)
    else:
        import pyarrow
        import pyarrow.parquet

        arrays = [_arrow_column(pyarrow, [row.get(c) for row in rows]) for c in columns]
        pyarrow.parquet.write_table(pyarrow.Table.from_arrays(arrays, names=columns), path)
    return path


def _arrow_column(pyarrow, values):
    """``values`` as a pyarrow array, of text (``str`` of each value, as the CSV writes it) when they mix kinds."""
    try:
        return pyarrow.array(values)
    except (pyarrow.ArrowInvalid, pyarrow.ArrowTypeError):
        return pyarrow.array([None if v is None else str(v) for v in values], pyarrow.string())


def check_export(path) -> Path:
    """``path`` if :func:`export` can write it: a ``.csv`` file, or a ``.parquet`` file with pyarrow installed
    (ValueError, ImportError), so that a caller can refuse it before any work."""
    path = Path(path)
    kind = path.suffix.lower()
    if kind not in (".csv", ".parquet"):
        raise ValueError(f"export writes a .csv or a .parquet file, got {str(path)!r}: end the path in one of them")
    if kind == ".parquet":
        try:
            import pyarrow
            import pyarrow.parquet  # noqa: F401
        except ImportError:
            raise ImportError(f"writing {path} needs pyarrow: pip install pyarrow (or write a .csv)") from None
    return path


# ------------------------------------------------------------------------------------------ figures
def _matplotlib():
    """``matplotlib.figure`` with the Agg canvas, or None when matplotlib is missing."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return None
    return Figure


def _footer(fig, text, width, height):
    """``text`` in small type along the bottom edge of ``fig`` (``width`` x ``height`` inches), below the axes."""
    lines = textwrap.wrap(text, width=int(width * 22))  # about 22 characters of 5.5 pt type per inch
    bottom = (0.05 + 0.09 * len(lines)) / height
    fig.get_layout_engine().set(rect=(0, bottom, 1, 1 - bottom))
    fig.text(0.01, 0.02 / height, "\n".join(lines), fontsize=5.5, color="0.35", ha="left", va="bottom")


def _plot_grid(Figure, folder, experiment, grid, points, rows, slopes, footer=""):
    """``GRID_curves.png`` (the grid's metric against rounds), one ``GRID_Y_vs_X.png`` per entry of
    its ``curves``, and ``GRID_slope.png`` for a grid with a slope."""
    metric = grid.get("metric") or "stationarity"
    files = [_plot_curves(Figure, folder / f"{grid['name']}_curves.png", experiment, grid, points, metric, "round",
                          metric in LOG_METRICS, footer)]  # a test accuracy on a log axis would hide its values <= 0
    for curve in grid.get("curves") or []:
        path = folder / f"{grid['name']}_{curve['y']}_vs_{curve['x']}.png"
        files.append(_plot_curves(Figure, path, experiment, grid, points, curve["y"], curve["x"],
                                  curve["y"] in LOG_METRICS, footer))
    if slopes:
        files.append(_plot_slopes(Figure, folder, grid, points, slopes, metric, metric_label(metric, tex=True), footer))
    return files


def _plot_curves(Figure, path, experiment, grid, points, y, x, log, footer):
    """One panel per setting of the axes other than ``lines``: the mean over seeds of column ``y``
    (on a log axis when ``log``) against the mean of column ``x`` at each evaluation, with the
    min-max band of ``y``."""
    varied = grid["varied"]
    lines_axis = grid.get("lines") or ("algorithm.name" if "algorithm.name" in varied else
                                      (varied[0] if varied else None))
    panel_axes = [a for a in varied if a != lines_axis]
    named = [*varied, lines_axis] if lines_axis else varied  # ``lines`` may name a single-valued axis
    panels: dict = {}
    for point_json, runs in points.items():
        point = json.loads(point_json)
        panel = json.dumps({a: point.get(a) for a in panel_axes}, sort_keys=True)
        panels.setdefault(panel, []).append((point, runs))
    k = len(panels)
    cols = min(k, 3)
    nrows = math.ceil(k / cols)
    width, height = 4.2 * cols, 3.3 * nrows + 0.2
    fig = Figure(figsize=(width, height), layout="constrained")
    for i, (panel, entries) in enumerate(panels.items()):
        ax = fig.add_subplot(nrows, cols, i + 1)
        for point, runs in entries:
            curves = [r["history"] for r in runs  # normal_map: only the runs of methods with a pre-prox point
                      if r["status"] == "done" and r["history"] and x in r["history"] and y in r["history"]]
            if not curves:
                continue
            length = min(len(c["round"]) for c in curves)
            xs = np.array([c[x][:length] for c in curves], dtype=float).mean(0)
            values = np.array([c[y][:length] for c in curves], dtype=float)
            legend = (f"{_short(lines_axis, named)} = {_fmt(point.get(lines_axis))}" if lines_axis else
                      "mean over seeds")
            (line,) = ax.plot(xs, values.mean(0), label=legend, lw=1.5)
            if len(curves) > 1:
                ax.fill_between(xs, values.min(0), values.max(0), color=line.get_color(), alpha=0.15, lw=0)
        if log:
            ax.set_yscale("log")
        ax.set_xlabel(AXIS_LABELS.get(x, x))
        ax.set_ylabel(metric_label(y, tex=True))
        setting = json.loads(panel)
        title = ", ".join(f"{_short(a, named)} = {_fmt(v)}" for a, v in setting.items())
        ax.set_title(title or grid.get("title") or "", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    if k > 1:
        fig.suptitle(f"{experiment} / {grid['name']}: {grid.get('title') or ''} (mean over seeds, min-max band)",
                     fontsize=10)
    if footer:
        _footer(fig, footer, width, height)
    fig.savefig(path, dpi=110)
    return path


def _plot_slopes(Figure, folder, grid, points, slopes, metric, ylabel, footer):
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    axis = grid["slope"]
    width, height = 5.2, 4.2
    fig = Figure(figsize=(width, height), layout="constrained")
    ax = fig.add_subplot(1, 1, 1)
    for slope in slopes:
        seeds, left, means = [], [], []  # (x, final) of the seeds of fitted points, of left-out points; means
        for point_json, runs in points.items():
            point = json.loads(point_json)
            if any(point.get(a) != v for a, v in slope.setting.items()):
                continue
            finals = [v for v in (_final(r, metric) for r in runs if r["status"] == "done") if v is not None]
            complete = len(finals) == len(runs) and all(map(_loggable, finals))  # fitted: every seed done, above 0
            (seeds if complete else left).extend((point[axis], v) for v in finals)
            if finals and complete:
                means.append((point[axis], float(np.mean(finals))))
        means.sort()
        setting = ", ".join(f"{_short(a, grid['varied'])}={_fmt(v)}" for a, v in slope.setting.items())
        ci = f" [{slope.low:.2f}, {slope.high:.2f}]" if math.isfinite(slope.low) else ""
        (line,) = ax.plot([m[0] for m in means], [m[1] for m in means], "o", label=f"{setting} mean".strip())
        ax.plot([x for x, _ in seeds], [y for _, y in seeds], ".", color=line.get_color(), alpha=0.3)
        if left:
            ax.plot([x for x, _ in left], [y for _, y in left], "x", color=line.get_color(), alpha=0.5,
                    label="left out (a seed not done or at or below 0)")
        grid_x = np.array([means[0][0], means[-1][0]], float)
        ax.plot(grid_x, np.exp(slope.intercept) * grid_x ** slope.slope, "-", color=line.get_color(),
                label=f"slope {slope.slope:.3f}{ci}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ticks = sorted({json.loads(p)[axis] for p in points if isinstance(json.loads(p).get(axis), (int, float))})
    ax.set_xticks(ticks)
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(_short(axis, grid["varied"]))
    ax.set_ylabel(f"final {ylabel}")
    predicted = f"; predicted {slopes[0].predicted:g}" if slopes[0].predicted is not None else ""
    ax.set_title(f"{grid.get('title') or grid['name']}{predicted}{slopes[0].paper_text()}", fontsize=8, wrap=True)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    if footer:
        _footer(fig, footer, width, height)
    path = folder / f"{grid['name']}_slope.png"
    fig.savefig(path, dpi=110)
    return path


__all__ = ["PLOT_HINT", "Slope", "check_claims", "check_export", "export", "fit_slope", "metric_label",
           "overrides_text", "provenance_line", "report", "sweep_line"]
