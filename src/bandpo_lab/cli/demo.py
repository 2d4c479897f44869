"""``bandpo demo``: warm-start (or reuse) the tiny countdown model, evaluate it on the held-out split, train it
with BandPO (``configs/tiny.yaml``), evaluate again and print a summary; ``--model smollm2-135m`` (or a model
directory) does the same with a real LLM on the ``arith`` task (``configs/smollm2-arith.yaml``, ``--steps`` steps).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
from pathlib import Path
from typing import Any

from bandpo_lab._files import RECIPES
from bandpo_lab.cli._args import add_dry_run, print_plan
from bandpo_lab.config import OVERRIDES_LABEL

DEFAULT_CONFIG = RECIPES / "tiny.yaml"
LLM_CONFIG = RECIPES / "smollm2-arith.yaml"
LLM_STEPS = 24
LLM_EVAL_PROBLEMS = 50


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        default=None,
        help="training recipe: a file or a built-in recipe's name (default: tiny; with --model, smollm2-arith)",
    )
    parser.add_argument(
        "--model",
        default=None,
        help="a real model instead of the tiny one: a built-in name (smollm2-135m) or a model directory",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help=f"RL steps with --model (default: {LLM_STEPS}; else the config's)",
    )
    parser.add_argument(
        "--k", type=int, default=None, help="samples per held-out problem (default: 8; --model: 4)"
    )
    parser.add_argument(
        "--eval-problems",
        type=int,
        default=None,
        help=f"held-out problems to score (default: 200; --model: {LLM_EVAL_PROBLEMS})",
    )
    parser.add_argument(
        "--output-dir",
        "-o",
        default=None,
        help="where the run goes (default: runs/demo; --model: runs/demo-llm)",
    )
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bars (the evaluations, the training bar, building the model)",
    )
    add_dry_run(
        parser,
        "the recipe, the overrides and the run (as bandpo train --dry-run does)",
        "building a model, evaluating or training",
    )
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="training config overrides")


_TRAIN_STATS = (
    "entropy_last",
    "clip_frac",
    "clip_frac_up",
    "clip_frac_down",
    "tail_share",
    "hi_mean",
    "steps",
)
"""The ``train/*`` numbers of ``run_summary`` the demo prints."""


def _metrics_summary(metrics_path: Path) -> dict[str, float]:
    """The run's training numbers as ``bandpo compare`` reports them (``run_summary``'s ``train/*``) and the first
    logged entropy; NaN where the run logged no value, ``{}`` without clipping statistics."""
    from bandpo_lab._files import read_jsonl
    from bandpo_lab.experiments.report.runs import RunData, entropy_values, run_summary

    rows = [r for r in read_jsonl(metrics_path) if "clip/frac" in r]  # the training steps' rows
    if not rows:
        return {}
    run = RunData(label="demo", clip_rule="?", params={}, seed=0, method_index=0, run_dir=metrics_path.parent,
                  metrics=rows)  # fmt: skip
    summary = run_summary(run)
    entropy = entropy_values(rows)
    stats = {"entropy_first": entropy[0] if entropy else None}
    stats.update({name: summary[f"train/{name}"] for name in _TRAIN_STATS})
    return {k: float("nan") if v is None else float(v) for k, v in stats.items()}


def _training_figure(out: Path, title: str) -> str:
    """Draw ``out/training.png`` (reward, entropy, clip fraction over the steps); returns its path, or why there is
    none (matplotlib missing)."""
    from bandpo._optional import MissingDependencyError
    from bandpo_lab._files import read_jsonl
    from bandpo_lab.experiments.report.figures import draw_run
    from bandpo_lab.training.layout import METRICS_FILE

    path = out / "training.png"
    try:
        drawn = draw_run(read_jsonl(out / METRICS_FILE), path, title)
    except MissingDependencyError as err:
        return f"none ({err})"
    return str(path) if drawn else "none (the run logged no reward, entropy or clipping)"


_BASELINE_SETS = ("method", "output_dir")
"""The override keys the GRPO baseline sets itself (a run's ``method=dcpo`` next to ``clip_rule=grpo`` is refused)."""


def _override_key(override: str) -> str:
    """The top-level key of a ``KEY=VALUE`` override (``clip_rule_kwargs.delta=0.1`` -> ``clip_rule_kwargs``)."""
    return override.partition("=")[0].strip().partition(".")[0]


def _baseline_command(config_file: str, overrides: list[str], output_dir: str) -> str:
    """The ``bandpo train`` command of the GRPO baseline: the demo's run without the overrides of the method, the
    output directory and the clip method's settings (``clip_rule_kwargs``, ``band_*``), which GRPO refuses."""
    from bandpo.integrations.trl_spec import TRL_NAMES

    dropped = {*_BASELINE_SETS, *(k for k, v in TRL_NAMES.items() if v not in ("total_steps", "diagnostics"))}
    kept = [o for o in overrides if _override_key(o) not in dropped]
    return shlex.join(
        ["bandpo", "train", "--config", config_file, *kept, "clip_rule=grpo", f"output_dir={output_dir}-grpo"]
    )


def _other_commands_run(output_dir: Path) -> str | None:
    """The command line of the run in ``output_dir`` when a command other than the demo made it (its
    ``run_info.json`` says: a ``bandpo train`` run, a comparison's, a notebook's), else ``None``: the demo replaces
    only an earlier demo's run."""
    from bandpo_lab._files import read_json_object
    from bandpo_lab.training.layout import RUN_INFO_FILE

    argv = read_json_object(output_dir / RUN_INFO_FILE).get("argv")
    if not isinstance(argv, list) or not argv:
        return None
    words = [str(word) for word in argv]
    command = next((word for word in words[1:] if not word.startswith("-")), None)
    return None if command == "demo" else shlex.join([Path(words[0]).name, *words[1:]])


_OUTPUT_DIR = re.compile(r"(?<![\w.-])output_dir(?![\w-])")
_MODEL_PATH = re.compile(r"(?<![\w.-])model\.path(?![\w-])")


def _flag_words(message: str, model_flag: bool) -> str:
    """A training config's error in the demo's words: the ``output_dir`` it sets from ``--output-dir`` (an
    ``output_dir`` override is refused) named ``--output-dir``, without its origin (``from the overrides``), and
    ``model.path`` named ``--model`` where ``--model`` set it (``model_flag``)."""
    if _OUTPUT_DIR.search(message):
        message = (
            re.sub(rf"(?:; )?output_dir: {OVERRIDES_LABEL}", "", message)
            .replace("(; ", "(")
            .replace(" ()", "")
        )
        message = message.removesuffix(f" ({OVERRIDES_LABEL})")
        message = _OUTPUT_DIR.sub("--output-dir", message)
    return _MODEL_PATH.sub("--model", message) if model_flag else message


def _evaluate(model_dir: Path, dataset: Any, k: int, max_new_tokens: int, progress: bool) -> dict[str, Any]:
    from bandpo_lab.eval.evaluate import evaluate_model_dir
    from bandpo_lab.eval.settings import EvalSettings

    settings = EvalSettings(k=k, ks=(1, k), temperature=1.0, max_new_tokens=max_new_tokens, progress=progress)
    return evaluate_model_dir(model_dir, [dataset], settings)["overall"]


def run(args: argparse.Namespace) -> int:
    from bandpo_lab._files import expand_path, output_dir_problem
    from bandpo_lab.cli.bounds import usage_error
    from bandpo_lab.cli.train import NO_PROGRESS
    from bandpo_lab.config import recipe_note
    from bandpo_lab.eval.datasets import load_eval_dataset
    from bandpo_lab.eval.errors import EvalError
    from bandpo_lab.eval.models import resolve_model_dir
    from bandpo_lab.training.config import ConfigError, load_train_config
    from bandpo_lab.training.layout import METRICS_FILE
    from bandpo_lab.training.preflight import cache_dir
    from bandpo_lab.training.run import foreign_files, prepare, train
    from bandpo_lab.training.tasks import TASKS, build_task_model

    for override in args.overrides:
        if _override_key(override) == "output_dir":
            usage_error(
                "demo",
                f"override {override!r} is not taken: the demo's run directory is set with --output-dir "
                "(default: runs/demo; --model: runs/demo-llm)",
            )
    real = args.model is not None and args.model != "tiny"
    recipe = LLM_CONFIG if real else DEFAULT_CONFIG
    if args.config is None and not recipe.is_file():
        usage_error(
            "demo",
            f"the demo's recipe {recipe} is missing from this install of bandpo (a clone's configs/, a wheel's "
            "bandpo_lab/recipes/): reinstall bandpo, or pass --config FILE",
        )
    config_file = args.config or str(recipe)
    output_dir = (
        args.output_dir if args.output_dir is not None else ("runs/demo-llm" if real else "runs/demo")
    )
    k = args.k if args.k is not None else (4 if real else 8)  # 0 is refused below, not read as unset
    n_problems = (
        args.eval_problems if args.eval_problems is not None else (LLM_EVAL_PROBLEMS if real else 200)
    )
    # the run's overrides, which the printed GRPO baseline repeats
    overrides = [f"model.path={args.model}"] if args.model is not None else []
    if real:
        overrides += [f"max_steps={args.steps if args.steps is not None else LLM_STEPS}", "save_steps=1000"]
    elif args.steps is not None:
        overrides.append(f"max_steps={args.steps}")
    overrides += args.overrides
    try:
        for flag, value in (("--k", k), ("--eval-problems", n_problems), ("--steps", args.steps)):
            if value is not None and (isinstance(value, bool) or value < 1):
                raise ConfigError(f"{flag} must be an integer >= 1, got {value!r}")
        # named --output-dir here: the config's checks would name the override output_dir this becomes
        path = expand_path(output_dir, "--output-dir", ConfigError) if output_dir.strip() else output_dir
        problem = output_dir_problem(path, "--output-dir")
        if problem is not None:
            raise ConfigError(problem)
        no_progress = NO_PROGRESS[: args.no_progress]  # the run's, not the printed baseline's
        config = load_train_config(config_file, [*overrides, f"output_dir={output_dir}", *no_progress])
        other = _other_commands_run(config.output_dir)
        if other is not None:
            raise ConfigError(
                f"--output-dir {output_dir!r} holds a run of another command ({other}): the demo replaces only "
                "an earlier demo's run; choose another --output-dir"
            )
        foreign = foreign_files(config.output_dir)  # prepare's words name train's output_dir and flags
        if foreign is not None:
            raise ConfigError(
                f"--output-dir {output_dir!r} holds files bandpo did not write ({foreign}): the demo writes only into "
                "a new or empty folder or an earlier demo's run; choose another --output-dir"
            )
        prepared = prepare(config, overwrite=True)
        cache = cache_dir(config)  # model.cache_dir, as train reads it: one cached model for both evaluations
    except ConfigError as err:
        usage_error("demo", _flag_words(str(err), args.model is not None))
    if config.data.task is None:
        usage_error(
            "demo",
            f"--config {config_file} names no data.task; the demo needs one of {', '.join(TASKS.names())}",
        )
    task = TASKS.get(config.data.task)
    kw = config.trainer_kwargs()
    new_tokens = int(kw.get("max_completion_length") or 16)
    if args.dry_run:
        model = f"the tiny model of task {task.name!r}" if config.model.uses_task_model else config.model.path
        return print_plan(
            "demo",
            "nothing built, evaluated or trained",
            [
                f"recipe: {recipe_note(config_file)}",
                f"[1/4] model {model}",
                f"[2/4] held-out evaluation before RL: {n_problems} problems of {task.name}/test, {k} samples "
                f"each, up to {new_tokens} new tokens",
                f"[3/4] RL with clip rule {kw.get('clip_rule')!r} for {kw.get('max_steps')} steps in {output_dir} "
                f"({len(prepared.problems)} prompts; an earlier demo run there is replaced)",
                "[4/4] held-out evaluation after RL",
            ],
        )
    if config.model.uses_task_model:
        print(f"[1/4] warm start of the tiny model for task {task.name!r} (cached after the first run)")
        model_dir = build_task_model(
            task.name,
            config.data.task_options or {},
            config.model.warm_start or {},
            cache,
            progress=not args.no_progress,
        )
    else:
        print(f"[1/4] model {config.model.path} (a built-in model is converted once, then cached)")
        try:
            model_dir = resolve_model_dir(str(config.model.path), cache_dir=cache)
        except EvalError as err:
            usage_error("demo", str(err))
    dataset = load_eval_dataset(
        task.name, split="test", task_options=config.data.task_options or {}, max_problems=n_problems
    )
    print(f"[2/4] held-out evaluation before RL ({k} samples per problem)")
    before = _evaluate(model_dir, dataset, k, new_tokens, not args.no_progress)
    print(f"[3/4] RL with clip rule {kw.get('clip_rule')!r} for {kw.get('max_steps')} steps")
    try:  # a rerun discards the earlier run's checkpoints, metrics and TensorBoard folders
        out = train(config, overwrite=True, prepared=prepared)
    except ConfigError as err:  # e.g. another run is using the output directory
        usage_error("demo", str(err))
    print("[4/4] held-out evaluation after RL")
    after = _evaluate(out, dataset, k, new_tokens, not args.no_progress)
    stats = _metrics_summary(out / METRICS_FILE)
    method = config.method or config.trainer.get("clip_rule", "band")
    figure = _training_figure(out, f"bandpo demo: {method} on {task.name}")
    lines = [
        "",
        "== bandpo demo: summary ==",
        f"held-out problems: {after.get('n_problems')}, {k} samples each at temperature 1.0",
        f"pass@1  before {100 * before['pass@1']:5.1f}%   after {100 * after['pass@1']:5.1f}%",
        f"pass@{k}  before {100 * before[f'pass@{k}']:5.1f}%   after {100 * after[f'pass@{k}']:5.1f}%",
        f"sampling entropy (nats/token)  before {before.get('entropy', float('nan')):.3f}"
        f"   after {after.get('entropy', float('nan')):.3f}",
    ]
    if stats:
        lines += [
            f"policy entropy during training: {stats['entropy_first']:.3f} -> {stats['entropy_last']:.3f}",
            f"clipped tokens (mean over steps): {100 * stats['clip_frac']:.2f}% "
            f"(up {100 * stats['clip_frac_up']:.2f}%, down {100 * stats['clip_frac_down']:.2f}%), "
            f"mean upper bound {stats['hi_mean']:.2f}",
            f"tail share {100 * stats['tail_share']:.1f}% (of the clipped tokens, those with p_old < 0.2, pooled "
            "over steps as in bandpo compare)",
        ]
    lines += [
        f"model: {out}",
        f"metrics: {out / METRICS_FILE} (TensorBoard: tensorboard --logdir {out})",
        f"figure: {figure}",
        f"compare with GRPO: {_baseline_command(config_file, overrides, output_dir)}",
    ]
    print("\n".join(lines))
    (out / "demo_summary.json").write_text(
        json.dumps({"before": before, "after": after, "training": stats}, indent=1)
    )
    return 0
