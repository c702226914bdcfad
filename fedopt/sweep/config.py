"""Experiments as TOML files: loading, validation with line numbers, and expansion into runs.

An experiment file has three kinds of tables::

    [experiment]                 # what it is; which values come from the paper, which are ours
    name = "fednmap-speedup"
    title = "FedNMap linear speedup (Figs. 3 and 4)"
    from_paper = ["eta_s = 1", "gamma = 4", ...]
    defaults = ["hidden width 32 (the paper gives none)", ...]

    [run]                        # one run; every grid point starts from it
    rounds = 200
    eval_every = 10
    seeds = [0, 1, 2]            # the trials: run seeds (minibatches and the initial model)
    metric_gamma = 4.0           # gamma inside ||F_nat||^2, the same for every method
    backend = "auto"
    divergence = { objective_factor = 1e4 }   # optional: when a run stops as diverged (false: only NaN/inf)

    [run.dataset]                # a loader of fedopt.datasets and its options
    name = "digits"              # digits, mnist, fashion_mnist, a9a, svmlight, sparse_regression,
    partition = "sorted"         # classification, fedprox_synthetic, mnist_like
    n_clients = 20
    seed = 0                     # the partition's seed: the same partition in every trial

    [run.problem]                # a class of fedopt.problems.PROBLEMS and its options
    name = "mlp"
    hidden = 32

    [run.regularizer]            # fedopt.regularizers.make(name, **params)
    name = "elasticnet"
    l1 = 1e-3
    l2 = 2e-2
    # block = "W1"               # optional: on one parameter block only (the MLP's W1, b1, W2, b2)

    [run.algorithm]              # fedopt.algorithms.make(name, **hyperparameters)
    name = "fednmap"
    local_steps = 10
    lr_local = "1/Q"             # an expression, see below
    gamma = 4.0

    [run.algorithm.fedcanon]     # optional: hyperparameters for one method only (override the shared ones),
    lr_server = 1.0              # one that a grid runs

    [paper_data]                 # optional: the paper's data set, used when its files are present
    name = "mnist"               # mnist, fashion_mnist or a9a (fedopt.datasets.catalog)
    "problem.name" = "logistic"  # optional: what changes with it (paths below [run])

    [[grid]]                     # one figure: the product of its axes (a list each), times the seeds
    name = "speedup-n"
    title = "Fig. 3: final stationarity against n"
    "dataset.n_clients" = [10, 20, 30, 50, 100]
    "algorithm.name" = ["fednmap", "fedcanon"]
    lines = "dataset.n_clients"  # optional: the key that tells the curves apart in the plots
    slope = "dataset.n_clients"  # optional: fit log(final stationarity) against log(this key: numbers > 0)
    paper_slope = -1.436         # optional: the paper's value, printed next to ours
    predicted_slope = -1.5       # optional: the slope a theorem predicts, printed next to ours
    metric = "stationarity"      # optional: the history column whose final value is tabulated and fitted
    curves = [{ y = "test_accuracy", x = "seconds" }]  # optional: more figures, y against x (history columns)

Grid keys are paths below ``[run]`` (``"algorithm.name"``, ``"regularizer.lam"``,
``"rounds"``, ``"params.alpha"``). An experiment without ``[[grid]]`` is one configuration times
its seeds. The sweep is the union of all grids; points that resolve to the same run share it.

**Shared and per-method hyperparameters.** A key of ``[run.algorithm]`` applies to every method
of the experiment that has a hyperparameter of that name (``gamma = 4`` reaches FedNMap, not
Zhang, which has none); a key that none of the experiment's methods has is refused. A sub-table
``[run.algorithm.METHOD]`` sets hyperparameters of that method only, and refuses names it lacks;
one for a method that the experiment never runs is refused, and so is a grid axis
``"algorithm.METHOD.key"`` in a grid that does not run METHOD. From the weakest to the strongest:
``[run.algorithm]``, ``[run.algorithm.METHOD]``, a grid axis on the shared key (``"algorithm.local_steps"
= [1, 2, 4]`` varies it for every method, those with a per-method value included), a grid axis
``"algorithm.METHOD.key"``. A grid does not hold both axes for a method it runs: the shared one would
label identical runs differently. ``--set algorithm.key=...`` fixes the key for every method that has it
and drops the axes on it (``--set algorithm.gamma=0.1`` sets FedDR's and FedADMM's gamma in
``depositum_baselines``); ``--set algorithm.METHOD.key=...`` fixes one method's, whatever the order,
and drops a grid's axis on the shared key when it fixes the key for every method of that grid that
has it (it is refused when it fixes only some of them).

**Expressions.** A numeric hyperparameter, regularizer parameter, ``metric_gamma``, ``rounds`` or
``eval_every`` (these two must give whole numbers) may be a
string holding a small arithmetic expression: numbers, ``+ - * / // % **``, parentheses, the
functions ``sqrt log exp min max floor ceil abs``, and the names ``Q`` and ``K`` (the run's
``local_steps``), ``n`` (``dataset.n_clients``), the experiment's ``params`` and the other
algorithm hyperparameters given as plain numbers. ``lr_local = "1/Q"`` is the FedNMap papers'
eta_a = 1/Q; FedCanon's server step alpha is ``lr_server = "alpha / (lr_local * Q)"`` with
``"params.alpha" = [0.01, 0.05]`` on a grid. ``params`` exist only for expressions and labels:
the stored run holds the resulting numbers, so that two grid points giving the same numbers are
one run. A ``params`` name cannot be ``n``, ``Q``, ``K`` or a hyperparameter of the methods (those
names would hide it). Nothing else is evaluated (no attribute access, no other names).

**Run keys.** A run is stored under the hash of its resolved configuration, so that a resumed
sweep finds it. An integer written for a real-valued option (``lr_server = 1``, ``alpha = 1``,
``divergence = { objective_factor = 10000 }``) is stored as a float, the same run as ``1.0``, and a
whole number that an expression gives for an integer option (``clients_per_round = "n // 2"``) as an
integer; an option of :data:`LATER_OPTIONS` set to its default is left out, as if it were not set.

**Problems without a data set.** The variational inequalities of :mod:`fedopt.problems.vi`
(``[run.problem] name = "bilinear_game"``, ``"quadratic_game"``, ...) are synthetic operators:
their options (``n_clients``, ``sigma``, ``heterogeneity``, ``dim``, ...) go in ``[run.problem]``,
an experiment on them has no ``[run.dataset]`` table (one is refused), and the name ``n`` of the
expressions is the problem's ``n_clients``. Their methods record gap measures; a grid's
``metric = "gap"`` (or ``"distance"``, ``"gap_bound"``, ...) tabulates and fits that column.

**Errors** name the file, the line and the key; unknown tables and keys are refused.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import functools
import hashlib
import inspect
import itertools
import json
import math
import re
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path

from fedopt.sweep.claims import check_rounds, parse_claim
from fedopt.sweep.report import _loggable

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib

#: The folder of the built-in experiments.
BUILTIN_DIR = Path(__file__).resolve().parent.parent / "experiments"
RUN_KEYS = {"rounds", "eval_every", "seeds", "metric_gamma", "backend", "tol", "divergence", "eval_clients"}
SECTIONS = ("dataset", "problem", "regularizer", "algorithm", "params")
EXPERIMENT_KEYS = {"name", "title", "description", "paper", "from_paper", "defaults"}
GRID_KEYS = {"name", "title", "lines", "slope", "paper_slope", "predicted_slope", "metric", "curves"}
BACKENDS = ("numpy", "numba", "gpu", "auto")
#: Keys of the run configuration that do not change the result, and so stay out of its hash.
UNHASHED = ("backend",)


class ConfigError(ValueError):
    """A bad experiment file or override; the message names the file, the line and the key."""

    def __init__(self, message: str, key: str | None = None, line: int | None = None, source: str | None = None):
        where = ":".join(str(part) for part in (source, line) if part)
        prefix = f"{where}: " if where else ""
        prefix += f"key {key!r}: " if key else ""
        super().__init__(prefix + message)
        self.key, self.line, self.source = key, line, source


# ------------------------------------------------------------------------------------------ loaders
def _datasets() -> dict:
    from fedopt import datasets as D

    return {"digits": D.load_digits, "mnist": D.load_mnist, "fashion_mnist": D.load_fashion_mnist,
            "a9a": D.load_a9a, "svmlight": D.load_svmlight,
            "sparse_regression": D.make_sparse_regression, "classification": D.make_classification,
            "fedprox_synthetic": D.make_fedprox_synthetic, "mnist_like": D.make_mnist_like}


def dataset_names() -> list[str]:
    """The names accepted by ``[run.dataset] name``."""
    return list(_datasets())


def _signature_defaults(func, skip=()) -> tuple[dict, bool]:
    """``{parameter: default}`` of ``func`` (``inspect.Parameter.empty`` when required) and whether it takes ``**``."""
    params, var_kw = {}, False
    for p in inspect.signature(func).parameters.values():
        if p.kind is p.VAR_KEYWORD:
            var_kw = True
        elif p.kind is not p.VAR_POSITIONAL and p.name not in skip and p.name != "self":
            params[p.name] = p.default
    return params, var_kw


@functools.cache
def _dataset_options(name: str) -> dict:
    from fedopt.datasets import partition

    loader = _datasets()[name]
    options, var_kw = _signature_defaults(loader)
    if var_kw:  # the loader passes the rest to fedopt.datasets.partition
        for option in ("alpha", "shards_per_client", "min_samples"):
            options.setdefault(option, inspect.signature(partition).parameters[option].default)
    return options


@functools.cache
def _problem_options(name: str) -> dict:
    """The options of a problem class, following ``**options`` up to the base classes' ``__init__``."""
    from fedopt.problems import PROBLEMS

    options = {}
    for cls in PROBLEMS[name].__mro__:
        if "__init__" not in cls.__dict__:
            continue
        params, var_kw = _signature_defaults(cls.__init__, skip=("dataset", "backend"))
        for key, default in params.items():
            options.setdefault(key, default)
        if not var_kw:
            break
    return options


