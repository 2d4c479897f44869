"""What every ``bandpo`` subcommand's parser shares: the help formatter (defaults shown) and the deprecated
spellings of renamed flags.

One grammar for outputs: ``--output-dir DIR`` for a directory, ``--output FILE`` for a file. An old spelling
stays accepted (hidden from ``--help``) and says once on stderr what it is now.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The epilog and description as written (examples keep their layout), and every option's default in its
    help: appended as ``(default: X)`` unless the help already states it (it says "default"), and left out for
    on/off flags and options without a default (``None``)."""

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
        if isinstance(default, (list, tuple)):  # nargs="+": shown as typed on the command line
            shown = " ".join(str(v) for v in default).replace("%", "%%")
        else:
            shown = "%(default)s"
        return f"{help_} (default: {shown})" if help_ else f"default: {shown}"


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


def yaml_mapping(flag: str, text: str, example: str) -> dict[str, Any]:
    """``text`` read as a YAML mapping (JSON is YAML too), for an option such as ``--task-options``; anything
    else raises ``ValueError`` with one line: ``FLAG must be a YAML mapping like 'EXAMPLE', got 'TEXT'`` (and
    the parser's reason, on the same line)."""
    import yaml

    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as err:
        from bandpo.config import yaml_error_line

        reason = yaml_error_line(err)  # the YAML parser's message spans several lines
        raise ValueError(f"{flag} must be a YAML mapping like '{example}', got {text!r}: {reason}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{flag} must be a YAML mapping like '{example}', got {text!r}")
    return value
