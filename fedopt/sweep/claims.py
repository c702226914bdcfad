"""A paper's claims as data, checked against a sweep: each one holds, fails or is inconclusive.

An experiment file states the claims of the figure it reproduces in ``[[claim]]`` tables, each
with the figure or table and the sentence it comes from::

    [[claim]]
    name = "fednmap-lowest"
    source = "Fig. 2"
    quote = "FedNMap consistently achieves lower stationarity than Zhang et al. and FedCanon"
    grid = "fig2"                   # the grid whose runs are compared
    kind = "best"                   # best, order, slope, ratio, difference, within
    axis = "algorithm.name"         # the compared key (a slope claim: the grid's slope axis)
    values = ["fednmap", "zhang", "fedcanon"]
    metric = "stationarity"         # any history column (test_accuracy, seconds, prox_evals, ...)
    at = 300                        # optional: the value at this round (default: the last round), one
                                    # that every run of the grid evaluates (0, k * eval_every, rounds)
    goal = "min"                    # best/order: lower is better ("max": higher is better)
    where = { "dataset.n_clients" = [20, 50] }   # optional: only these grid points (values of the axis)
                                                 # (on the claim's own axis: the values it may compare)
    expected = "fails"              # optional: a claim known not to reproduce here ...
    explanation = "..."             # ... and why (required with expected)

Kinds (``values`` and ``interval`` as the kind needs them):

* ``best``: ``values[0]`` beats each of the others; ``order``: each value beats the next one.
* ``slope``: the least-squares slope of ``log mean_seeds metric`` against ``log axis`` (the
  report's slope, over the grid points whose seeds are all done above 0, on any ``scale``) lies in
  ``interval``; the axis needs 3 numbers > 0 (a slope's interval needs 3 points), and its other
  values are left out.
* ``ratio`` / ``difference``: ``values[0]`` over (minus) ``values[1]`` lies in ``interval``
  (``inf`` and ``-inf`` allowed); a ratio is always compared on the log scale, a difference on
  the linear one; a ratio of positive values is > 0, so its interval needs ``high > 0``.
* ``within``: all ``values`` (default: all of the axis, or those that ``where`` keeps of it) lie
  within ``tolerance`` of each other: a relative tolerance (ratio within ``[1/(1+t), 1+t]``) on
  the log scale, absolute on the linear.

Every claim is checked separately for each setting of the grid's other varied axes (each panel of
the figure) and holds only where it holds in all of them. A comparison of two grid points uses the
seeds done in both: the paired t interval (level 0.95) of the per-seed differences over those
seeds (the methods of a trial start from the same point; a seed done on one side only is left
out, so that a hard seed lost on one side does not bias the other side's mean). ``scale``
(default ``"log"`` for the stationarity and the objective-like measures, else ``"linear"``) says
whether the differences are of logarithms (ratios) or of values. A comparison *holds* when its
whole interval is on the claimed side, *fails* when its whole interval is on the other side, and
is *inconclusive* otherwise (or with fewer than 2 seeds done in both). A claimed-better point
that diverged in a seed that the other point finished fails its comparison (a seed that both
lost, a hard one, is left out of it like any seed not done in both, as is one that the other point
failed or has not run yet, its outcome unknown), and so does an exact tie (a best or order claim
is strict). A claim ``at`` a round before the end also uses the runs
that did not converge (divergence ``stall_factor``): they ran every round, and their values on
the way are the evidence; a run without that round in its history (one stopped early by ``tol``,
say) is left out as not evaluating it. A claim fails when one setting fails, holds when all hold,
and is inconclusive otherwise.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np

from fedopt.run import STALLED
from fedopt.sweep.report import LOG_METRICS, _final, _fmt, _loggable, _short, fit_slope, t_quantile

KINDS = ("best", "order", "slope", "ratio", "difference", "within")
VERDICTS = ("holds", "fails", "inconclusive")
LEVEL = 0.95
UNLOGGED = "at or below 0 (no logarithm)"  # a done run a log-scale or slope claim cannot use


@dataclass
class Claim:
    """One ``[[claim]]`` table, validated by :func:`parse_claim`."""

    name: str
    kind: str
    grid: str
    source: str = ""
    quote: str = ""
    axis: str | None = None
    values: list = field(default_factory=list)
    metric: str = "stationarity"
    at: int | None = None
    goal: str = "min"
    interval: tuple | None = None
    tolerance: float | None = None
    where: dict = field(default_factory=dict)
    scale: str = "log"
    expected: str | None = None
    explanation: str = ""

    def as_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


@dataclass
class Verdict:
    """The outcome of a claim on a sweep: ``verdict``, one line per setting, and whether it was expected."""

    claim: Claim
    verdict: str
    lines: list
    caution: str | None = None

    @property
    def unexpected_failure(self) -> bool:
        """A failure that the experiment does not document (what makes ``--check`` exit non-zero)."""
        return self.verdict == "fails" and self.claim.expected != "fails"

    def __str__(self) -> str:
        c = self.claim
        where = f"{c.source}: " if c.source else ""
        head = f"[{self.verdict}] {c.name} ({where}\"{c.quote}\")" if c.quote else f"[{self.verdict}] {c.name}"
        if c.expected:
            agrees = "as documented" if c.expected == self.verdict else f"documented as {c.expected}"
            head += f"; {agrees}: {c.explanation}"
        lines = [head, f"    {describe(c)}"] + [f"    {line}" for line in self.lines]
        if self.caution:
            lines.append(f"    caution: {self.caution}")
        return "\n".join(lines)


# ------------------------------------------------------------------------------------------ parsing
_KEYS = {"name", "kind", "grid", "source", "quote", "axis", "values", "metric", "at", "goal", "interval",
         "tolerance", "where", "scale", "expected", "explanation"}


def parse_claim(table: dict, index: int, grids: dict, columns: list, error) -> Claim:
    """A :class:`Claim` from the ``index``-th ``[[claim]]`` table; ``error(message, path)`` makes the exception.

    ``grids`` maps the experiment's grid names to their :class:`~fedopt.sweep.config.Grid`;
    ``columns`` are the history columns its methods record.
    """
    from fedopt.sweep.config import _is_number  # config imports this module

    def _number(value) -> bool:
        return _is_number(value) and not math.isnan(value)

    def fail(message, key):
        return error(message, f"claim[{index}].{key}")

    for key in table:
        if key not in _KEYS:
            raise fail(f"unknown key; a [[claim]] takes {', '.join(sorted(_KEYS))}", key)
    for key in ("name", "kind", "grid"):
        if not isinstance(table.get(key), str):
            raise fail(f"required, a string (got {table.get(key)!r})", key)
    kind = table["kind"]
    if kind not in KINDS:
        raise fail(f"unknown kind {kind!r}; choose one of {', '.join(KINDS)}", "kind")
    grid = grids.get(table["grid"])
    if grid is None:
        raise fail(f"names no grid of this experiment; its grids are {', '.join(grids)}", "grid")
    claim = Claim(name=table["name"], kind=kind, grid=grid.name, source=str(table.get("source", "")),
                  quote=str(table.get("quote", "")), metric=table.get("metric", "stationarity"))
    if claim.metric not in columns:
        raise fail(f"names no history column of these methods; choose one of {', '.join(columns)}", "metric")
    claim.axis = table.get("axis", grid.slope if kind == "slope" else None)
    if claim.axis not in grid.axes:
        raise fail(f"names no axis of grid {grid.name!r}; its axes are {', '.join(grid.axes) or 'none'}", "axis")
    where = table.get("where", {})
    if not isinstance(where, dict):
        raise fail('a table of grid axes, e.g. where = { "dataset.n_clients" = [20, 50] }', "where")
    for key, value in where.items():
        if key not in grid.axes:
            raise fail(f"{key!r} is not an axis of grid {grid.name!r}", "where")
        claim.where[key] = value if isinstance(value, list) else [value]
        for v in claim.where[key]:  # a value the grid lacks would select no runs, forever inconclusive
            if v not in grid.axes[key]:
                raise fail(f"claim {claim.name!r}: {v!r} is not a value of {key} on grid {grid.name!r} "
                           f"({grid.axes[key]})", "where")
    axis_values = grid.axes[claim.axis]
    kept = claim.where.get(claim.axis, axis_values)  # where on the claim's own axis narrows its values
    claim.values = list(table.get("values", kept if kind == "within" else []))
    for value in claim.values:
        if value not in axis_values:
            raise fail(f"{value!r} is not a value of {claim.axis} on grid {grid.name!r} ({axis_values})", "values")
        if value not in kept:  # its runs are not selected: forever inconclusive
            raise fail(f"claim {claim.name!r}: {value!r} is left out by where ({claim.axis} = {kept}): add it to "
                       "where or drop it from values", "values")
    needed = {"best": 2, "order": 2, "ratio": 2, "difference": 2, "within": 2, "slope": 0}[kind]
    if len(claim.values) < needed or (kind in ("ratio", "difference") and len(claim.values) != 2):
        narrowed = f"; where keeps only {kept} of them: widen it" \
            if claim.axis in claim.where and "values" not in table else ""
        raise fail(f"a {kind} claim compares {'exactly' if kind in ('ratio', 'difference') else 'at least'} "
                   f"{needed} values of {claim.axis}{narrowed}", "values")
    at = table.get("at")
    if at is not None and (not isinstance(at, int) or isinstance(at, bool) or at < 0):
        raise fail(f"a round number >= 0, got {at!r}", "at")
    claim.at = at
    claim.goal = table.get("goal", "max" if claim.metric == "test_accuracy" else "min")
    if claim.goal not in ("min", "max"):
        raise fail(f"'min' (lower is better) or 'max' (higher is better), got {claim.goal!r}", "goal")
    fixed = {"ratio": "log", "difference": "linear"}.get(kind)
    claim.scale = table.get("scale", fixed or ("log" if claim.metric in LOG_METRICS else "linear"))
    if claim.scale not in ("log", "linear"):
        raise fail(f"'log' or 'linear', got {claim.scale!r}", "scale")
    if kind == "ratio" and claim.scale != "log":
        raise fail("a ratio claim compares logarithms: leave scale out (or use kind = \"difference\")", "scale")
    if kind == "difference" and claim.scale != "linear":
        raise fail("a difference claim compares values: leave scale out (or use kind = \"ratio\")", "scale")
    if kind in ("slope", "ratio", "difference"):
        interval = table.get("interval")
        if not (isinstance(interval, list) and len(interval) == 2 and all(_number(v) for v in interval)
                and interval[0] < interval[1]):
            raise fail(f"a {kind} claim needs interval = [low, high] with low < high, got {interval!r}", "interval")
        claim.interval = (float(interval[0]), float(interval[1]))
        if kind == "ratio" and claim.interval[1] <= 0:  # such a claim could only fail
            raise fail(f"a ratio of positive values is > 0: give interval = [low, high] with high > 0 (low <= 0 "
                       f"sets no lower bound), got {interval!r}", "interval")
    elif "interval" in table:
        raise fail(f"a {kind} claim takes no interval", "interval")
    if kind == "within":
        tolerance = table.get("tolerance")
        if not (_number(tolerance) and tolerance > 0):
            raise fail(f"a within claim needs tolerance > 0, got {tolerance!r}", "tolerance")
        claim.tolerance = float(tolerance)
    elif "tolerance" in table:
        raise fail(f"a {kind} claim takes no tolerance", "tolerance")
    if kind == "slope" and not (grid.slope or "axis" in table):
        raise fail(f"grid {grid.name!r} has no slope axis: give axis", "axis")
    # fitted against log axis: a slope claim with fewer than 3 such points is never decided
    if kind == "slope" and len({x for x in kept if _loggable(x)}) < 3:
        raise fail(f"claim {claim.name!r}: a slope claim needs 3 values of {claim.axis} that are numbers > 0 "
                   f"(the slope's interval is fitted against their logarithm), got {kept}", "axis")
    claim.expected = table.get("expected")
    if claim.expected is not None:
        if claim.expected not in ("fails", "inconclusive"):
            raise fail(f"'fails' or 'inconclusive' (a claim known not to reproduce here), got {claim.expected!r}",
                       "expected")
        if not str(table.get("explanation", "")).strip():
            raise fail("a claim documented as not reproducing needs explanation = \"why\"", "explanation")
    claim.explanation = str(table.get("explanation", ""))
    return claim


def check_rounds(claims, runs, error) -> None:
    """Refuse a claim ``at`` a round that a run of its grid does not evaluate: ``runs`` are the
    experiment's expanded :class:`~fedopt.sweep.config.RunSpec` (their rounds and ``eval_every`` may
    differ by grid point); ``error(message, path)`` makes the exception."""
    for index, claim in enumerate(claims):
        if claim.at is None:
            continue
        counts = {(r.config["rounds"], r.config["eval_every"]) for r in runs
                  if r.grid == claim.grid and _selected(r.labels, claim.where)}
        if all(_evaluates(rounds, every, claim.at) for rounds, every in counts):
            continue
        common = set.intersection(*(set(range(0, rounds + 1, every)) | {rounds} for rounds, every in counts))
        shown = sorted(common)
        shown = ", ".join(map(str, shown if len(shown) <= 8 else [*shown[:3], "...", *shown[-2:]]))
        how = "rounds = {}, eval_every = {}".format(*next(iter(counts))) if len(counts) == 1 else \
            "their rounds and eval_every differ"
        which = f"grid {claim.grid!r}" + (" that where selects" if claim.where else "")
        raise error(f"claim {claim.name!r}: at = {claim.at} is not a round that every run of {which} evaluates "
                    f"({how}); those are {shown}", f"claim[{index}].at")


def _evaluates(rounds: int, every: int, t: int) -> bool:
    """Whether a run of ``rounds`` rounds evaluated every ``every`` rounds records round ``t`` (as ``fedopt.run``)."""
    return t == rounds or (t < rounds and t % every == 0)


def from_dict(data: dict) -> Claim:
    """A :class:`Claim` from :meth:`Claim.as_dict` (as stored with a sweep)."""
    claim = Claim(**data)
    if claim.interval is not None:
        claim.interval = tuple(claim.interval)
    return claim


def describe(claim: Claim) -> str:
    """What is compared, in words: the metric, the round, the axis and the claimed relation."""
    when = f"at round {claim.at}" if claim.at is not None else "at the last round"
    better = "lowest" if claim.goal == "min" else "highest"
    values = ", ".join(_fmt(v) for v in claim.values)
    if claim.kind == "best":
        relation = f"{_fmt(claim.values[0])} {better} of {values}"
    elif claim.kind == "order":
        relation = (" < " if claim.goal == "min" else " > ").join(_fmt(v) for v in claim.values)
    elif claim.kind == "slope":
        relation = f"slope against log {claim.axis} in {_interval(claim.interval)}"
    elif claim.kind in ("ratio", "difference"):
        relation = f"{(' / ' if claim.kind == 'ratio' else ' - ').join(_fmt(v) for v in claim.values)} in " \
                   f"{_interval(claim.interval)}"
    else:
        tolerance = f"{claim.tolerance * 100:g}%" if claim.scale == "log" else f"{claim.tolerance:g}"
        relation = f"{values} within {tolerance} of each other"
    where = "; only " + ", ".join(f"{k}={v}" for k, v in claim.where.items()) if claim.where else ""
    return f"{claim.metric} {when}, {claim.axis}: {relation}{where}"


def _interval(pair) -> str:
    return f"[{pair[0]:g}, {pair[1]:g}]"


# --------------------------------------------------------------------------------------- checking
def check(claims, members, caution: str | None = None) -> list[Verdict]:
    """The :class:`Verdict` of each claim (a :class:`Claim` or its dict) on the runs ``members`` of a sweep
    (:meth:`Store.members`); ``caution`` is attached to every verdict (an overridden grid)."""
    out = []
    for claim in claims:
        claim = claim if isinstance(claim, Claim) else from_dict(claim)
        runs = [m for m in members if m["grid"] == claim.grid]
        selected = [m for m in runs if _selected(m["labels"], claim.where)]
        verdict, lines = _check(claim, selected) if selected or not runs else \
            ("inconclusive", ["no runs of this grid in the sweep have the claim's where values"])
        out.append(Verdict(claim, verdict, lines, caution))
    return out


def _selected(labels: dict, where: dict) -> bool:
    return all(labels.get(key) in values for key, values in where.items())


def _check(claim: Claim, runs) -> tuple[str, list]:
    if not runs:
        return "inconclusive", ["no runs of this grid in the sweep"]
    seen: dict = {}
    for m in runs:
        for key, value in m["labels"].items():
            seen.setdefault(key, set()).add(_key(value))
    others = sorted(k for k, values in seen.items() if len(values) > 1 and k not in ("seed", claim.axis))
    settings: dict = {}
    for m in runs:
        setting = json.dumps({k: m["labels"].get(k) for k in others}, sort_keys=True)
        settings.setdefault(setting, {}).setdefault(_key(m["labels"].get(claim.axis)), []).append(m)
    verdicts, lines = [], []
    for setting, by_value in settings.items():
        name = ", ".join(f"{_short(k, [*others, claim.axis])}={_fmt(v)}" for k, v in json.loads(setting).items())
        groups = [(json.loads(v), rs) for v, rs in by_value.items()]
        verdict, text = (_check_slope if claim.kind == "slope" else _check_points)(claim, groups)
        verdicts.append(verdict)
        lines.append(f"{name + ': ' if name else ''}{verdict}; {text}")
    return _combine(verdicts), lines


def _key(value) -> str:
    """An axis value as canonical JSON text, hashable even where the value is a table (a dict)."""
    return json.dumps(value, sort_keys=True)


def _combine(verdicts) -> str:
    """``fails`` when one fails, ``holds`` when all hold, else ``inconclusive``."""
    if "fails" in verdicts:
        return "fails"
    return "holds" if verdicts and all(v == "holds" for v in verdicts) else "inconclusive"


def _value(run, claim: Claim):
    """The run's metric at the claim's round (the last evaluated one by default), or None."""
    if claim.at is None:
        return _final(run, claim.metric)
    history = run.get("history") or {}
    rounds, column = history.get("round") or [], history.get(claim.metric)
    if not column or claim.at not in rounds:
        return None
    value = column[rounds.index(claim.at)]
    return value if value is not None and math.isfinite(value) else None


def _usable(run, claim: Claim) -> bool:
    """A done run; for a claim at an earlier round also a run that ran every round and only failed
    the end-of-run convergence check (``stall_factor``): its values up to the end are what happened."""
    if run["status"] == "done":
        return True
    return claim.at is not None and run["status"] == "diverged" and STALLED in (run.get("error") or "")


def _seeds(claim, runs) -> tuple[dict, set, int, int, int]:
    """``({seed: value}, {diverged seed}, other not done, done at or below 0 on the log scale or in a
    slope, without the claim's round)`` of the runs of one grid point."""
    linear = claim.scale == "linear" and claim.kind != "slope"  # a slope is fitted log-log on any scale
    values, diverged, other, unlogged, unevaluated = {}, set(), 0, 0, 0
    for run in runs:
        usable = _usable(run, claim)
        value = _value(run, claim) if usable else None
        if value is not None and (linear or value > 0):
            values[run["labels"].get("seed")] = value
        elif value is not None:
            unlogged += 1
        elif usable and claim.at is not None and claim.at not in ((run.get("history") or {}).get("round") or []):
            unevaluated += 1  # done, but the round is not in its history (fewer rounds, or stopped by tol)
        elif run["status"] == "diverged":
            diverged.add(run["labels"].get("seed"))
        else:
            other += 1
    return values, diverged, other, unlogged, unevaluated


def interval(a: dict, b: dict, log: bool, level: float = LEVEL):
    """``(estimate, low, high, how)`` of ``mean(a) - mean(b)`` (of logs when ``log``) over seeds.

    Paired over the seeds that ``a`` and ``b`` (``{seed: value}``) share: the runs of a seed start
    from the same point, and a seed missing on one side (diverged, say: a hard one) would bias the
    other side's mean if that side kept it. None with fewer than 2 shared seeds.
    """
    seeds = [s for s in a if s in b]
    if len(seeds) < 2:
        return None
    f = np.log if log else np.asarray
    d = f(np.array([a[s] for s in seeds], float)) - f(np.array([b[s] for s in seeds], float))
    k = len(d)
    se = d.std(ddof=1) / math.sqrt(k)
    half = t_quantile(0.5 + level / 2, k - 1) * se if se > 0 else 0.0
    return float(d.mean()), float(d.mean() - half), float(d.mean() + half), f"paired over {k} seeds"


def _place(low, high, lo, hi) -> str:
    """``holds`` when ``[low, high]`` lies in ``[lo, hi]``, ``fails`` when it misses it, else inconclusive."""
    if lo <= low and high <= hi:
        return "holds"
    if high < lo or low > hi:
        return "fails"
    return "inconclusive"


def _check_points(claim: Claim, groups: list) -> tuple[str, str]:
    """The pairwise comparisons of a best, order, ratio, difference or within claim in one setting
    (``groups``: ``[(axis value, its runs)]``)."""
    runs = {_key(v): [r for x, rs in groups if x == v for r in rs] for v in claim.values}
    data = {k: _seeds(claim, rs) for k, rs in runs.items()}
    finished = {k: {r["labels"].get("seed") for r in rs if _usable(r, claim)} for k, rs in runs.items()}
    absent = [v for v in claim.values if not runs[_key(v)]]
    if absent:
        return "inconclusive", f"no runs of {', '.join(_fmt(v) for v in absent)}"
    if claim.kind == "best":
        pairs = [(claim.values[0], other) for other in claim.values[1:]]
    elif claim.kind == "order":
        pairs = list(zip(claim.values, claim.values[1:], strict=False))
    elif claim.kind == "within":
        pairs = [(a, b) for i, a in enumerate(claim.values) for b in claim.values[i + 1:]]
    else:
        pairs = [tuple(claim.values)]
    log = claim.scale == "log"
    verdicts, parts, hows = [], [], []
    for a, b in pairs:
        (va, diverged_a, *_), (vb, *_) = data[_key(a)], data[_key(b)]
        label = f"{_fmt(a)} {'/' if log else '-'} {_fmt(b)}"
        words = ("diverged", "not done", UNLOGGED, f"with round {claim.at} not evaluated")
        not_done = ", ".join(f"{_fmt(v)}: {n} of {len(runs[_key(v)])} seeds {word}"
                             for v in (a, b) for n, word in zip(_counts(data[_key(v)]), words, strict=True) if n)
        if claim.kind in ("best", "order") and diverged_a & finished[_key(b)]:  # lost a seed that the other finished
            verdicts.append("fails")
            parts.append(f"{label}: {not_done}")
            continue
        shared = [_fmt(v) for v, values in ((a, va), (b, vb)) if _shared_time(claim, values)]
        if shared:
            verdicts.append("inconclusive")
            parts.append(f"{label}: the seeds of {' and '.join(shared)} have equal times: they ran as one batch and "
                         "share its time (`fedopt sweep --no-resume` reruns them, each alone)")
            continue
        ci = interval(va, vb, log)
        if ci is None:
            verdicts.append("inconclusive")
            parts.append(f"{label}: fewer than 2 seeds done in both" + (f" ({not_done})" if not_done else ""))
            continue
        estimate, low, high, how = ci
        verdict = _pair_verdict(claim, low, high)
        verdicts.append(verdict)
        show = (lambda t: f"{math.exp(t):.3g}") if log else (lambda t: f"{t:.3g}")
        own = f" {verdict}" if len(pairs) > 1 else ""  # one comparison: its verdict is the setting's
        parts.append(f"{label} = {show(estimate)} [{show(low)}, {show(high)}]{own}"
                     + (f" ({not_done})" if not_done else ""))
        hows.append(how)
    if hows:
        parts.append(f"{LEVEL:.0%} t intervals, {', '.join(dict.fromkeys(hows))}")
    return _combine(verdicts), "; ".join(parts)


def _counts(seeds) -> tuple:
    """The numbers of seeds not compared, by reason, from :func:`_seeds`."""
    _, diverged, *others = seeds
    return len(diverged), *others


def _shared_time(claim: Claim, values: dict) -> bool:
    """Whether ``values`` are wall times all equal across seeds: runs that ran as one batch, whose time
    its runs share, so that their interval would be a point (a sweep runs them alone:
    :func:`~fedopt.sweep.batching.timed_alone`)."""
    return claim.metric == "seconds" and len(values) > 1 and len(set(values.values())) == 1


def _pair_verdict(claim: Claim, low: float, high: float) -> str:
    """The verdict of one comparison from the interval ``[low, high]`` of ``a - b`` (of logs on the log scale)."""
    if claim.kind in ("best", "order"):  # strictly better: a certain tie ([0, 0]) is not "better"
        lead_low, lead_high = (-high, -low) if claim.goal == "min" else (low, high)
        return "holds" if lead_low > 0 else "fails" if lead_high <= 0 else "inconclusive"
    if claim.kind == "within":
        t = math.log1p(claim.tolerance) if claim.scale == "log" else claim.tolerance
        return _place(low, high, -t, t)
    lo, hi = claim.interval
    if claim.scale == "log":  # a ratio's interval, compared as logarithms
        lo, hi = (math.log(lo) if lo > 0 else -math.inf), (math.log(hi) if hi > 0 else -math.inf)
    return _place(low, high, lo, hi)


def _check_slope(claim: Claim, groups: list) -> tuple[str, str]:
    """A slope claim in one setting: the fitted slope's 95 % interval against the claimed interval."""
    points, not_done, unlogged, unevaluated, off_scale = [], 0, 0, 0, []
    for x, runs in groups:
        values, diverged, other, below, missing = _seeds(claim, runs)
        if not _loggable(x):  # the fit is against log x
            off_scale.append(f"{_short(claim.axis, runs[0]['labels'])}={_fmt(x)}")
        elif diverged or other or not (values or below or missing):
            not_done += 1
        elif missing:
            unevaluated += 1
        elif below:
            unlogged += 1
        else:
            points.append((x, float(np.mean(list(values.values())))))
    reasons = [f"{n} with {word}" for n, word in ((not_done, "a seed not done"), (unlogged, f"a seed {UNLOGGED}"),
                                                  (unevaluated, f"round {claim.at} not evaluated in a seed")) if n]
    if off_scale:
        reasons.append(f"no logarithm at {', '.join(off_scale)} (not a number > 0)")
    left = not_done + unlogged + unevaluated + len(off_scale)
    left_text = f"; {left} point{'s' * (left != 1)} left out: {', '.join(reasons)}" if left else ""
    if len({x for x, _ in points}) < 3:
        return "inconclusive", f"{len(points)} points with every seed done, a slope interval needs 3{left_text}"
    slope, _, low, high = fit_slope([x for x, _ in points], [y for _, y in points])
    verdict = _place(low, high, *claim.interval)
    return verdict, (f"slope {slope:.3f}, {LEVEL:.0%} CI [{low:.3f}, {high:.3f}] over {len(points)} points"
                     f" (claimed {_interval(claim.interval)}){left_text}")


def summary(verdicts) -> str:
    """``3 claims: 1 holds, 1 fails (documented), 1 inconclusive``."""
    counts = {v: sum(x.verdict == v for x in verdicts) for v in VERDICTS}
    documented = sum(x.verdict == "fails" and not x.unexpected_failure for x in verdicts)
    parts = [f"{n} {v}" + (f" ({documented} documented)" if v == "fails" and documented else "")
             for v, n in counts.items() if n]
    return f"{len(verdicts)} claim{'s' * (len(verdicts) != 1)}: {', '.join(parts)}"


__all__ = ["KINDS", "Claim", "Verdict", "check", "describe", "interval", "parse_claim", "summary"]