def _own_regularizer(problem: dict) -> dict:
    """The regularizer table of a run without one: the problem's own phi (the l1 of
    ``l1_bilinear_game``), else zero, as :func:`fedopt.run` does."""
    from fedopt.problems import PROBLEMS

    own = getattr(PROBLEMS[problem["name"]], "regularizer_table", None)
    return own(problem) if own is not None else {"name": "zero"}


def _without_dataset(problem_name: str) -> bool:
    """Whether the problem is a synthetic operator of :mod:`fedopt.problems.vi` (no data set)."""
    from fedopt.problems import VI_PROBLEMS

    return problem_name in VI_PROBLEMS


@functools.cache
def _regularizer_options(name: str) -> dict:
    from fedopt.regularizers import REGULARIZERS, canonical

    cls = REGULARIZERS[canonical(name)]
    options = {"block": None}  # a parameter block of the problem (fedopt.regularizers.on_block); None: all of x
    for f in fields(cls):
        if f.init:
            options[f.name] = (f.default if f.default is not MISSING else
                               f.default_factory() if f.default_factory is not MISSING else inspect.Parameter.empty)
    return options


@functools.cache
def _declared(section: str, name: str) -> tuple:
    """``(option, default, annotation)`` of each option of a data set, problem, regularizer or method
    (``section``, ``name``); the first declaration counts, as in the options' defaults."""
    from fedopt import algorithms
    from fedopt.datasets import partition
    from fedopt.problems import PROBLEMS
    from fedopt.regularizers import REGULARIZERS, canonical

    if section in ("algorithm", "regularizer"):
        cls = algorithms.ALGORITHMS[name] if section == "algorithm" else REGULARIZERS[canonical(name)]
        declared = [(f.name, f.default, f.type) for f in fields(cls)]
    else:
        funcs = ([_datasets()[name], partition] if section == "dataset" else
                 [cls.__init__ for cls in PROBLEMS[name].__mro__ if "__init__" in cls.__dict__])
        declared = [(p.name, p.default, p.annotation) for f in funcs for p in inspect.signature(f).parameters.values()]
    first = {}
    for option, default, annotation in declared:
        first.setdefault(option, (option, default, annotation))
    return tuple(first.values())


@functools.cache
def _float_options(section: str, name: str) -> frozenset:
    """The options of a data set, problem, regularizer or method (``section``, ``name``) that hold real
    numbers: a float default, or none and the annotation ``float`` or ``float | None``. An integer
    written for one is stored as a float, so that ``lr_server = 1`` and ``1.0`` are one run."""
    return frozenset(option for option, default, annotation in _declared(section, name)
                     if isinstance(default, float) or (default is None and _annotated_float(annotation)))


@functools.cache
def _int_options(section: str, name: str) -> frozenset:
    """The options without a default that hold whole numbers: the annotation ``int | None``
    (``min_samples``, ``init_batch_size``). A whole float written for one (``"n // 2"`` gives 2.0)
    is stored as an integer, so that it is one run with ``2``."""
    return frozenset(option for option, default, annotation in _declared(section, name)
                     if default is None and _annotated(annotation) == {"int"})


def _annotated(annotation) -> set:
    """The types an annotation (a type or, under ``from __future__ import annotations``, its text) names, less None."""
    text = getattr(annotation, "__name__", str(annotation))
    return set(re.findall(r"\w+", text)) - {"None", "Optional"}


def _annotated_float(annotation) -> bool:
    """Whether an annotation is a float, or None."""
    return _annotated(annotation) == {"float"}


def _as_declared(value, option: str, floats: frozenset, ints: frozenset = frozenset()):
    """``value`` as its option declares it: an integer (not a bool) for a real-valued option becomes a float,
    a whole float for an integer option an integer."""
    if option in floats and _is_int(value):
        return float(value)
    if option in ints and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# --------------------------------------------------------------------------------------- expressions
_FUNCTIONS = {"sqrt": math.sqrt, "log": math.log, "exp": math.exp, "min": min, "max": max, "floor": math.floor,
              "ceil": math.ceil, "abs": abs}
_BINOPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
           ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
           ast.Pow: lambda a, b: a ** b}


def evaluate_expression(text: str, names: dict) -> float:
    """The value of the arithmetic expression ``text`` with the variables ``names`` (see the module docstring).

    >>> evaluate_expression("1/sqrt(Q)", {"Q": 4})
    0.5
    """
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as err:
        raise ValueError(f"{text!r} is not an arithmetic expression ({err.msg})") from None

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in names:
                known = ", ".join(sorted(names)) or "none"
                raise ValueError(f"{text!r} uses the unknown name {node.id!r}; the names here are {known}")
            return names[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > 64:
                raise ValueError(f"{text!r}: exponents above 64 are refused")
            value = _BINOPS[type(node.op)](left, right)
            if isinstance(value, complex):  # a negative number to a fractional power
                raise ValueError(f"{text!r}: {ast.unparse(node)} is not a real number")
            return value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            value = ev(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS
                and not node.keywords):
            args = [ev(arg) for arg in node.args]
            try:
                return _FUNCTIONS[node.func.id](*args)
            except (ArithmeticError, TypeError, ValueError) as err:  # log(-1), exp(1000), min(), sqrt(1, 2)
                raise ValueError(f"{text!r}: {ast.unparse(node)} cannot be evaluated ({err})") from None
        raise ValueError(f"{text!r} holds {ast.unparse(node)!r}, which is not allowed: use numbers, + - * / // % **, "
                         f"parentheses, the functions {', '.join(_FUNCTIONS)} and the names "
                         f"{', '.join(sorted(names)) or '(none)'}")

    try:
        return float(ev(tree))
    except ZeroDivisionError:
        raise ValueError(f"{text!r} divides by zero with {names}") from None
    except OverflowError:  # 1e300 ** 2, or an integer too large for a float
        raise ValueError(f"{text!r} is too large for a floating-point number with {names}") from None


# ------------------------------------------------------------------------------------- line numbers
_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"""^\s*((?:"[^"]*"|'[^']*'|[A-Za-z0-9_-]+)(?:\s*\.\s*(?:"[^"]*"|'[^']*'|[A-Za-z0-9_-]+))*)\s*=""")
_PART = re.compile(r"""\s*("[^"]*"|'[^']*'|[A-Za-z0-9_-]+)\s*(?:\.|$)""")


