"""What every ``bandpo`` subcommand's parser shares: the help formatter (defaults shown), the one way to write
a list (:func:`add_list_option`), each command's output option (:data:`OUTPUTS`) and the deprecated spellings of
renamed flags.

One grammar for lists: comma-separated, ``--divergence kl,tv``, ``--rules grpo,band``, ``--ks 1,8``. The options
that took space-separated words (``bounds --p``, ``--divergence``) still read them, with one line on stderr, and
``--help`` shows the commas only.

One grammar for outputs: a command that writes one file takes ``-o/--output FILE`` (``plot-bounds``, ``eval``), one
that writes a folder ``-o/--output-dir DIR`` (``probe``, ``demo``); ``train`` and
``compare`` write where their config's ``output_dir`` says (``output_dir=DIR``, a config key like any other). An
old spelling stays accepted (hidden from ``--help``) and says once on stderr what it is now.

One grammar for long work: a command whose work takes minutes (:data:`LONG_WORK`) takes ``--no-progress`` and
``--dry-run``, which makes every check the command makes before its work and prints the plan in a few lines,
``bandpo COMMAND: dry run: the plan (...)`` (:func:`print_plan`; ``train`` prints its resolved config), loading no
model and writing nothing.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

OUTPUT_FILE, OUTPUT_DIR, OUTPUT_KEY = "--output", "--output-dir", "output_dir="
"""The three ways a command is told where to write: a file, a folder, the config key of train and compare."""

OUTPUTS: dict[str, str | None] = {
    "bounds": None,
    "plot-bounds": OUTPUT_FILE,
    "eval": OUTPUT_FILE,
    "probe": OUTPUT_DIR,
    "demo": OUTPUT_DIR,
    "train": OUTPUT_KEY,
    "compare": OUTPUT_KEY,
}
"""Each command's output option (``-o`` is its short form), ``output_dir=`` for the commands whose config says
where they write, ``None`` for one that prints only. ``tests/lab/cli/test_grammar.py`` holds every command to it."""


LONG_WORK = ("train", "eval", "compare", "demo", "probe")
"""The commands whose work takes minutes (a model, a training run): each takes
``--dry-run`` (every check the command makes before its work, then the plan in a few lines: nothing loaded, run or
written; :func:`add_dry_run`, :func:`print_plan`) and ``--no-progress``. ``tests/lab/cli/test_grammar.py`` holds
every command to it."""


def add_dry_run(parser: argparse.ArgumentParser, checks: str, work: str) -> None:
    """Add ``--dry-run``: "check ``checks``, print the plan and exit without ``work``"."""
    parser.add_argument(
        "--dry-run", action="store_true", help=f"check {checks}, print the plan and exit without {work}"
    )


def print_plan(command: str, nothing: str, lines: Sequence[str]) -> int:
    """A dry run's plan on stdout: ``bandpo COMMAND: dry run: the plan (NOTHING)`` (what was not done: ``nothing
    built, evaluated or trained``), then ``lines``; returns the exit status, 0."""
    print("\n".join([f"bandpo {command}: dry run: the plan ({nothing})", *lines]))
    return 0


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The epilog and description as written (examples keep their layout), and every option's default in its
    help: appended as ``(default: X)`` unless the help already states it (it says "default"), and left out for
    on/off flags and options without a default (``None``)."""

    def _format_args(self, action: argparse.Action, default_metavar: str) -> str:
        if isinstance(action, ListOption):  # the comma form only, whatever words it reads
            metavar = action.metavar if action.metavar is not None else default_metavar
            if isinstance(metavar, tuple):
                return ",".join(metavar)
            return f"{metavar}[,{metavar}...]"
        return super()._format_args(action, default_metavar)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        help_ = action.help
        if help_ is None:
            help_ = ""
        if (
            help_ == argparse.SUPPRESS
            or action.default is None
            or action.default == argparse.SUPPRESS
            or action.nargs == 0  # store_true / store_false / store_const: the flag's absence is the default
            or "default" in help_.lower()
        ):
            return action.help
        default = action.default
        if isinstance(default, (list, tuple)):  # a list option: shown as typed on the command line
            shown = ",".join(str(v) for v in default).replace("%", "%%")
        else:
            shown = "%(default)s"
        return f"{help_} (default: {shown})" if help_ else f"default: {shown}"


class ListValue(list):  # type: ignore[type-arg]
    """A list option's items, with the text as typed (``text``) for a message about it (``--rules ','``)."""

    text: str = ""


