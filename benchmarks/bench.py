"""The bound solvers, the policy loss and a training step against baselines measured in the same run, on this
machine: the CPU (or GPU) speed measurement of bandpo, beside the package (``make bench``, ``make gpu-check``).

    python benchmarks/bench.py [--sizes 1048576,16777216] [--repeats 5] [--skip-train] [-o runs/bench.json]
    python benchmarks/bench.py --real-model        # one optimizer step of SmolLM2-135M, part by part (minutes)

Every figure is printed with its ratio to a baseline timed in the same run (:mod:`bench_loss`, :mod:`bench_train`,
:mod:`bench_llm`; timing: :mod:`bench_timing`, ``torch.utils.benchmark``); ``--output`` also writes the rows as JSON.
Needs the lab (``pip install -e ".[dev]"``: ``make setup``); verl for the comparison with verl's losses.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bandpo_lab.cli._args import HelpFormatter, add_deprecated_spelling, add_dry_run, add_list_option

PROG = "bench.py"
"""The name errors and the dry run's plan start with."""


def build_parser() -> argparse.ArgumentParser:
    """The command line (the options of the former ``bandpo bench``)."""
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter
    )
    add_arguments(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_list_option(parser, "--sizes", item=int, spaces=True, default=[1 << 20, 1 << 24], help="token counts")
    parser.add_argument(
        "--repeats",
        type=int,
        default=5,
        help="rounds per bound solver, the cases in turn, each round an untimed warm-up and a timed block of calls "
        "(torch.utils.benchmark; the 16M authors' bisection takes tens of seconds a call, so two calls a round); "
        "the loss, schedule and diagnostics sections take 6 times as many rounds",
    )
    parser.add_argument(
        "--accuracy-points", type=int, default=200_000, help="random p for the accuracy check"
    )
    add_list_option(
        parser,
        "--loss-shape",
        item=int,
        spaces=True,
        length=2,
        default=[64, 4096],
        metavar=("B", "T"),
        help="shape of the loss benchmark",
    )
    parser.add_argument("--skip-loss", action="store_true", help="skip the loss benchmark")
    add_list_option(
        parser,
        "--verl-shape",
        item=int,
        spaces=True,
        length=2,
        default=[64, 2048],
        metavar=("B", "T"),
        help="shape of the loss against verl's own (grpo, band, dppo_kl vs verl's vanilla and dppo_kl)",
    )
    parser.add_argument(
        "--skip-verl", action="store_true", help="skip the loss against verl's own and the diagnostics' cost"
    )
    parser.add_argument("--skip-train", action="store_true", help="skip the training-step benchmark (TRL)")
    parser.add_argument(
        "--skip-schedule",
        action="store_true",
        help="skip the radius-schedule benchmark (changing vs constant)",
    )
    parser.add_argument(
        "--real-model",
        action="store_true",
        help="run only the real-model section (SmolLM2-135M, minutes): one optimizer step of "
        "configs/smollm2-arith.yaml part by part against the matmul floor, float32 vs bf16, and two processes at "
        "one thread against one at two",
    )
    parser.add_argument(
        "--output",
        "-o",
        type=Path,
        default=None,
        help="also write the rows as JSON to this file (default: none)",
    )
    parser.add_argument(
        "--device",
        default="auto",
        help="where the bound solvers, the loss and the radius schedule are timed: auto (CUDA when available), cpu, "
        "cuda, cuda:1, ...; the KL accuracy, the diagnostics and the loss against verl run on the CPU",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars (stderr)")
    add_dry_run(
        parser,
        "the counts and shapes, the device, the training-step recipe and the output file",
        "timing or writing",
    )
    add_deprecated_spelling(parser, "--json", "--output")


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default: the command line), check every value before any timing (a bad one: argparse's
    usage and one line, exit 2), then run."""
    parser = build_parser()
    args = parser.parse_args(argv)
    problem = _argument_problem(args)
    if problem is None:
        problem = _device_problem(args)
    if problem is None and args.output is not None:
        from bandpo_lab._files import output_file_problem

        problem = output_file_problem(args.output, "--output")
    if problem is not None:  # before minutes of timing, which write only at the end
        parser.error(problem)
    if args.dry_run:
        return _plan(args)
    return run(args)


def run(args: argparse.Namespace) -> int:
    """Time every section ``args`` asks for, print the tables and write ``args.output``; returns the exit status."""
    import bench_loss as bench
    import torch
    from bench_train import bench_train_step

    sys.stdout.reconfigure(line_buffering=True)  # progress shows even when redirected to a file

    from bandpo_lab.provenance import provenance

    code = provenance(["verl"])
    dirty = {True: ", uncommitted changes", False: ""}.get(code["dirty"], ", dirty flag unknown")
    print(
        f"bandpo {code['bandpo']} (commit {code['commit'][:10]}{dirty}), torch {code['torch']}, verl {code['verl']}; "
        f"{torch.get_num_threads()} threads, float32 inputs, cap 10, delta 0.05; device {_device_name(args.device)}"
    )
    if args.real_model:
        return _run_real_model(args, code)
    progress = not args.no_progress
    rows = bench.bench_bounds(tuple(args.sizes), repeats=args.repeats, device=args.device, progress=progress)
    print(f"\n{'tokens':>9}  {'case':<38} {'ms/call':>10} {'x TV':>8} {'bisection/x':>12}")
    for r in rows:
        print(
            f"{r['n']:>9}  {r['case']:<38} {r['ms']:>10.2f} {r['x_tv']:>8.2f} {r['speedup_vs_bisection']:>12.1f}"
        )
    acc = bench.kl_accuracy(args.accuracy_points)
    print("\nKL accuracy vs float64 bisection, p in [1e-30, 1 - 1e-30], delta in {1e-3, 0.05, 1}:")
    for k, v in acc.items():
        print(f"  {k:<16} max relative error {v:.2e}")
    mem = bench.table_memory_bytes(torch.float32)
    print(
        f"KL table memory: {mem / 1e6:.2f} MB per (delta, device) in float32 (+ a float64 master on the CPU)"
    )
    loss_rows = (
        []
        if args.skip_loss
        else bench.bench_loss(
            *args.loss_shape, repeats=6 * args.repeats, progress=progress, device=args.device
        )
    )
    if loss_rows:
        print(
            f"\n{'case':<30} {'ms':>10} {'x grpo':>8}   (B={args.loss_shape[0]}, T={args.loss_shape[1]}, float32, fwd + bwd)"
        )
        for r in loss_rows:
            print(f"{r['case']:<30} {r['ms']:>10.2f} {r['x_grpo']:>8.3f}")
    schedule_rows = (
        []
        if args.skip_schedule
        else bench.bench_schedule(
            *args.loss_shape, repeats=6 * args.repeats, progress=progress, device=args.device
        )
    )
    if schedule_rows:
        print(
            f"\n{'case':<38} {'ms':>10} {'x constant':>10}   (B={args.loss_shape[0]}, T={args.loss_shape[1]}, float32; "
            "radius linear 0.2 -> 0.02, a new radius every call)"
        )
        for r in schedule_rows:
            print(f"{r['case']:<38} {r['ms']:>10.2f} {r['x_constant']:>10.3f}")
    diag_rows, verl_rows, verl_skipped = [], [], "--skip-verl"
    if not args.skip_verl:
        diag_rows = bench.bench_diagnostics(*args.verl_shape, rounds=6 * args.repeats, progress=progress)
        _print_diagnostics(diag_rows, args.verl_shape)
        verl_rows, verl_skipped = bench.bench_loss_vs_verl(
            *args.verl_shape, rounds=6 * args.repeats, progress=progress
        )
        _print_verl(verl_rows, verl_skipped, args.verl_shape)
    train_rows = [] if args.skip_train else bench_train_step(progress=progress)
    if train_rows:
        print(
            f"\n{'case':<30} {'ms/step':>10} {'x grpo':>8}   (tiny countdown model, tiny.yaml settings; "
            "whole generation rounds after the first, setup not timed; best of 2)"
        )
        for r in train_rows:
            print(f"{r['case']:<30} {r['ms']:>10.1f} {r['x_grpo']:>8.3f}")
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(
            json.dumps(
                {
                    "provenance": code,
                    "bounds": rows,
                    "kl_accuracy": acc,
                    "loss": loss_rows,
                    "schedule": schedule_rows,
                    "diagnostics": diag_rows,
                    "loss_vs_verl": verl_rows,
                    "loss_vs_verl_skipped": verl_skipped,
                    "train": train_rows,
                },
                indent=1,
            )
        )
    return 0


def _plan(args: argparse.Namespace) -> int:
    """``--dry-run``'s plan: each section with its sizes, or why it is skipped, and the file it would write."""

    def section(skipped: bool, flag: str, text: str) -> str:
        return f"skipped ({flag}): {text}" if skipped else text

    b, t = args.loss_shape
    vb, vt = args.verl_shape
    if args.real_model:
        lines = [
            "the real-model section alone (SmolLM2-135M, minutes): one optimizer step of configs/smollm2-arith.yaml "
            "part by part against the matmul floor, float32 vs bf16; two processes at one thread against one at two"
        ]
    else:
        lines = [
            f"bound solvers at {','.join(map(str, args.sizes))} tokens, {args.repeats} rounds per case, "
            f"device {args.device}",
            f"KL accuracy at {args.accuracy_points} random p",
            section(args.skip_loss, "--skip-loss", f"the loss, B={b}, T={t}, {6 * args.repeats} rounds"),
            section(
                args.skip_schedule,
                "--skip-schedule",
                f"the radius schedule, B={b}, T={t}, {6 * args.repeats} rounds",
            ),
            section(
                args.skip_verl,
                "--skip-verl",
                f"the diagnostics and the loss against verl's own, B={vb}, T={vt}, {6 * args.repeats} rounds (CPU)",
            ),
            section(args.skip_train, "--skip-train", "the training step of the tiny countdown model (TRL)"),
        ]
    lines.append(f"output {args.output}" if args.output is not None else "output: printed only (no --output)")
    print("\n".join([f"{PROG}: dry run: the plan (nothing timed or written)", *lines]))
    return 0


def _argument_problem(args: argparse.Namespace) -> str | None:
    """The first count or size that is not a positive integer, as one line naming the flag and the value; or the
    training-step benchmark's missing recipe (an install without the recipes)."""
    from bench_train import TINY_RECIPE

    from bandpo.validation import check_int_in

    counts = [("--repeats", args.repeats), ("--accuracy-points", args.accuracy_points)]
    counts += [("--sizes", n) for n in args.sizes]
    counts += [(f"--loss-shape {d}", n) for d, n in zip("BT", args.loss_shape)]
    counts += [(f"--verl-shape {d}", n) for d, n in zip("BT", args.verl_shape)]
    try:
        for flag, value in counts:
            check_int_in(flag, value, 1)
    except ValueError as err:
        return str(err)
    if not (args.skip_train or args.real_model or TINY_RECIPE.is_file()):
        return f"the training-step benchmark needs {TINY_RECIPE}, which this install of bandpo lacks; pass --skip-train"
    return None


def _device_problem(args: argparse.Namespace) -> str | None:
    """``--device`` checked (``bandpo_lab.eval.models.check_device``) and resolved in place (``auto`` -> cuda or cpu);
    the problem as one line naming the flag, or None."""
    from bandpo_lab.eval.models import EvalError, check_device

    try:
        args.device = check_device(args.device)
    except EvalError as err:
        return f"--device: {err}"
    return None


def _device_name(device: str) -> str:
    """``device`` with the GPU's name where it is a CUDA device."""
    import torch

    dev = torch.device(device)
    return f"{device} ({torch.cuda.get_device_name(dev)})" if dev.type == "cuda" else device


def _print_diagnostics(rows: list[dict], shape: list[int]) -> None:
    b, t = shape
    print(
        f"\ndiagnostics alone (B={b}, T={t}, float32, ragged mask; the loss's per-token terms): the fused pass against "
        "the per-metric masked means it replaced, best block of rounds of the cases in turn"
    )
    print(
        f"{'case':<22} {'wall ms':>9} {'naive ms':>9} {'x naive':>8} {'cpu ms':>9} {'naive ms':>9} {'x naive':>8}"
    )
    for r in rows:
        print(
            f"{r['case']:<22} {r['wall_ms']:>9.2f} {r['wall_naive_ms']:>9.2f} {r['wall_x_naive']:>8.2f} "
            f"{r['cpu_ms']:>9.2f} {r['cpu_naive_ms']:>9.2f} {r['cpu_x_naive']:>8.2f}"
        )


def _print_verl(rows: list[dict], skipped: str | None, shape: list[int]) -> None:
    """The loss against verl's own, or the one line saying why it was skipped."""
    if skipped:
        print(f"\nloss vs verl: skipped: {skipped}")
        return
    b, t = shape
    print(
        f"\nloss vs verl (B={b}, T={t}, float32, ragged mask, token-mean, fwd + bwd; bandpo with all its diagnostics, "
        "or at the level in parentheses, check_values=False): x verl = time / verl vanilla's time, best and median block of rounds of the cases in turn; cpu: "
        "this process's CPU time (not inflated by waits on a busy machine). Target: bandpo <= 1.3x verl vanilla."
    )
    print(
        f"{'case':<24} {'wall ms':>9} {'x verl':>7} {'x (med)':>8} {'cpu ms':>9} {'x verl':>7} {'x (med)':>8}"
    )
    for r in rows:
        print(
            f"{r['case']:<24} {r['wall_ms']:>9.2f} {r['wall_x_verl']:>7.2f} {r['wall_x_verl_median']:>8.2f} "
            f"{r['cpu_ms']:>9.2f} {r['cpu_x_verl']:>7.2f} {r['cpu_x_verl_median']:>8.2f}"
        )
    for dppo in (r for r in rows if r.get("rule") == "dppo_kl"):
        print(
            f"{dppo['case']} / verl dppo_kl: {dppo['wall_x_verl_dppo']:.2f}x wall, "
            f"{dppo['cpu_x_verl_dppo']:.2f}x cpu"
        )


def _run_real_model(args: argparse.Namespace, code: dict) -> int:
    """The real-model section alone (:mod:`bench_llm`)."""
    import bench_llm
    import torch

    from bandpo_lab.runtime import resolve_precision

    print(f"precision auto here: {resolve_precision('auto').describe()}; {torch.get_num_threads()} thread(s)")
    out = bench_llm.bench_real_step(progress=not args.no_progress)
    rates = out["rates"]
    print(
        "matmul (864 x 576 x 1536), GFLOP/s: "
        + ", ".join(f"{k} {v:.0f}" for k, v in rates.items())
        + f" ({rates['bfloat16'] / rates['float32']:.1f}x float32 in bfloat16)"
    )
    print(
        f"\none optimizer step of configs/smollm2-arith.yaml (per step: a round's generation and old log-probs "
        f"divided by its {bench_llm.RECIPE['steps_per_generation']} steps); floor = matrix FLOPs / the matmul rate "
        "of the part's dtype"
    )
    print(f"{'precision':<9} {'part':<20} {'ms':>9} {'GFLOP':>7} {'floor ms':>9} {'x floor':>8} {'share':>7}")
    for r in out["rows"]:
        x = f"{r['x_floor']:.2f}" if r["x_floor"] else "-"
        print(
            f"{r['precision']:<9} {r['part']:<20} {r['ms']:>9.1f} {r['gflop']:>7.1f} {r['floor_ms']:>9.1f} "
            f"{x:>8} {100 * r['share']:>6.2f}%"
        )
    steps = out["steps"]
    for name, step in steps.items():
        print(
            f"{name}: transformers' generate takes {step['generate_ms']:.0f} ms per step for the same completions, "
            f"{step['generate_x_sampler']:.2f}x the sampler's (one prefill per distinct prompt)"
        )
    if "bf16" not in steps:
        print("bf16: not timed, this CPU has no native bf16 (bandpo refuses precision bf16 here)")
    if "float32" in steps and "bf16" in steps:
        print(
            f"steps per hour: float32 {steps['float32']['steps_per_hour']:.0f}, bf16 {steps['bf16']['steps_per_hour']:.0f} "
            f"({steps['bf16']['steps_per_hour'] / steps['float32']['steps_per_hour']:.2f}x)"
        )
    pair = bench_llm.side_by_side()
    print(
        f"forward + backward passes per second, both cores: two processes at one thread "
        f"{pair['two_processes_one_thread']:.3f}, one process at two threads {pair['one_process_two_threads']:.3f} "
        f"({pair['ratio']:.2f}x)"
    )
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps({"provenance": code, **out, "side_by_side": pair}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