def _split_key(text: str) -> list[str]:
    return [part.strip("\"'") for part in _PART.findall(text)]


def key_lines(text: str) -> dict[str, int]:
    """``{path: line}`` for every table header and key of the TOML ``text`` (1-based lines).

    Paths join the parts with dots (a quoted key such as ``"algorithm.name"`` stays one part);
    the ``i``-th ``[[grid]]`` table is ``grid[i]``. Lines inside multi-line arrays and strings
    are skipped. This is only for error messages: ``tomllib`` parses the file.
    """
    lines: dict[str, int] = {}
    table: list[str] = []
    counts: dict[str, int] = {}
    depth, in_string = 0, None
    for number, line in enumerate(text.splitlines(), start=1):
        if in_string:
            if in_string in line:
                in_string = None
            continue
        if depth == 0:
            header = _HEADER.match(line)
            if header:
                parts = _split_key(header.group(2))
                if header.group(1) == "[[":
                    name = ".".join(parts)
                    index = counts.get(name, 0)
                    counts[name] = index + 1
                    parts = [*parts[:-1], f"{parts[-1]}[{index}]"]
                table = parts
                lines.setdefault(".".join(table), number)
                continue
            key = _KEY.match(line)
            if key:
                path = ".".join(table + _split_key(key.group(1)))
                lines.setdefault(path, number)
                rest = line[key.end():]
                for quote in ('"""', "'''"):
                    if rest.count(quote) == 1:
                        in_string = quote
                depth += _bracket_balance(rest)
                continue
        else:
            depth += _bracket_balance(line)
    return lines


def _bracket_balance(text: str) -> int:
    text = re.sub(r'"(?:\\.|[^"\\])*"|\'[^\']*\'', "", text.split("#")[0] if '"' not in text else text)
    text = text.split("#")[0]
    return text.count("[") + text.count("{") - text.count("]") - text.count("}")


# ------------------------------------------------------------------------------------------ classes
@dataclass
class Grid:
    """One ``[[grid]]`` table: a product of axes (paths below ``[run]``, each with a list of values)."""

    name: str
    axes: dict
    title: str = ""
    lines: str | None = None
    slope: str | None = None
    paper_slope: float | None = None
    predicted_slope: float | None = None
    metric: str = "stationarity"
    #: more figures than ``metric`` against rounds: ``{"y": column, "x": column}`` each (the papers'
    #: accuracy against time or against prox evaluations)
    curves: list = field(default_factory=list)
    index: int = 0

    def points(self):
        """Every combination of the axes' values, as ``{path: value}``."""
        keys = list(self.axes)
        for values in itertools.product(*(self.axes[k] for k in keys)):
            yield dict(zip(keys, values, strict=True))

    @property
    def varied(self) -> list[str]:
        """The axes with more than one value."""
        return [k for k, v in self.axes.items() if len(v) > 1]


@dataclass(frozen=True)
class RunSpec:
    """One run of a sweep: the resolved ``config`` (what :func:`execute_run` takes), its ``key`` and labels."""

    key: str
    config: dict
    grid: str
    labels: dict  # the grid point as written (expressions unevaluated) plus the seed