class CommaList:
    """The type of every list-valued option: ``"a,b"`` -> ``ListValue(["a", "b"])``, each item stripped and
    converted by ``item`` (``int``, ``float``; ``str`` by default), empty items dropped (``","`` is an empty list,
    which the command refuses in its own words). ``choices``: the names an item may take, an unknown one refused
    with the closest (:func:`bandpo.registry.did_you_mean`) as an unknown ``noun``."""

    def __init__(
        self, item: Callable[[str], Any] = str, choices: Sequence[str] | None = None, noun: str = "name"
    ) -> None:
        self.item = item
        self.choices = None if choices is None else list(choices)
        self.noun = noun

    def __call__(self, text: str) -> ListValue:
        from bandpo.registry import did_you_mean

        words = [w.strip() for w in text.split(",") if w.strip()]
        if self.choices is not None:
            for word in words:
                if word not in self.choices:
                    raise argparse.ArgumentTypeError(
                        f"unknown {self.noun} {word!r}{did_you_mean(word, self.choices)}; choose from "
                        f"{', '.join(self.choices)}"
                    )
        try:
            items = ListValue(self.item(w) for w in words)
        except ValueError:
            name = getattr(self.item, "__name__", "value")
            raise argparse.ArgumentTypeError(
                f"items must be of type {name}, comma-separated, got {text!r}"
            ) from None
        items.text = text
        return items


class ListOption(argparse.Action):
    """A list-valued option (added by :func:`add_list_option`): one comma-separated word; where ``spaces`` is on
    (the options that took space-separated words before), several words too, read as one list, with a line on
    stderr saying the comma form. ``length``: the number of items it must hold (a shape ``B,T``)."""

    def __init__(
        self,
        option_strings: list[str],
        dest: str,
        spaces: bool = False,
        length: int | None = None,
        **kwargs: Any,
    ) -> None:
        self.spaces = spaces
        self.length = length
        super().__init__(option_strings, dest, nargs="+" if spaces else None, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        if self.spaces:  # one ListValue per word
            items = ListValue(item for word in values for item in word)
            items.text = ",".join(word.text for word in values)
            if len(values) > 1:  # the comma form of what was typed, shortened past 60 characters
                shown = items.text if len(items.text) <= 60 else items.text[:57] + "..."
                print(
                    f"{parser.prog}: {option_string} takes commas now: {option_string} {shown}",
                    file=sys.stderr,
                )
        else:
            items = values
        if self.length is not None and len(items) != self.length:
            parser.error(
                f"argument {option_string}: takes {self.length} comma-separated values, got {items.text!r}"
            )
        setattr(namespace, self.dest, items)


def add_list_option(
    parser: argparse.ArgumentParser,
    *flags: str,
    item: Callable[[str], Any] = str,
    choices: Sequence[str] | None = None,
    noun: str = "name",
    spaces: bool = False,
    length: int | None = None,
    **kwargs: Any,
) -> argparse.Action:
    """Add a list-valued option, written with commas (``--rules grpo,band``): the one way every ``bandpo``
    command takes a list. ``item``: each item's type; ``choices``: the names an item may take (an unknown one is named an unknown ``noun``); ``spaces``: also
    read space-separated words (the old form of the options that had it); ``length``: a fixed number of items;
    ``kwargs``: ``default``, ``help``, ``metavar``, ... as ``add_argument`` takes them."""
    return parser.add_argument(
        *flags, action=ListOption, type=CommaList(item, choices, noun), spaces=spaces, length=length, **kwargs
    )


class _DeprecatedSpelling(argparse.Action):
    """An old spelling of a renamed option: stores into the new option's ``dest`` and prints
    ``bandpo <command>: OLD is now NEW`` on stderr."""

    def __init__(self, option_strings: list[str], dest: str, new: str, **kwargs: Any) -> None:
        self.new = new
        super().__init__(option_strings, dest, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        print(f"{parser.prog}: {option_string} is now {self.new}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_deprecated_spelling(parser: argparse.ArgumentParser, old: str, new: str) -> None:
    """Accept ``old`` as a hidden alias of the already added option ``new`` (same value, same ``dest``)."""
    target = parser._option_string_actions[new]
    parser.add_argument(
        old,
        dest=target.dest,
        new=new,
        action=_DeprecatedSpelling,
        type=target.type,
        metavar=target.metavar,
        default=argparse.SUPPRESS,  # the new option's default stands
        help=argparse.SUPPRESS,
    )


@contextmanager
def progress_bars(enabled: bool) -> Iterator[None]:
    """The command's ``--no-progress`` for the libraries it calls: with ``enabled`` False, transformers' and
    huggingface_hub's own bars are off while the block runs (``Loading weights: 100%|...`` as a model loads) and
    back as they were after it; with ``enabled`` True nothing changes (and transformers is not imported)."""
    if enabled:
        yield
        return
    from transformers.utils import logging

    was_on = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            logging.enable_progress_bar()


def yaml_mapping(flag: str, text: str, example: str) -> dict[str, Any]:
    """``text`` read as a YAML mapping (JSON is YAML too), for an option such as ``--task-options``; anything
    else raises ``ValueError`` with one line: ``FLAG must be a YAML mapping like 'EXAMPLE', got 'TEXT'`` (and
    the parser's reason, on the same line)."""
    import yaml

    from bandpo_lab.config.documents import load_value

    try:
        value = load_value(text)  # aliases bounded as in a config file
    except yaml.YAMLError as err:
        from bandpo_lab.config import yaml_error_line

        reason = yaml_error_line(err)  # the YAML parser's message spans several lines
        raise ValueError(f"{flag} must be a YAML mapping like '{example}', got {text!r}: {reason}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{flag} must be a YAML mapping like '{example}', got {text!r}")
    return value
