"""``bandpo plot-bounds``: the Figure-1-style figure (ratio bounds and Delta pi against p), a PNG by default."""

from __future__ import annotations

import argparse
from pathlib import Path

from bandpo.core import DIVERGENCES
from bandpo_lab.cli._args import add_deprecated_spelling, flag_message
from bandpo_lab.cli.bounds import add_band_options, check_delta_and_cap, check_listed, usage_error


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output",
        "-o",
        default="bounds.png",
        help="figure file to write; its suffix picks the format: .png, .pdf, .svg, ...; an existing file is replaced "
        "only when it is a figure bandpo wrote, and none is written into a model's folder (default: bounds.png)",
    )
    add_deprecated_spelling(parser, "--out", "--output")
    add_band_options(
        parser, ["kl", "tv", "chi2", "hellinger"], f"divergences to draw: {', '.join(DIVERGENCES.names())}"
    )


def run(args: argparse.Namespace) -> int:
    from bandpo_lab._files import expand_path, model_folder_problem, output_file_problem
    from bandpo_lab.plots import MARKED_FORMATS, default_rules, figure_formats, is_bandpo_figure, plot_bounds

    check_listed("plot-bounds", "--divergence", args.divergence, "divergence")
    cap = check_delta_and_cap("plot-bounds", args.delta, args.cap)
    try:  # ~ and $VARS expanded once, as every other command's paths: checked where it is written
        args.output = str(expand_path(args.output, "--output"))
    except ValueError as err:
        usage_error("plot-bounds", str(err))
    problem = output_file_problem(args.output, "--output") or model_folder_problem(
        args.output, "--output", "plot-bounds", is_file=True
    )
    if problem is not None:
        usage_error("plot-bounds", problem)
    output = Path(args.output)
    suffix = output.suffix
    formats = figure_formats()
    if suffix.lower().removeprefix(".") not in formats:
        usage_error(
            "plot-bounds",
            f"--output {args.output!r} must end in a figure suffix, one of "
            f"{', '.join('.' + f for f in formats)}; got {repr(suffix) if suffix else 'none'}",
        )
    if output.exists() and not is_bandpo_figure(output):  # a user's file: never replaced
        usage_error(
            "plot-bounds",
            f"--output {args.output!r} exists and is not a figure bandpo wrote (marked in "
            f"{', '.join('.' + f for f in MARKED_FORMATS)} files): choose another --output, or remove it first",
        )
    try:
        rules = default_rules(args.divergence, args.delta, cap)
    except ValueError as err:  # a rule's own "delta must ...": named as the flag the user typed
        usage_error("plot-bounds", flag_message(str(err), {"delta": "--delta", "cap": "--cap"}) or str(err))
    try:
        path = plot_bounds(args.output, rules)
    except OSError as err:
        usage_error("plot-bounds", f"--output {args.output!r} cannot be written: {err.strerror or err}")
    print(f"wrote {path}")
    return 0
