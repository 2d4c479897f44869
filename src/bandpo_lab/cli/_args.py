"""What every ``bandpo`` subcommand's parser shares (docs/architecture.md#the-command-line): the help formatter,
list options (:func:`add_list_option`), ``--dry-run`` for long work and the deprecated spellings of renamed flags.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any


def add_dry_run(parser: argparse._ActionsContainer, checks: str, work: str) -> None:
    """Add ``--dry-run`` (to a parser or group): "check ``checks``, print the plan and exit without ``work``"."""
    parser.add_argument(
        "--dry-run", action="store_true", help=f"check {checks}, print the plan and exit without {work}"
    )


def print_plan(command: str, nothing: str, lines: Sequence[str]) -> int:
    """A dry run's plan on stdout: ``bandpo COMMAND: dry run: the plan (NOTHING)``, then ``lines``; returns 0."""
    print("\n".join([f"bandpo {command}: dry run: the plan ({nothing})", *lines]))
    return 0


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The epilog and description as written, and each option's default appended as ``(default: X)`` unless its
    help says "default", it is a flag, or it has none."""

    def _format_args(self, action: argparse.Action, default_metavar: str) -> str:
        if isinstance(action, ListOption):  # the comma form only, whatever words it reads
            metavar = action.metavar if action.metavar is not None else default_metavar
            if isinstance(metavar, tuple):
                return ",".join(metavar)
            return f"{metavar}[,{metavar}...]"
        return super()._format_args(action, default_metavar)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        help_ = action.help or ""
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
    """The type of every list option: ``"a,b"`` -> ``ListValue(["a", "b"])``, items stripped, converted by ``item``,
    empty ones dropped; an item not in ``choices`` is refused as an unknown ``noun``, with a did-you-mean."""

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
    """A list option (:func:`add_list_option`): one comma-separated word, or with ``spaces`` several words read as
    one list, with a line on stderr saying the comma form; ``length``: the number of items it must hold."""

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
    """Add a list option written with commas (``--rules grpo,band``): ``item`` its items' type, ``choices`` and
    ``noun`` as :class:`CommaList` takes them, ``spaces`` and ``length`` as :class:`ListOption` does, ``kwargs``
    as ``add_argument`` takes them."""
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
    """With ``enabled`` False (``--no-progress``), transformers' and huggingface_hub's progress bars are off in the
    block (as a model loads) and back as they were after it."""
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
    """``text`` read as a YAML mapping (``--task-options``); else ``ValueError``, one line: ``FLAG must be a YAML
    mapping like 'EXAMPLE', got 'TEXT'`` (and the parser's reason)."""
    import yaml

    from bandpo_lab.config.documents import load_value, yaml_error_line

    try:
        value = load_value(text)  # aliases bounded as in a config file
    except yaml.YAMLError as err:
        reason = yaml_error_line(err)  # the YAML parser's message spans several lines
        raise ValueError(f"{flag} must be a YAML mapping like '{example}', got {text!r}: {reason}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{flag} must be a YAML mapping like '{example}', got {text!r}")
    return value


def field_flags(settings: type, **renamed: str) -> dict[str, str]:
    """A settings dataclass's field -> the flag that sets it: its name with dashes (``batch_size`` ->
    ``--batch-size``), except the ``renamed`` ones (``learning_rate="--lr"``)."""
    import dataclasses

    return {
        f.name: renamed.get(f.name, "--" + f.name.replace("_", "-")) for f in dataclasses.fields(settings)
    }


def flag_message(message: str, flags: dict[str, str]) -> str | None:
    """A settings check's ``"<field> must be ..."`` with the field replaced by its flag (:func:`field_flags`), so that
    the error names what the user typed; ``None`` when ``message`` starts with no field of ``flags``."""
    name, _, rest = message.partition(" ")
    return f"{flags[name]} {rest}" if name in flags else None