@dataclass
class Experiment:
    """A parsed experiment: the base ``run`` table, its ``seeds`` and its ``grids``."""

    name: str
    run: dict
    seeds: list
    grids: list
    title: str = ""
    description: str = ""
    paper: str = ""
    from_paper: list = field(default_factory=list)
    defaults: list = field(default_factory=list)
    source: str = "<string>"
    text: str = ""
    lines: dict = field(default_factory=dict)
    #: What was changed after the file was read (``{path: value}``, ``"quick"`` for :meth:`shortened`).
    overrides: dict = field(default_factory=dict)
    #: Where each override came from (``{path: "--set path"}``), for error messages.
    origins: dict = field(default_factory=dict)
    #: The paper's claims, checked against a sweep by :mod:`fedopt.sweep.claims`.
    claims: list = field(default_factory=list)
    #: The ``[paper_data]`` table: the paper's data set and what changes with it (None: no such table).
    paper_data: dict | None = None
    #: Which data the runs use, in words (printed by ``fedopt sweep``, kept with the sweep).
    data: str = ""

    # ------------------------------------------------------------------ errors with lines
    def error(self, message: str, path: str | None = None) -> ConfigError:
        """A :class:`ConfigError` for the key at ``path`` (a ``run.*`` or ``grid[i].*`` path, or None).

        A key set on the command line is named as such (``--set algorithm.lr_local``), not by a line
        of the file it replaced.
        """
        if path is not None and path.startswith("--"):
            return ConfigError(f"{path}: {message}")
        if path is not None and path.startswith("run."):
            key = path[4:]
            owners = [k for k in self.origins if key == k or key.startswith(k + ".") or k.startswith(key + ".")]
            if owners:
                return ConfigError(f"{', '.join(self.origins[k] for k in owners)}: {message}")
        line = None
        if path is not None:
            probe = path
            while probe and line is None:
                line = self.lines.get(probe)
                probe = probe.rpartition(".")[0]
        shown = path
        if path and path.startswith("grid[") and "." in path:
            shown = path.split(".", 1)[1]
        return ConfigError(message, shown, line, self.source)

    def _where(self, key: str, grid: Grid | None) -> str:
        """The path of ``key`` (below ``run``) where it was set: on the grid when it is an axis there."""
        if grid is not None and key in grid.axes:
            return f"grid[{grid.index}].{key}"
        return f"run.{key}"

    # ------------------------------------------------------------------ expansion
    def algorithms(self) -> set[str]:
        """The methods of the experiment, in their registered spelling (unknown names as written)."""
        from fedopt import algorithms

        names = [(self.run.get("algorithm", {}).get("name"), "run.algorithm.name")]
        for grid in self.grids:
            names += [(n, f"grid[{grid.index}].algorithm.name") for n in grid.axes.get("algorithm.name", [])]
        for name, path in names:
            if name is not None and not isinstance(name, str):  # a list would not even be hashable
                raise self.error(_unknown_name("algorithm", name, algorithms.available()), path)
        return {_registered(n) or n for n, _ in names if n is not None}

    def expand(self) -> list[RunSpec]:
        """Every run of the experiment, in grid order then seed order (duplicates kept, same key).

        A grid point is resolved once and its seeds share the result, so that a grid of 250 000
        runs expands in seconds.
        """
        self._check_params(self._check_shared_hyperparameters())
        specs = []
        for grid in self.grids:
            run = _copy_tables(self.run)
            for key in grid.axes:  # the grid's value wins over the file's per-method ones
                if _shared_key(key):
                    self._drop_per_method(run, key[len("algorithm."):])
            for point in grid.points():
                base = _copy_tables(run)
                for key, value in point.items():
                    _assign(base, key, value)
                resolved = self._resolve(base, grid)
                for seed in self.seeds:
                    config = {**resolved, "seed": seed}
                    specs.append(RunSpec(config_key(config), config, grid.name, {**point, "seed": seed}))
        return specs

    def _check_shared_hyperparameters(self):
        from fedopt import algorithms

        names = set()
        for name in sorted(self.algorithms()):
            try:
                names.add(algorithms.canonical(name))
            except ValueError as err:
                path = "run.algorithm.name"
                for grid in self.grids:
                    if name in grid.axes.get("algorithm.name", []):
                        path = f"grid[{grid.index}].algorithm.name"
                raise self.error(str(err), path) from None
        shared = {k for k, v in self.run.get("algorithm", {}).items() if k != "name" and not isinstance(v, dict)}
        for grid in self.grids:
            shared |= {k.split(".", 1)[1] for k in grid.axes if _shared_key(k)}
        known = set()
        for name in names:
            known |= set(algorithms.hyperparameters(name))
        for key in sorted(shared - {"name"} - known):
            raise self.error(f"none of the methods {', '.join(sorted(names))} has a hyperparameter {key!r}; "
                             f"theirs are {', '.join(sorted(known))}", self._grid_or_run(f"algorithm.{key}"))
        return known

    def _check_params(self, hyperparameters: set):
        """Refuse ``params`` that an expression could not see: the names of the run (``n``, ``Q``, ``K``) and
        the methods' hyperparameters come first."""
        names = set(self.run.get("params", {}))
        for grid in self.grids:
            names |= {k.split(".", 1)[1] for k in grid.axes if k.startswith("params.")}
        builtin = {"n": "the number of clients (dataset.n_clients)", "Q": "algorithm.local_steps",
                   "K": "algorithm.local_steps"}
        for name in sorted(names & (set(builtin) | hyperparameters)):
            raise self.error(f"a params value cannot be called {name!r}: in expressions {name} is "
                             f"{builtin.get(name, f'the hyperparameter algorithm.{name}')}, which would hide it; "
                             "choose another name", _param_path(self, name))

    def _methods(self, grid: Grid) -> set[str]:
        """The methods that ``grid`` runs, in their registered spelling (:meth:`expand` reports unknown names)."""
        names = grid.axes.get("algorithm.name") or [self.run.get("algorithm", {}).get("name")]
        return {method for method in map(_registered, names) if method}

    def _check_per_method(self, assigned=False):
        """Refuse hyperparameters set for a method that the experiment never runs, or a grid axis on one that
        its grid never runs: they would change nothing, and the axis would label identical runs differently.

        ``assigned``: after :meth:`override`, check the per-method keys it set, and drop the per-method axes
        that ``--set algorithm.name`` left unused (as it drops the axis on the name).
        """
        from fedopt import algorithms

        everywhere = set()
        for grid in self.grids:
            runs = self._methods(grid)
            everywhere |= runs
            for key in list(grid.axes):
                section, method, name = [*key.split("."), "", ""][:3]
                if not (section == "algorithm" and name and method in algorithms.available()):
                    continue
                if method in runs:
                    if f"algorithm.{name}" in grid.axes:  # this axis wins: for method, the shared one varies nothing
                        raise self.error(f"varies {name} of {method}, which overrides this grid's axis "
                                         f"\"algorithm.{name}\" for {method}: its points would label identical runs "
                                         f"differently; remove one of the two axes, or put them in separate grids",
                                         f"grid[{grid.index}].{key}")
                    continue
                if assigned:
                    del grid.axes[key]
                    continue
                raise self.error(f"varies a hyperparameter of {method}, which this grid never runs (it runs "
                                 f"{', '.join(sorted(runs))}): vary \"algorithm.{name}\" (every method that has it) "
                                 f"or \"algorithm.METHOD.{name}\" for one of those, or add {method} to the grid's "
                                 "\"algorithm.name\" axis", f"grid[{grid.index}].{key}")
        for method, table in self.run.get("algorithm", {}).items():
            if (isinstance(table, dict) and method in algorithms.available() and method not in everywhere
                    and (not assigned or self._overridden(f"algorithm.{method}", below=True))):
                raise self.error(f"[run.algorithm.{method}] sets hyperparameters of {method}, which this experiment "
                                 f"never runs (it runs {', '.join(sorted(everywhere))}): remove it, or run {method} "
                                 "(\"algorithm.name\" = [...] in a [[grid]])", f"run.algorithm.{method}")

    def _overridden(self, path: str, below: bool = False) -> bool:
        """Whether ``--set`` gave ``path`` (or a table holding it; ``below``: or a key inside it)."""
        return any(path == k or path.startswith(k + ".") or (below and k.startswith(path + "."))
                   for k in self.overrides)

    def _drop_per_method(self, run: dict, key: str):
        """Remove ``key`` from the ``[run.algorithm.METHOD]`` tables of ``run``, except where ``--set`` put it:
        a grid axis or ``--set`` on a shared hyperparameter wins over the file's per-method values."""
        algorithm = run.get("algorithm", {})
        for method, table in list(algorithm.items()):
            if isinstance(table, dict) and key in table and not self._overridden(f"algorithm.{method}.{key}"):
                algorithm[method] = {k: v for k, v in table.items() if k != key}

    def _grid_or_run(self, key):
        for grid in self.grids:
            if key in grid.axes:
                return f"grid[{grid.index}].{key}"
        return f"run.{key}"

    def _resolve(self, base: dict, grid: Grid) -> dict:
        """The run configuration of one grid point, without its seed."""
        where = lambda key: self._where(key, grid)  # noqa: E731
        params = base.get("params", {})
        for name, value in params.items():
            if not _is_number(value):
                raise self.error(f"params are numbers (they feed the expressions), got {value!r}",
                                 where(f"params.{name}"))
        problem = self._section(base, "problem", _problem_options, _problem_names, where)
        if _without_dataset(problem["name"]):
            if base.get("dataset"):
                raise self.error(f"problem {problem['name']!r} is a synthetic operator without a data set: remove "
                                 "[run.dataset] and set n_clients in [run.problem]", where("dataset"))
            dataset = None
        else:
            dataset = self._section(base, "dataset", _dataset_options, dataset_names, where)
        clients = (dataset or problem).get("n_clients")
        reg_table = dict(base.get("regularizer") or _own_regularizer(problem))
        reg_table.setdefault("name", "zero")
        base = {**base, "regularizer": reg_table}
        algorithm = self._algorithm(base, params, clients, where)
        names = {**params, "n": clients}
        names.update({k: v for k, v in algorithm.items() if _is_number(v)})
        if "local_steps" in names:
            names["Q"] = names["K"] = names["local_steps"]
        regularizer = self._section(base, "regularizer", _regularizer_options, _regularizer_names, where, names)
        config = {"dataset": dataset, "problem": problem, "regularizer": regularizer, "algorithm": algorithm}
        run = {k: v for k, v in base.items() if k not in SECTIONS}
        rounds = self._count(run.get("rounds", 100), names, where("rounds"))
        if not _is_int(rounds) or rounds < 0:
            raise self.error(f"rounds must be an integer >= 0, got {rounds!r}", where("rounds"))
        eval_every = self._count(run.get("eval_every", 1), names, where("eval_every"))
        if not _is_int(eval_every) or eval_every < 1:
            raise self.error(f"eval_every must be an integer >= 1, got {eval_every!r}", where("eval_every"))
        metric_gamma = run.get("metric_gamma")
        if isinstance(metric_gamma, str):
            metric_gamma = self._expression(metric_gamma, names, where("metric_gamma"))
        if metric_gamma is not None and not (_is_number(metric_gamma) and metric_gamma > 0):
            raise self.error(f"metric_gamma must be a number > 0, got {metric_gamma!r}", where("metric_gamma"))
        tol = run.get("tol")
        if tol is not None and not (_is_number(tol) and tol >= 0):
            raise self.error(f"tol must be a number >= 0, got {tol!r}", where("tol"))
        backend = run.get("backend", "auto")
        if backend not in BACKENDS:
            raise self.error(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}", where("backend"))
        config.update(rounds=int(rounds), eval_every=int(eval_every),
                      metric_gamma=None if metric_gamma is None else float(metric_gamma),
                      tol=None if tol is None else float(tol), backend=backend)
        if run.get("eval_clients") is not None:  # recorded only when set: stored keys stay as they were
            from fedopt.algorithms.base import clients_count

            try:
                config["eval_clients"] = clients_count(run["eval_clients"], "eval_clients")
            except ValueError as err:
                raise self.error(str(err), where("eval_clients")) from None
        if run.get("divergence") is not None:
            rule = self._divergence(run["divergence"], grid)
            if rule is not None:  # the default rule stays out of the configuration (and its key)
                config["divergence"] = rule
        return config

    def _count(self, value, names, path):
        """``rounds`` or ``eval_every``: a number, or an expression that gives a whole number
        (``"500 / comm_period"``: the same iterations for every communication period)."""
        if not isinstance(value, str):
            return value
        result = self._expression(value, names, path)
        return int(result) if float(result).is_integer() else result

    def _divergence(self, value, grid: Grid):
        """A non-default divergence rule in its canonical form (False: off), or None for the default rule."""
        from fedopt.run import Divergence

        try:
            rule = Divergence.parse(value)
        except (TypeError, ValueError) as err:
            # blame the grid axis that set the rule or the field the message names, else [run]'s table
            fields_named = {f"divergence.{name}" for name in re.findall(r"\w+", str(err))}
            axes = [k for k in grid.axes if k == "divergence" or k in fields_named]
            raise self.error(str(err), f"grid[{grid.index}].{axes[0]}" if axes else "run.divergence") from None
        if rule is None:
            return False
        floats = frozenset(f.name for f in fields(Divergence) if _annotated_float(f.type))
        return None if rule == Divergence() else {k: _as_declared(v, k, floats) for k, v in vars(rule).items()}

    def _section(self, base, section, options_of, names_of, where, expression_names=None):
        table = dict(base.get(section, {}))
        name = table.pop("name", None)
        if name is None:
            raise self.error(f"[run.{section}] needs a name; choose one of {', '.join(names_of())}", where(section))
        if section == "regularizer":
            from fedopt.regularizers import canonical

            with contextlib.suppress(ValueError):  # an unknown name is reported below
                name = canonical(name)
        if name not in names_of():
            raise self.error(_unknown_name(section, name, names_of()), where(f"{section}.name"))
        options = options_of(name)
        floats, ints = _float_options(section, name), _int_options(section, name)
        resolved = {"name": name}
        for key, value in table.items():
            if key not in options:
                raise self.error(f"{section} {name!r} has no option {key!r}; its options are "
                                 f"{', '.join(sorted(options))}", where(f"{section}.{key}"))
            if isinstance(options[key], bool) and not isinstance(value, bool):  # "False" would read as true
                raise self.error(f"{section} {name!r}: {key} is a flag, got {value!r}: write true or false "
                                 "(TOML's spelling, in lower case)", where(f"{section}.{key}"))
            computed = isinstance(value, str) and expression_names is not None and _is_number(options[key])
            if computed:
                value = self._expression(value, expression_names, where(f"{section}.{key}"))
            if _is_int(options[key]) and isinstance(value, float):  # 5.0 would be another run than 5
                if not (computed and value.is_integer()):
                    fix = f"; write {int(value)}" if value.is_integer() else ""
                    raise self.error(f"{section} {name!r}: {key} must be an integer, got {value!r}{fix}",
                                     where(f"{section}.{key}"))
                value = int(value)
            value = _as_declared(value, key, floats, ints)
            if _later(name, key) and _same(value, options[key]):
                continue  # an option added later, at its default: out of the key, as when it is not set
            resolved[key] = value
        missing = [k for k, v in options.items() if v is inspect.Parameter.empty and k not in resolved]
        if missing:
            raise self.error(f"{section} {name!r} needs {', '.join(missing)}", where(section))
        return dict(sorted({**_stored_defaults(options_of, name), **resolved}.items()))

    def _algorithm(self, base, params, clients, where):
        from fedopt import algorithms
        from fedopt.algorithms.base import _list_hint, clients_count

        table = dict(base.get("algorithm", {}))
        name = table.pop("name", None)
        if name is None:
            raise self.error(f"[run.algorithm] needs a name; choose one of {', '.join(algorithms.available())}",
                             where("algorithm"))
        name = algorithms.canonical(name)  # checked in _check_shared_hyperparameters
        defaults = algorithms.hyperparameters(name)
        per_method = {k: table.pop(k) for k in list(table) if isinstance(table[k], dict)}
        for method, values in per_method.items():
            if method not in algorithms.available():
                raise self.error(f"[run.algorithm.{method}] names no method; the sub-tables of [run.algorithm] are "
                                 f"per-method hyperparameters, for one of {', '.join(algorithms.available())}",
                                 where(f"algorithm.{method}"))
            for key in values:
                if key not in algorithms.hyperparameters(method):
                    raise self.error(f"{method} has no hyperparameter {key!r}; its hyperparameters are "
                                     f"{', '.join(algorithms.hyperparameters(method))}",
                                     where(f"algorithm.{method}.{key}"))
        merged = {**table, **per_method.get(name, {})}
        origin = {k: f"algorithm.{name}.{k}" if k in per_method.get(name, {}) else f"algorithm.{k}" for k in merged}
        names = {**params, "n": clients}
        names.update({k: v for k, v in merged.items() if _is_number(v)})
        steps = merged.get("local_steps", defaults.get("local_steps"))
        if "local_steps" in defaults and not (_is_number(steps) or isinstance(steps, str)):  # before Q and K are used
            raise self.error(f"local_steps of {name} must be an integer >= 1 or an expression, got {steps!r}"
                             f"{_list_hint(steps)}", where(origin.get("local_steps", "algorithm.local_steps")))
        if _is_number(steps):
            names["Q"] = names["K"] = steps
        pending = {k: v for k, v in merged.items() if isinstance(v, str) and k in defaults
                   and (_is_number(defaults[k]) or defaults[k] is None)}
        for _ in range(len(pending) + 1):  # expressions may use each other's values
            for key in list(pending):
                try:
                    names[key] = merged[key] = self._expression(pending[key], names, None)
                    del pending[key]
                    if key == "local_steps":
                        names["Q"] = names["K"] = merged[key]
                except ValueError:
                    continue
        for key, text in pending.items():
            merged[key] = self._expression(text, names, where(origin[key]))  # raises with the reason
        resolved = {"name": name}
        floats, ints = _float_options("algorithm", name), _int_options("algorithm", name)
        for key, default in defaults.items():
            value = _as_declared(merged.get(key, default), key, floats, ints)
            if key == "clients_per_round" and _is_number(value):  # a count (4.0 from "n // 2" is 4) or a fraction
                try:
                    value = clients_count(value, key)
                except ValueError as err:
                    raise self.error(str(err), where(origin.get(key, key))) from None
            if _is_int(default) and _is_number(value):
                if value != int(value):
                    raise self.error(f"{key} of {name} must be an integer, got {value!r}", where(origin.get(key, key)))
                value = int(value)
            if _later(name, key) and _same(value, default):
                continue  # an option added later, at its default: out of the key, as when it is not set
            resolved[key] = value
        return resolved

    def _expression(self, text, names, path):
        try:
            return evaluate_expression(text, {k: v for k, v in names.items() if v is not None})
        except ValueError as err:
            if path is None:
                raise
            raise self.error(str(err), path) from None

    # ------------------------------------------------------------------ variants
    def with_data(self, choice: str = "auto", cache_dir=None) -> Experiment:
        """The experiment on the paper's data (``[paper_data]``) or on the data of ``[run.dataset]``.

        ``choice``: ``"auto"`` takes the paper's data when its files are present (``fedopt data
        ls``), ``"paper"`` always (a run fails with the download instruction when they are
        missing), ``"embedded"`` never. Options of ``[run.dataset]`` that the paper's loader lacks
        are dropped; the other keys of ``[paper_data]`` (paths below ``[run]``) are applied.
        """
        from fedopt.datasets import catalog

        if choice not in ("auto", "paper", "embedded"):
            raise ConfigError(f"--data must be auto, paper or embedded, got {choice!r}")
        exp = copy.deepcopy(self)
        if self.paper_data is None:
            return exp
        name = self.paper_data["name"]
        why_not = None
        if choice == "embedded":
            why_not = "the embedded data as asked (--data embedded)"
        elif choice == "auto" and not catalog.present(name, cache_dir=cache_dir):
            why_not = f"its files are not in {catalog.folder(name, cache_dir)}: `fedopt data ls`"
        if why_not is None:
            accepted = _dataset_options(name)
            dataset = {k: v for k, v in exp.run.get("dataset", {}).items() if k in accepted and k != "name"}
            exp.run["dataset"] = {"name": name, **dataset}
            for key, value in self.paper_data.items():
                if key != "name":
                    _assign(exp.run, key, value)
        exp.data = _data_text(exp, why_not)
        return exp

    def override(self, assignments: dict, origin: str = "--set") -> Experiment:
        """A copy with ``{path: value}`` fixed everywhere (paths below ``[run]``; grid axes on them are dropped).

        A path naming a whole table (``"algorithm"`` with a dict value) replaces that table and drops
        every grid axis inside it: a new method starts from its own defaults. ``origin`` names where
        the values came from in error messages (``--set``, ``--algorithm``, ...). A grid axis on a shared
        hyperparameter is dropped too when per-method paths fix it for every method of the grid that has it.
        """
        exp = copy.deepcopy(self)
        for key, value in assignments.items():
            label = f"{origin} {key}" if origin == "--set" else origin
            if key == "seeds":
                exp.seeds = _check_seeds(value, exp, label)
            elif key in SECTIONS and isinstance(value, dict):
                exp.run[key] = dict(value)
                for grid in exp.grids:
                    grid.axes = {k: v for k, v in grid.axes.items() if not k.startswith(key + ".")}
            else:
                _check_path(key, exp, label)
                shared, name = _shared_key(key), key.removeprefix("algorithm.")
                if shared:  # fixed for every method: the file's per-method values give way
                    exp._drop_per_method(exp.run, name)
                _assign(exp.run, key, value)
                for grid in exp.grids:  # and the axes on it or inside it, for one method too when it is shared
                    grid.axes = {k: v for k, v in grid.axes.items() if k != key and not k.startswith(key + ".")
                                 and not (shared and k.startswith("algorithm.") and k.split(".")[2:] == [name])}
            exp.overrides[key] = value
            exp.origins[key] = label
        exp._check_per_method(assigned=True)
        exp._drop_axes_fixed_per_method()
        return exp

    def _drop_axes_fixed_per_method(self):
        """Drop a grid axis ``"algorithm.key"`` that ``--set algorithm.METHOD.key`` fixed for every method of the
        grid that has ``key`` (as ``--set algorithm.key`` drops it); refuse one that it fixed for some of them only,
        whose points would be labelled by values those methods did not run."""
        from fedopt import algorithms

        tables = self.run.get("algorithm", {})
        for grid in self.grids:
            methods = self._methods(grid)
            for axis in [k for k in grid.axes if _shared_key(k)]:
                name = axis.removeprefix("algorithm.")
                having = {m for m in methods if name in algorithms.hyperparameters(m)}
                fixed = {m for m in having if isinstance(tables.get(m), dict) and name in tables[m]
                         and self._overridden(f"algorithm.{m}.{name}")}  # the values that expand keeps
                if fixed == having and fixed:
                    del grid.axes[axis]
                elif fixed:
                    ones, others = ", ".join(sorted(fixed)), ", ".join(sorted(having - fixed))
                    raise self.error(f"fixes {name} of {ones}, which grid {grid.name!r} varies (\"{axis}\") for "
                                     f"{others} too: the points of {ones} would be labelled by values they did not "
                                     f"run; fix {name} for every method (--set {axis}=...) or for {others} as well "
                                     f"(--set algorithm.METHOD.{name}=...)", f"run.algorithm.{min(fixed)}.{name}")

    def shortened(self, rounds: int = 2, seeds: int = 1, values: int = 2) -> Experiment:
        """A small version for tests and smoke runs: ``rounds`` rounds, the first ``seeds`` seeds and
        ``values`` values per axis. A run that short cannot converge, so a divergence rule's
        ``stall_factor`` is dropped. What :meth:`override` fixed (``--set rounds=20``) stays as set, so that
        the recorded overrides describe the runs."""
        exp = copy.deepcopy(self)
        fixed = self.overrides
        quick = {k: v for k, v in (("rounds", rounds), ("seeds", seeds)) if k not in fixed}
        exp.overrides["quick"] = {**quick, "values per axis": values}
        counts = []  # the counts of the short run, which a grid's own give way to
        if "rounds" in quick:
            divergence = exp.run.get("divergence")
            if isinstance(divergence, dict) and not {"divergence", "divergence.stall_factor"} & set(fixed):
                divergence.pop("stall_factor", None)
            exp.run["rounds"] = rounds
            counts.append("rounds")
            if "eval_every" not in fixed:
                every = exp.run.get("eval_every", 1)
                exp.run["eval_every"] = max(1, min(every if _is_int(every) else 1, rounds))
                counts.append("eval_every")
        if "seeds" in quick:
            exp.seeds = exp.seeds[:seeds]
        for grid in exp.grids:
            grid.axes = {k: v[:values] for k, v in grid.axes.items()}
            if "rounds" in quick:  # the grids' divergence rules lose their stall_factor too
                grid.axes.pop("divergence.stall_factor", None)
                if "divergence" in grid.axes:
                    grid.axes["divergence"] = [{k: v for k, v in rule.items() if k != "stall_factor"}
                                               if isinstance(rule, dict) else rule for rule in grid.axes["divergence"]]
            for key in counts:
                if key in grid.axes:
                    grid.axes[key] = [exp.run[key]]
        return exp


