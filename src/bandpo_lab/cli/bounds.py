"""``bandpo bounds``: a table of Band bounds and the allowed probability change for given p and divergences."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import torch

from bandpo.core import DIVERGENCES, band_bounds
from bandpo.losses.clip_rules import PAPER_CAP, PAPER_DELTA
from bandpo_lab.cli._args import add_list_option

DEFAULT_P = (0.001, 0.01, 0.08, 0.2, 0.5, 0.9, 0.99)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_list_option(
        parser, "--p", item=float, spaces=True, default=list(DEFAULT_P), help="old probabilities in (0, 1]"
    )
    add_band_options(
        parser, DIVERGENCES.names(), f"divergences (default: all): {', '.join(DIVERGENCES.names())}"
    )


def add_band_options(parser: argparse.ArgumentParser, divergences: list[str], divergence_help: str) -> None:
    """``--divergence`` (default ``divergences``), ``--delta`` and ``--cap`` (:func:`check_delta_and_cap`)."""
    add_list_option(
        parser, "--divergence", choices=DIVERGENCES.names(), noun="divergence", spaces=True,
        default=divergences, metavar="NAME", help=divergence_help,
    )  # fmt: skip
    parser.add_argument(
        "--delta", type=float, default=PAPER_DELTA, help=f"trust-region radius > 0 (default: {PAPER_DELTA})"
    )
    parser.add_argument(
        "--cap",
        default=f"{PAPER_CAP:g}",
        help=f"upper cap on hi, a number >= 1, or none for no cap (default: {PAPER_CAP:g})",
    )


def usage_error(command: str, message: str) -> NoReturn:
    """Print ``bandpo <command>: error: <message>`` (one line, on stderr) and exit with status 2, as argparse
    does for a bad argument."""
    print(f"bandpo {command}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


NO_CAP = ("none", "null")
"""``--cap`` values that mean no cap (``band_bounds(cap=None)``; ``null`` in a config)."""


def check_listed(command: str, flag: str, items: Sequence[Any], what: str) -> None:
    """A list option that must hold an item (``--p ,`` printed an empty table): else exits with status 2, naming
    ``flag`` and the text typed."""
    if not items:
        usage_error(command, f"{flag} must name at least one {what}, got {getattr(items, 'text', '')!r}")


def check_delta_and_cap(command: str, delta: float, cap: str | float) -> float | None:
    """Validate ``--delta`` (finite, > 0) and ``--cap`` (``none`` for no cap, else finite and >= 1, as
    ``band_bounds``' ``cap``) before anything is printed; returns the cap for ``band_bounds`` (``None`` for no
    cap). Exits with status 2 on a bad value."""
    if not (math.isfinite(delta) and delta > 0):
        usage_error(command, f"--delta must be a finite number > 0, got {delta:g}")
    if isinstance(cap, str) and cap.strip().lower() in NO_CAP:
        return None
    try:
        value = float(cap)
        shown = str(cap)
    except ValueError:
        value, shown = math.nan, repr(cap)  # quoted: '' or a word
    if not (math.isfinite(value) and value >= 1):
        usage_error(command, f"--cap must be a finite number >= 1, or none for no cap, got {shown}")
    return value


def run(args: argparse.Namespace) -> int:
    check_listed("bounds", "--p", args.p, "probability")
    check_listed("bounds", "--divergence", args.divergence, "divergence")
    tiny = torch.finfo(torch.float64).tiny  # below it 1/p (the simplex limit column) overflows
    bad = [p for p in args.p if not (tiny <= p <= 1)]
    if bad:
        usage_error(
            "bounds", f"--p values must be in [{tiny:.3g}, 1] (a normal float64 probability), got {bad}"
        )
    cap = check_delta_and_cap("bounds", args.delta, args.cap)
    p = torch.tensor(args.p, dtype=torch.float64)
    logp = torch.log(p)
    # Every bound is computed before the first line is printed: an error never follows a half-printed table.
    rows = []
    for name in args.divergence:
        try:
            lo, hi = band_bounds(logp, args.delta, name, cap=cap)
        except ValueError as err:
            usage_error("bounds", f"--divergence {name} with --delta {args.delta:g}: {err}")
        rows.extend((name, pi, a, b) for pi, a, b in zip(p.tolist(), lo.tolist(), hi.tolist()))
    print(
        f"Band bounds, delta = {args.delta:g}, cap = {cap}  (dpi = allowed change of pi(a|s): [-(1-lo) p, (hi-1) p])"
    )
    header = f"{'divergence':<12} {'p':>8} {'lo':>9} {'hi':>10} {'dpi down':>10} {'dpi up':>10} {'simplex 1/p':>12}"
    print(header)
    print("-" * len(header))
    for name, pi, a, b in rows:
        print(
            f"{name:<12} {pi:>8.4g} {a:>9.4f} {b:>10.4f} {-(1 - a) * pi:>10.4f} {(b - 1) * pi:>10.4f} "
            f"{(1 / pi if pi > 0 else math.inf):>12.4g}"
        )
    for label, eps in (("fixed 0.2", 0.2), ("fixed 0.28", 0.28)):
        for pi in p.tolist():
            print(
                f"{label:<12} {pi:>8.4g} {1 - 0.2:>9.4f} {1 + eps:>10.4f} {-0.2 * pi:>10.4f} {eps * pi:>10.4f}"
            )
    return 0
