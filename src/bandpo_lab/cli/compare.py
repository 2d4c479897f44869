"""``bandpo compare --config configs/compare-tiny.yaml [KEY=VALUE ...]``: several methods over several seeds, trained,
evaluated and reported (:mod:`bandpo_lab.experiments.compare`)."""

from __future__ import annotations

import argparse
import sys

from bandpo_lab.cli._args import add_dry_run, add_list_option

EPILOG = """\
compare config keys (YAML; KEY=VALUE overrides with dotted keys):
  output_dir          where runs and the report go (runs/<label>/seed<seed>/, baseline/, report/); not a
                      model's folder, nor the working or home directory holding other files
  train.config        the training recipe (relative to the compare config), e.g. tiny.yaml
  train.overrides     training keys for every run, e.g. {max_steps: 60}; override one: train.overrides.max_steps=8
  methods             list of {label, method, params, seeds}: a clip rule (method or clip_rule: band, params: its
                      parameters) or a TRL-native method (method: cispo / sapo / gspo, params: the GRPOConfig
                      fields it takes, e.g. {epsilon_high: 5.0}); default: grpo, clip_higher, dcpo, band-kl,
                      band-tv, band-chi2, adaptive_band; seeds: a method's own seeds, when it runs on fewer
  seeds               e.g. [0, 1, 2]
  reference           the label the others are compared against (default: grpo)
  eval.               k, ks, temperature, dataset, split, max_problems, verifier, prompt_column, answer_column,
                      batch_size, seed, max_new_tokens, precision, at_steps (also evaluate at these
                      optimizer steps with the same settings; the report's main metric becomes the late mean:
                      mean@k averaged over them and the final evaluation)
  curves.             every (held-out eval every N steps during training; 0: off), k, max_problems
  baseline            evaluate the starting policy (default: true)
  num_threads         OMP_NUM_THREADS of the training processes
  report.smooth       rolling-mean window of the training curves

Finished runs (results.json with the same config) are skipped; an interrupted run resumes from its last checkpoint.

examples:
  bandpo compare --config configs/compare-tiny.yaml
  bandpo compare --config configs/compare-tiny-full.yaml seeds=[0,1] output_dir=runs/cmp2
  bandpo compare --config configs/compare-tiny.yaml --report-only
  bandpo compare --config configs/compare-tiny.yaml --export docs/results/compare-tiny   # results, no models
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.add_argument(
        "--config",
        "-c",
        required=True,
        help="compare config YAML: a file (studies/study4/config.yaml), or a built-in recipe's name (compare-tiny)",
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="config overrides (dotted keys: eval.k=8, seeds=[0])",
    )
    add_list_option(
        parser,
        "--methods",
        default=None,
        help="comma-separated labels: run and report only these methods (default: all the config's)",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--report-only", action="store_true", help="train nothing; rebuild the report from the runs"
    )
    add_dry_run(
        mode,
        "the config and every run's training settings (as the trainer builds them, no model loaded)",
        "running anything",
    )
    mode.add_argument(
        "--export",
        metavar="DIR",
        default=None,
        help="train nothing; copy the compact results (evaluations, gzipped training logs, configs, report; no "
        "models) to DIR (new, empty or an earlier export), from which --report-only with output_dir=DIR rebuilds "
        "the report",
    )
    parser.add_argument(
        "--redo",
        action="store_true",
        help="retrain runs (finished or started) whose config differs from this one, from scratch: only what "
        "bandpo wrote of the earlier run is removed (its checkpoints, logs, results); other files in the run's "
        "folder stay, and are named",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def run(args: argparse.Namespace) -> int:
    from bandpo_lab._files import expand_path, output_dir_problem
    from bandpo_lab.config import recipe_note
    from bandpo_lab.experiments.compare import (
        CompareError,
        check_eval_data,
        export_results,
        load_compare_config,
        plan_runs,
        run_compare,
        validate_with_trainer,
    )
    from bandpo_lab.experiments.compare.plan import check_plans, output_dir_owner_problem

    try:
        config = load_compare_config(args.config, args.overrides)
        if args.export is not None:  # ~ and $VARS expanded once, as output_dir's: checked where it is written
            args.export = str(expand_path(args.export, "--export", CompareError))
        for name, path in (("output_dir", config.output_dir), ("--export", args.export)):
            problem = None if path is None else output_dir_problem(path, name)
            if problem is not None:
                raise CompareError(problem)
        problem = None if args.export else output_dir_owner_problem(config.output_dir)
        if problem is not None:
            raise CompareError(problem)
        if args.methods is not None:
            wanted = list(args.methods)
            labels = [m.label for m in config.methods]
            if not wanted:
                raise CompareError(
                    f"--methods must name at least one method label, got {args.methods.text!r}; labels: {', '.join(labels)}"
                )
            unknown = [w for w in wanted if w not in labels]
            if unknown:
                raise CompareError(
                    f"--methods: unknown label(s) {', '.join(unknown)}; labels: {', '.join(labels)}"
                )
            config.methods = [m for m in config.methods if m.label in wanted]
            if config.reference not in wanted:
                print(
                    f"bandpo compare: the reference {config.reference!r} is not among --methods: "
                    f"{config.methods[0].label!r} is the reference of this report"
                )
                config.reference = config.methods[0].label
        if args.export:
            files = export_results(config.output_dir, args.export)
            size = sum(f.stat().st_size for f in files)
            print(
                f"bandpo compare: exported {len(files)} files ({size / 1e6:.1f} MB) to {args.export}; rebuild "
                f"the report with: bandpo compare --config {args.config} output_dir={args.export} --report-only"
            )
            return 0
        if args.dry_run:
            plans = plan_runs(config)
            check_plans(config, plans, redo=args.redo)
            # the eval data, and every run's training config as the trainer will build it
            check_eval_data(config, plans)
            validate_with_trainer(plans, locked_ok=True, redo=args.redo)
            print(f"output_dir {config.output_dir}; reference {config.reference}; eval k={config.eval.k}")
            print(f"train.config: {recipe_note(config.train_config)}")
            for p in plans:
                print(
                    f"  {p.method.label:<16} seed {p.seed:<3} {p.status:<8} {p.method.method:<14} {p.run_dir}"
                )
            return 0
        run_compare(config, redo=args.redo, report_only=args.report_only, progress=not args.no_progress)
    except ValueError as err:  # CompareError, or a report of a directory without runs
        print(f"bandpo compare: error: {err}", file=sys.stderr)
        return 2
    if args.report_only:
        return 0
    unfinished = [p for p in plan_runs(config) if p.status != "done"]
    return 1 if unfinished else 0