def config_key(config: dict) -> str:
    """The store key of a run: SHA-256 of its configuration as canonical JSON, without :data:`UNHASHED` keys."""
    hashed = {k: v for k, v in config.items() if k not in UNHASHED}
    text = json.dumps(hashed, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


# ------------------------------------------------------------------------------------------- helpers
def _problem_names():
    from fedopt.problems import PROBLEMS

    return list(PROBLEMS)


def _regularizer_names():
    from fedopt.regularizers import available

    return available()


def _unknown_name(section: str, name, choices) -> str:
    """The error for a name of ``section`` that is not one of ``choices``; a list is told how to vary a name."""
    message = f"{section} {name!r} is unknown; choose one of {', '.join(choices)}"
    if isinstance(name, list):
        message += f'; a run has one {section}: to vary it, make it a grid axis, "{section}.name" = [...] in [[grid]]'
    return message


def _registered(name) -> str | None:
    """The registered spelling of the method ``name`` (case and ``_``/``-`` aside), or None for an unknown one."""
    from fedopt import algorithms

    try:
        return algorithms.canonical(name) if isinstance(name, str) else None
    except ValueError:
        return None


def _shared_key(path: str) -> bool:
    """Whether ``path`` is a hyperparameter of ``[run.algorithm]`` shared by the methods (``algorithm.gamma``)."""
    return path.startswith("algorithm.") and path.count(".") == 1 and path != "algorithm.name"


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _same(value, default) -> bool:
    """Whether ``value`` is ``default`` as stored (``True == 1`` and ``1 == 1.0`` in Python, not in a key)."""
    return type(value) is type(default) and value == default


#: Options (of problems and methods) added after stores were written, recorded only when a run
#: sets them to another value than their default: recording their defaults would change the key
#: of every stored run that has them, and a resumed sweep would run those again.
#: An entry is an option's name (of any problem or method) or a (data set or problem, option) pair.
LATER_OPTIONS = frozenset({"loss", "clients_per_round", "sampling",  # MLP's loss; the server methods' cohorts
                           ("fedprox_synthetic", "samples_per_client"), ("fedprox_synthetic", "dtype"),
                           ("fedprox_synthetic", "keep_models"),
                           *((model, "center") for model in ("least_squares", "logistic", "softmax"))})


@functools.cache
def _stored_defaults(options_of, name: str) -> dict:
    """The defaults of ``options_of(name)`` that a stored configuration records (those JSON can hold)."""
    return {k: v for k, v in options_of(name).items()
            if v is not inspect.Parameter.empty and _jsonable(v) and not _later(name, k)}


def _later(name: str, option: str) -> bool:
    """Whether ``option`` of the problem, method or data set ``name`` is one of :data:`LATER_OPTIONS`."""
    return option in LATER_OPTIONS or (name, option) in LATER_OPTIONS


def _jsonable(value) -> bool:
    try:
        json.dumps(value)
        return True
    except (TypeError, ValueError):
        return False


def _copy_tables(table: dict) -> dict:
    """A copy of nested tables (the values themselves are shared: they are never changed in place)."""
    return {k: _copy_tables(v) if isinstance(v, dict) else v for k, v in table.items()}


def _assign(table: dict, path: str, value):
    parts = path.split(".")
    for part in parts[:-1]:
        if table.get(part) is True:  # divergence = true, the default rule: a key sets one of its fields
            table[part] = {}
        table = table.setdefault(part, {})
    table[parts[-1]] = value


def _check_path(key: str, exp: Experiment, path: str):
    head, _, rest = key.partition(".")
    if not rest:
        if head == "seeds":  # the trials of every grid point, not a setting of a run
            raise exp.error("seeds are not a grid axis: set them with [run] seeds = [...] or --set seeds=[...]", path)
        if head not in RUN_KEYS:
            raise exp.error(f"unknown key; a run takes {', '.join(sorted(RUN_KEYS - {'seeds'}))} and the tables "
                            f"{', '.join(SECTIONS)}", path)
    elif head not in SECTIONS and head != "divergence":
        raise exp.error(f"unknown table {head!r}; the tables of a run are {', '.join(SECTIONS)}", path)
    elif head == "params" and "." in rest:
        raise exp.error("params are plain names (params.alpha)", path)
    elif head == "divergence" and exp.run.get("divergence") is False:
        raise exp.error("sets a field of the divergence rule, which [run] turns off (divergence = false): "
                        "remove one of the two", path)


def _check_seeds(value, exp, path):
    if _is_int(value) and value >= 0:  # one seed, or a number of trials?
        trials = ", ".join(map(str, range(value))) if value <= 10 else f"0, 1, ..., {value - 1}"
        more = f", or seeds=[{trials}] for {value} trial{'s' * (value > 1)}" if value else ""
        raise exp.error(f"seeds is a list: seeds=[{value}] for seed {value}{more}", path)
    if not (isinstance(value, list) and value and all(_is_int(s) and s >= 0 for s in value)):
        raise exp.error(f"seeds must be a non-empty list of integers >= 0, got {value!r}", path)
    if len(set(value)) != len(value):
        raise exp.error(f"seeds repeat: {value!r}", path)
    return list(value)


def _check_name(name: str, exp, path):
    """Experiment and grid names are parts of file names (the store, the report's folders and figures)."""
    if name in (".", "..") or "/" in name or "\\" in name:
        raise exp.error(f"a name is part of file names: write {name!r} without / and \\, and not as . or ..", path)


# ------------------------------------------------------------------------------------------ loading
def parse_experiment(text: str, source: str = "<string>", name: str | None = None) -> Experiment:
    """Parse and validate the TOML ``text`` of an experiment; :class:`ConfigError` names the key and line."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        message, line = _toml_error(text, str(err))
        raise ConfigError(message, line=line, source=source) from None
    lines = key_lines(text)
    exp = Experiment(name=name or "experiment", run={}, seeds=[0], grids=[], source=source, text=text, lines=lines)
    for table in data:
        if table not in ("experiment", "run", "grid", "claim", "paper_data"):
            raise exp.error("unknown table; an experiment has [experiment], [run], [paper_data], [[grid]] and "
                            "[[claim]] tables", table)
    meta = data.get("experiment", {})
    for key, value in meta.items():
        if key not in EXPERIMENT_KEYS:
            raise exp.error(f"unknown key; [experiment] takes {', '.join(sorted(EXPERIMENT_KEYS))}",
                            f"experiment.{key}")
        if key in ("from_paper", "defaults"):
            if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                raise exp.error("a list of strings", f"experiment.{key}")
        elif not isinstance(value, str):
            raise exp.error(f"a string, got {value!r}", f"experiment.{key}")
    exp.name = meta.get("name", exp.name)
    _check_name(exp.name, exp, "experiment.name")
    exp.title, exp.description, exp.paper = meta.get("title", ""), meta.get("description", ""), meta.get("paper", "")
    exp.from_paper, exp.defaults = list(meta.get("from_paper", [])), list(meta.get("defaults", []))
    run = data.get("run", {})
    if not isinstance(run, dict):
        raise exp.error("[run] must be a table", "run")
    for key, value in run.items():
        if key in SECTIONS:
            if not isinstance(value, dict):
                raise exp.error(f"must be a table [run.{key}]", f"run.{key}")
        elif key not in RUN_KEYS:
            raise exp.error(f"unknown key; [run] takes {', '.join(sorted(RUN_KEYS))} and the tables "
                            f"[run.{'], [run.'.join(SECTIONS)}]", f"run.{key}")
    exp.seeds = _check_seeds(run.pop("seeds", [0]), exp, "run.seeds")
    exp.run = run
    exp.paper_data = _paper_data(data.get("paper_data"), exp)
    exp.data = _data_text(exp)
    grids = data.get("grid", [])
    if isinstance(grids, dict):
        raise exp.error("write [[grid]] (an array of tables), not [grid]", "grid")
    seen = set()
    for index, table in enumerate(grids):
        grid = Grid(name=str(table.get("name", f"grid{index + 1}")), axes={}, index=index)
        _check_name(grid.name, exp, f"grid[{index}].name")
        if grid.name in seen:
            raise exp.error(f"two grids are called {grid.name!r}", f"grid[{index}].name")
        seen.add(grid.name)
        for key, value in table.items():
            path = f"grid[{index}].{key}"
            if key in GRID_KEYS:
                continue
            if isinstance(value, dict):
                raise exp.error('grid axes are quoted paths: write "algorithm.lr_local" = [...], not a table', path)
            _check_path(key, exp, path)
            values = value if isinstance(value, list) else [value]
            if not values:
                raise exp.error("an empty list of values", path)
            grid.axes[key] = values
        grid.title = str(table.get("title", ""))
        for role in ("lines", "slope"):
            chosen = table.get(role)
            if chosen is not None and chosen not in grid.axes:
                raise exp.error(f"names no axis of this grid; its axes are {', '.join(grid.axes) or 'none'}",
                                f"grid[{index}].{role}")
            setattr(grid, role, chosen)
        bad = [v for v in grid.axes.get(grid.slope, []) if not _loggable(v)]
        if bad:  # the report fits log y against log x, and reads x from the values as written
            raise exp.error(f"slope = {grid.slope!r} needs an axis of numbers > 0 (the slope is fitted against "
                            f"their logarithm), but it has {', '.join(map(repr, bad))}; choose another axis, or "
                            "write the values as numbers", f"grid[{index}].slope")
        for role in ("paper_slope", "predicted_slope"):
            value = table.get(role)
            if value is not None and not _is_number(value):
                raise exp.error(f"a number, got {value!r}", f"grid[{index}].{role}")
            setattr(grid, role, value)
        grid.metric = table.get("metric", "stationarity")
        exp.grids.append(grid)
    if not exp.grids:
        exp.grids = [Grid(name="run", axes={})]
    columns = _history_columns(exp)
    for grid in exp.grids:
        if grid.metric not in columns:
            raise exp.error(f"names no history column of these methods; choose one of {', '.join(columns)}",
                            f"grid[{grid.index}].metric")
        grid.curves = _curves(exp, grids[grid.index].get("curves", []) if grids else [], columns, grid.index)
    used = set(run.get("params", {}))
    for grid in exp.grids:
        used |= {k.split(".", 1)[1] for k in grid.axes if k.startswith("params.")}
    claims = data.get("claim", [])
    if isinstance(claims, dict):
        raise exp.error("write [[claim]] (an array of tables), not [claim]", "claim")
    grids_by_name = {g.name: g for g in exp.grids}
    exp.claims = [parse_claim(table, i, grids_by_name, columns, exp.error) for i, table in enumerate(claims)]
    if len({c.name for c in exp.claims}) < len(exp.claims):
        raise exp.error("two claims share a name", "claim")
    check_rounds(exp.claims, exp.expand(), exp.error)  # validates every run now, before anything executes
    exp._check_per_method()
    for param in sorted(used):
        if not re.search(rf"\b{re.escape(param)}\b", _expressions_text(exp)):
            raise exp.error("this parameter is never used in an expression", _param_path(exp, param))
    return exp


def _toml_error(text: str, message: str) -> tuple[str, int | None]:
    """tomllib's message and the line to cite: for an unclosed array or table, the line that opens it.

    tomllib reports where it noticed the problem, often lines after the bracket that was never closed.
    """
    found = re.search(r"\(at line (\d+), column \d+\)", message)
    if not (found and message.startswith("Unclosed")):
        return f"not valid TOML: {message}", int(found.group(1)) if found else None
    noticed, opened, depth = int(found.group(1)), None, 0
    for number, line in enumerate(text.splitlines()[:noticed], start=1):
        key = _KEY.match(line) if depth == 0 else None
        balance = _bracket_balance(line[key.end():] if key else line)
        if key and balance > 0:
            opened = (number, line.split("=")[0].strip())
        depth = max(depth + balance, 0)
    if opened is None or depth == 0:
        return f"not valid TOML: {message}", noticed
    return f"not valid TOML: the value of {opened[1]} is never closed (tomllib: {message})", opened[0]


def _curves(exp: Experiment, curves, columns: list[str], index: int) -> list[dict]:
    """A grid's ``curves``: a list of ``{y = column, x = column}`` tables (x may also be ``round``)."""
    path = f"grid[{index}].curves"
    if not isinstance(curves, list) or not all(isinstance(c, dict) and set(c) == {"x", "y"} for c in curves):
        raise exp.error('a list of tables { y = "test_accuracy", x = "seconds" }, one per figure', path)
    for curve in curves:
        for role, allowed in (("y", columns), ("x", ["round", *columns])):
            if curve[role] not in allowed:
                raise exp.error(f"{role} = {curve[role]!r} names no history column of these methods; choose one "
                                f"of {', '.join(allowed)}", f"{path}.{role}")
    return [{"y": c["y"], "x": c["x"]} for c in curves]


def _history_columns(exp: Experiment) -> list[str]:
    """The numeric history columns of the experiment's methods (:data:`fedopt.run.COLUMNS` and their extra ones)."""
    from fedopt import algorithms
    from fedopt.run import COLUMNS

    columns = [c for c in COLUMNS if c != "round"]
    for name in sorted(n for n in exp.algorithms() if n in algorithms.ALGORITHMS):
        columns += [c for c in algorithms.ALGORITHMS[name].extra_columns if c not in columns]
    return columns


def _expressions_text(exp: Experiment) -> str:
    strings = []

    def walk(value):
        if isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)
        elif isinstance(value, str):
            strings.append(value)

    walk(exp.run)
    for grid in exp.grids:
        walk({k: v for k, v in grid.axes.items() if not k.startswith("params.")})
    return " ".join(strings)


