"""``bandpo <command> ...``: dispatch to the subcommand modules, imported lazily (``bandpo bounds`` never imports
transformers)."""

from __future__ import annotations

import argparse
import importlib
import os
import select
import sys
import warnings
from collections.abc import Callable, Sequence

from bandpo._optional import MissingDependencyError, install_hint
from bandpo_lab.cli._args import HelpFormatter

EXIT_BROKEN_PIPE = 141  # a process killed by SIGPIPE (128 + 13), as shells report `yes | head -1`

# name -> (its module in bandpo_lab.cli, one-line help). The single list of subcommands.
COMMANDS: dict[str, tuple[str, str]] = {
    "bounds": ("bounds", "print a table of Band bounds and the allowed probability change"),
    "plot-bounds": ("plot_bounds", "write the Figure-1-style PNG of ratio bounds against p"),
    "train": ("train", "train with BandPO (or a baseline clip rule) through TRL"),
    "eval": ("evaluate", "sample k answers per problem and report mean@k / pass@k / best@k / maj@k"),
    "compare": ("compare", "train and evaluate several clip rules over seeds; write plots and a report"),
    "demo": ("demo", "the main job: warm-start the tiny model, train it with BandPO, evaluate"),
    "probe": (
        "probe",
        "the clip rules on a real model's own tokens: p_old of the sampled tokens, what each rule clips",
    ),
}


LAB_EXTRA = install_hint("lab")  # the lab's requirements (pip install . brings torch alone)

LAB_MODULES = frozenset(
    # the lab extra's own packages
    {"yaml", "numpy", "scipy", "pydantic", "tqdm", "tokenizers", "tensorboard"}
    | {"trl", "transformers", "accelerate", "datasets"}  # the trl extra it includes
)
"""The top-level modules of the packages of the ``lab`` extra (pyproject.toml): a command that fails to import one
says to install the extra."""

HELP_COMMAND = "help"  # bandpo help [COMMAND] is bandpo [COMMAND] --help


def build_parser(with_commands: Sequence[str] | None = None) -> argparse.ArgumentParser:
    from bandpo import __version__

    parser = argparse.ArgumentParser(
        prog="bandpo",
        description="Band-constrained Policy Optimization",
        epilog="bandpo help COMMAND (or bandpo COMMAND --help) prints a command's options",
    )
    parser.add_argument("--version", action="version", version=f"bandpo {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, (module, help_) in COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_, formatter_class=HelpFormatter)
        if with_commands is None or name in with_commands:
            importlib.import_module(f"bandpo_lab.cli.{module}").add_arguments(p)
    return parser


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """``parser.parse_args(argv)``, with a command's ``KEY=VALUE`` overrides (its positional ``overrides``)
    accepted anywhere on the line, in their order; an unknown flag is still the subcommand's usage error."""
    args, extras = parser.parse_known_args(argv)
    if extras:
        if not isinstance(getattr(args, "overrides", None), list) or any(w.startswith("-") for w in extras):
            _command_parser(parser, args.command).error(f"unrecognized arguments: {' '.join(extras)}")
        args.overrides = [*args.overrides, *extras]
    return args


def _command_parser(parser: argparse.ArgumentParser, command: str | None) -> argparse.ArgumentParser:
    """The subparser of ``command`` (the top-level parser if there is none)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            return action.choices[command]
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == [HELP_COMMAND]:  # bandpo help [COMMAND ...]: the help of COMMAND, or of bandpo
        argv = [*argv[1:], "--help"] if len(argv) > 1 else ["--help"]
    command = next((a for a in argv if not a.startswith("-")), None)
    try:
        return _main(argv, command)
    except ImportError as err:  # the lab's requirements are not installed (pip install . brings torch alone)
        missing = _missing_lab_module(err)
        if missing is None:
            raise
        print(
            f"bandpo: the lab's commands need the lab extra: {LAB_EXTRA} (missing: {missing})",
            file=sys.stderr,
        )
        return 2


def _missing_lab_module(err: BaseException | None) -> str | None:
    """The module of :data:`LAB_MODULES` whose absence ``err`` or one of its causes reports, else ``None``."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, ModuleNotFoundError) and err.name in LAB_MODULES:
            return err.name
        err = err.__cause__ or err.__context__
    return None


def _main(argv: list[str], command: str | None) -> int:
    """:func:`main` once ``bandpo help`` is read: the parser of ``command`` only, then the command."""
    parser = build_parser([command] if command in COMMANDS else [])
    try:
        args = parse_args(parser, argv)  # --help prints too
        module = importlib.import_module(f"bandpo_lab.cli.{COMMANDS[args.command][0]}")
        with warnings.catch_warnings():
            warnings.formatwarning = _one_line_warnings(args.command, warnings.formatwarning)
            status = int(module.run(args) or 0)
        sys.stdout.flush()  # inside the try: a closed pipe surfaces here, not at interpreter exit
    except BrokenPipeError:
        if not _stdout_is_closed():
            raise  # a broken pipe elsewhere (a socket, a subprocess) is a real error
        return EXIT_BROKEN_PIPE
    except MissingDependencyError as err:  # an optional extra the command needs (e.g. matplotlib for figures)
        print(f"bandpo {args.command}: error: {err}", file=sys.stderr)
        return 2
    return status


def _one_line_warnings(command: str, default: Callable[..., str]) -> Callable[..., str]:
    """``warnings.formatwarning`` printing bandpo's own warnings (a category of a ``bandpo`` or ``bandpo_lab``
    module) as one line, ``bandpo COMMAND: warning: <message>``; other libraries' keep ``default``. (The format,
    not ``showwarning``, so that ``pytest.warns`` still records them.)"""

    def format_(
        message: Warning | str, category: type[Warning], filename: str, lineno: int, *rest: object
    ) -> str:
        if category.__module__.split(".")[0] in ("bandpo", "bandpo_lab"):
            return f"bandpo {command}: warning: {message}\n"
        return default(message, category, filename, lineno, *rest)

    return format_


def _stdout_is_closed() -> bool:
    """After a ``BrokenPipeError``: True if the reader of our stdout went away (``bandpo bounds | head -2``, which
    polls as POLLERR); stdout then points at /dev/null, so that the final flush does not raise again (the recipe
    of Python's ``signal`` documentation)."""
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        closed = any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll() (Windows) or no real stdout: trust the error
        closed = True
        fd = None
    if closed and fd is not None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    return closed


if __name__ == "__main__":
    sys.exit(main())
