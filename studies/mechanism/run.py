"""The toy mechanism study (docs/mechanism.md): the clip rules on a categorical policy with a Zipf vocabulary,
in about a minute.

Trains one logit vector per (rule, learning rate, initial probability, seed) with GRPO group advantages and
several SGD updates per sampled batch, for each scenario, and writes tables and figures (``mechanism.py`` the
simulation, ``mechanism_stats.py`` its statistics, ``mechanism_report.py`` the tables and figures, all in this
folder). It was ``bandpo mechanism`` until the study had its folder: same options, same outputs.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the study's modules: this folder is not a package

if TYPE_CHECKING:
    from mechanism import MechanismConfig, Scenario

    from bandpo.losses.clip_rules import ClipRule

PROG = "studies/mechanism/run.py"
EPILOG = f"""\
examples:
  python {PROG} --output-dir studies/mechanism/results   # the committed run (about a minute on 2 cores)
  python {PROG} --quick --output-dir runs/mech-quick      # test-sized: seconds
  python {PROG} --rules grpo,band --scenarios rare_reward --vocab 150000 --output-dir runs/mech-150k
"""


def _names(text: str) -> list[str]:
    """A comma-separated list of names, without empty items (``"grpo,band"``, ``"grpo, band"``)."""
    return [name.strip() for name in text.split(",") if name.strip()]


def build_parser() -> argparse.ArgumentParser:
    from mechanism import SCENARIOS

    from bandpo.losses.clip_rules import CLIP_RULES

    parser = argparse.ArgumentParser(
        prog=PROG,
        description=__doc__.split("\n\n")[0],
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--output-dir", "-o", default="runs/mechanism", help="output directory (default: runs/mechanism)"
    )
    parser.add_argument(
        "--seeds", type=int, default=None, help="seeds per cell, >= 2 (default: 30; --quick: 8)"
    )
    parser.add_argument(
        "--vocab", type=int, default=None, help="number of actions, >= 16 (default: 1024; --quick: 256)"
    )
    parser.add_argument(
        "--steps", type=int, default=None, help="sampled batches per run (default: per scenario)"
    )
    parser.add_argument(
        "--rules",
        default=None,
        metavar="NAME[,NAME...]",
        help=f"comma-separated clip rules (default: every registered one: {', '.join(CLIP_RULES.names())})",
    )
    parser.add_argument(
        "--scenarios",
        default=None,
        metavar="NAME[,NAME...]",
        help=f"comma-separated scenarios (default: all: {', '.join(SCENARIOS.names())})",
    )
    parser.add_argument(
        "--quick", action="store_true", help="test-sized grid: 2 learning rates, K in {1, 4}, 12 steps"
    )
    parser.add_argument("--no-figures", action="store_true", help="write the tables only")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="check the flags, the rules, the scenarios and the output directory, print the plan and exit "
        "without simulating or writing",
    )
    return parser


def _command(args: argparse.Namespace) -> str:
    """The command line that reproduces this run (options at their defaults left out)."""
    parts = ["python", PROG]
    for flag, value in (
        ("--output-dir", args.output_dir), ("--seeds", args.seeds), ("--vocab", args.vocab),
        ("--steps", args.steps), ("--rules", args.rules), ("--scenarios", args.scenarios),
    ):  # fmt: skip
        if value is not None:
            parts += [flag, str(value)]
    parts += [flag for flag, on in (("--quick", args.quick), ("--no-figures", args.no_figures)) if on]
    return shlex.join(parts)


def _make_output(output: str, dry_run: bool = False) -> None:
    """Create the ``--output-dir`` directory now, before the simulation (which writes only at its end); a path
    that cannot be one raises ``ValueError`` naming it. ``dry_run``: check it only, create nothing."""
    from pathlib import Path

    from bandpo_lab._files import output_dir_problem

    problem = output_dir_problem(output, "--output-dir")
    if problem is not None:
        raise ValueError(problem)
    if dry_run:
        return
    try:
        Path(output).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"--output-dir {output!r} cannot be created: {err.strerror or err}") from None


def _plan(
    args: argparse.Namespace, config: MechanismConfig, scenarios: list[Scenario], rules: dict[str, ClipRule]
) -> int:
    """``--dry-run``'s plan: the grid of each scenario, the rules, the seeds and vocabulary, where it would write."""
    lines = [
        f"{len(scenarios)} scenario(s) x {len(rules)} rule(s) x {config.seeds} seeds, vocabulary {config.vocab}"
    ]
    for s in scenarios:
        steps = config.steps or s.steps
        lines.append(
            f"  {s.name}: learning rates {', '.join(f'{lr:g}' for lr in s.learning_rates)}, updates per batch "
            f"{', '.join(map(str, s.updates_per_batch))}, groups of {s.group_size}, {steps} steps"
        )
    lines.append(f"rules {', '.join(rules)}")
    lines.append(
        f"outputs tables{'' if args.no_figures else ' and figures'} in {args.output_dir}/ (results.md)"
    )
    print("\n".join([f"{PROG}: dry run: the plan (nothing simulated or written)", *lines]))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: the command line), check every input, run the grid; the exit status (2: a bad
    input, named on one line of stderr)."""
    from mechanism import MAX_VOCAB, SCENARIOS, MechanismConfig, quick, resolve_rules
    from mechanism_report import run_mechanism

    from bandpo.validation import check_int_in

    args = build_parser().parse_args(argv)

    try:
        for flag, value, low, high in (
            ("--seeds", args.seeds, 2, None),
            ("--vocab", args.vocab, 16, MAX_VOCAB),
            ("--steps", args.steps, 1, None),
        ):
            if value is not None:
                check_int_in(flag, value, low, high)
        try:
            rules = resolve_rules(_names(args.rules) if args.rules is not None else None)
        except ValueError as err:
            raise ValueError(f"--rules: {err}") from None
        if not rules:
            raise ValueError(f"--rules must name at least one clip rule, got {args.rules!r}")
        try:
            scenarios = [
                SCENARIOS.get(n)
                for n in (_names(args.scenarios) if args.scenarios is not None else SCENARIOS.names())
            ]
        except ValueError as err:
            raise ValueError(f"--scenarios: {err}") from None
        if not scenarios:
            raise ValueError(f"--scenarios must name at least one scenario, got {args.scenarios!r}")
        _make_output(args.output_dir, dry_run=args.dry_run)
    except ValueError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    if args.quick:
        scenarios = [quick(s) for s in scenarios]
    config = MechanismConfig(
        seeds=args.seeds or (8 if args.quick else 30),
        vocab=args.vocab or (256 if args.quick else 1024),
        steps=args.steps,
    )
    if args.dry_run:
        return _plan(args, config, scenarios, rules)
    command = _command(args)
    _, _, meta = run_mechanism(
        config,
        scenarios,
        rules,
        args.output_dir,
        progress=not args.no_progress,
        command=command,
        figures=not args.no_figures,
    )
    print(
        f"{PROG}: {len(scenarios)} scenario(s) x {len(rules)} rule(s) x {config.seeds} seeds in "
        f"{meta['wall_time_s']:.0f} s; tables and figures in {args.output_dir}/ (results.md)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