def _param_path(exp, param):
    for grid in exp.grids:
        if f"params.{param}" in grid.axes:
            return f"grid[{grid.index}].params.{param}"
    return f"run.params.{param}"


def _paper_data(table, exp: Experiment) -> dict | None:
    """The validated ``[paper_data]`` table: ``name`` (a data set of :mod:`fedopt.datasets.catalog`) and
    paths below ``[run]``."""
    from fedopt.datasets.catalog import PAPER_DATA

    if table is None:
        return None
    if table.get("name") not in PAPER_DATA:
        raise exp.error(f"the paper's data set: one of {', '.join(PAPER_DATA)}, got {table.get('name')!r}",
                        "paper_data.name")
    for key in table:
        if key != "name":
            _check_path(key, exp, f"paper_data.{key}")
    return dict(table)


def _data_text(exp: Experiment, why_not: str | None = None) -> str:
    """``mnist (the paper's data)``, or ``digits (not the paper's: it used mnist; why_not)``."""
    dataset = exp.run.get("dataset")
    if not dataset:
        return "no data set (a synthetic operator)"
    name = dataset.get("name", "?")
    paper = (exp.paper_data or {}).get("name")
    if paper is None:
        return name
    if name == paper:
        return f"{name} (the paper's data)"
    return f"{name} (not the paper's: it used {paper}; {why_not or 'fedopt sweep --data paper runs on it'})"


