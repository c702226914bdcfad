"""The ``fedopt`` command line (also ``python -m fedopt``)."""

from __future__ import annotations

import argparse
import sys


def _list(args) -> int:
    from fedopt import _backend, algorithms, problems, regularizers

    print("algorithms:", ", ".join(algorithms.available()))
    print("problems:", ", ".join(problems.PROBLEMS))
    print("regularizers:", ", ".join(regularizers.available()))
    print("backends:", ", ".join(_backend.available()), "(and 'auto')")
    return 0


def _demo(args) -> int:
    from fedopt import demo

    demo.main(backend=args.backend)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fedopt", description="Composite federated optimization on compiled kernels.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser("demo", help="train federated models on the bundled digits, check a federated Lasso, time the kernels")
    demo.add_argument("--backend", default="auto", choices=["numpy", "numba", "gpu", "auto"])
    demo.set_defaults(handler=_demo)
    listing = commands.add_parser("list", help="list the algorithms, problems, regularizers and the backends that work here")
    listing.set_defaults(handler=_list)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except (ValueError, RuntimeError) as exc:
        print(f"fedopt {args.command}: error: {exc}", file=sys.stderr)
        return 2
