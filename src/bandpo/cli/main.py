"""``bandpo <command> ...``: dispatch to the subcommand modules (imported lazily, so ``bandpo bounds`` never
imports transformers)."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# name -> (module, one-line help). The single list of subcommands.
COMMANDS: dict[str, tuple[str, str]] = {
    "bounds": ("bandpo.cli.bounds", "print a table of Band bounds and the allowed probability change"),
    "plot-bounds": ("bandpo.cli.plot_bounds", "write the Figure-1-style PNG of ratio bounds against p"),
    "bench": ("bandpo.cli.bench", "time the bound solvers and the loss against baselines on this machine"),
    "train": ("bandpo.cli.train", "train with BandPO (or a baseline clip rule) through TRL"),
    "eval": (
        "bandpo.cli.evaluate",
        "sample k answers per problem and report mean@k / pass@k / best@k / maj@k",
    ),
    "compare": (
        "bandpo.cli.compare",
        "train and evaluate several clip rules over seeds; write plots and a report",
    ),
    "demo": ("bandpo.cli.demo", "the main job: warm-start the tiny model, train it with BandPO, evaluate"),
}


def build_parser(with_commands: Sequence[str] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bandpo", description="Band-constrained Policy Optimization")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, (module, help_) in COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_)
        if with_commands is None or name in with_commands:
            importlib.import_module(module).add_arguments(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser([command] if command in COMMANDS else [])
    args = parser.parse_args(argv)
    module = importlib.import_module(COMMANDS[args.command][0])
    return int(module.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
