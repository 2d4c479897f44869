"""``bandpo`` run in the test's own process, for the error paths and file rules whose messages and files do not
depend on the process (a subprocess costs about 4 s of CPU; the tests that put the process itself under test, such
as a closed pipe, warnings' format or a missing extra, run the command line as a subprocess)."""

from __future__ import annotations

from collections.abc import Sequence
from os import PathLike

import pytest


def exit_status(argv: Sequence[str | PathLike[str]]) -> int | str | None:
    """``bandpo argv``'s exit status: what ``main`` returns, or the code of the ``SystemExit`` it raises (argparse's
    and ``cli.bounds.usage_error``'s errors)."""
    from bandpo_lab.cli.main import main

    try:
        return main([str(arg) for arg in argv])
    except SystemExit as exc:
        return exc.code


def run_bandpo(
    capsys: pytest.CaptureFixture[str], *args: str | PathLike[str]
) -> tuple[int | str | None, str, str]:
    """``bandpo *args``: its exit status, and what it printed to stdout and stderr (read from ``capsys``)."""
    status = exit_status(args)
    printed = capsys.readouterr()
    return status, printed.out, printed.err