def builtin_experiments() -> dict[str, Path]:
    """``{name: path}`` of the experiments shipped in ``fedopt/experiments``."""
    return {path.stem: path for path in sorted(BUILTIN_DIR.glob("*.toml"))}


def load_experiment(name_or_path, overrides: dict | None = None, data: str = "auto") -> Experiment:
    """The experiment in a TOML file, or the built-in one of that name, on the data ``data`` chooses
    (:meth:`Experiment.with_data`: by default the paper's when present); ``overrides`` as in
    :meth:`Experiment.override`."""
    path = Path(name_or_path)
    builtin = builtin_experiments()
    if not path.is_file():
        key = str(name_or_path).removesuffix(".toml").replace("-", "_")
        if key not in builtin:
            raise ConfigError(f"{name_or_path!r} is neither a TOML file nor a built-in experiment; the built-in "
                              f"ones are {', '.join(builtin)}")
        path = builtin[key]
    exp = parse_experiment(path.read_text(encoding="utf-8"), source=str(path), name=path.stem).with_data(data)
    if overrides:
        exp = exp.override(overrides)
        exp.expand()
        if any(key == "dataset" or key.startswith("dataset.") for key in overrides):
            exp.data = _data_text(exp, "--set changed the data set")
    return exp


def parse_assignment(text: str) -> tuple[str, object]:
    """``"KEY=VALUE"`` from the command line: VALUE in TOML syntax, or a bare word as a string."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set takes KEY=VALUE, got {text!r}")
    try:
        parsed = tomllib.loads(f"v = {value.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        parsed = value.strip()
    return key, parsed


__all__ = ["BUILTIN_DIR", "ConfigError", "Experiment", "Grid", "RunSpec", "builtin_experiments", "config_key",
           "dataset_names", "evaluate_expression", "key_lines", "load_experiment", "parse_assignment",
           "parse_experiment"]
