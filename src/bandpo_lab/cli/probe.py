"""``bandpo probe``: the clip rules on a real model's own tokens (:mod:`bandpo_lab.experiments.llm_probe`); writes
``results.json``, ``results.md`` and ``probe.png``."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bandpo_lab.cli._args import (
    add_deprecated_spelling,
    add_dry_run,
    add_list_option,
    field_flags,
    flag_message,
    print_plan,
    progress_bars,
    yaml_mapping,
)

if TYPE_CHECKING:
    from bandpo_lab.experiments.llm_probe import ProbeConfig

EPILOG = """\
examples:
  bandpo probe --model smollm2-135m --dataset arith --output-dir runs/probe-smollm2  # 4-5 min on 2 idle CPU cores
  bandpo probe --model runs/my-model --dataset data/test.jsonl --rules grpo,band --batches 5 --lr 3e-5
"""


ARITH_DEFAULT = "{digits: [1], n_train: 155, n_test: 100}"
"""The probe's task options for ``arith`` when none are given: one-digit problems (SmolLM2-135M answers 17% of
them, so most groups of 8 have a right and a wrong answer; with two digits most groups are all wrong)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from bandpo_lab.experiments.llm_probe import DEFAULT_RULES, ProbeConfig

    defaults = ProbeConfig()
    parser.epilog = EPILOG
    parser.add_argument("--model", required=True, help="a model directory or a built-in model (smollm2-135m)")
    parser.add_argument(
        "--dataset", default="arith", help="a built-in task or a data file/directory (default: arith)"
    )
    parser.add_argument(
        "--task-options",
        default=None,
        help="the task's options as YAML (JSON reads too), e.g. '{digits: [1, 2]}' (default for arith: "
        f"'{ARITH_DEFAULT}', problems with enough right answers for the groups to carry signal)",
    )
    parser.add_argument("--split", default=defaults.split, help="split the prompts come from")
    add_list_option(
        parser,
        "--rules",
        default=list(DEFAULT_RULES),
        help=f"comma-separated clip rules, each at its default settings (default: {','.join(DEFAULT_RULES)})",
    )
    parser.add_argument("--batches", type=int, default=defaults.batches, help="batches (seeds)")
    parser.add_argument("--prompts", type=int, default=defaults.prompts, help="prompts per batch")
    parser.add_argument("--group-size", type=int, default=defaults.group_size, help="completions per prompt")
    parser.add_argument("--updates", type=int, default=defaults.updates, help="updates K per batch and rule")
    parser.add_argument(
        "--minibatches",
        type=int,
        default=defaults.minibatches,
        help="split each batch into this many mini-batches, update k taking mini-batch k mod this (--updates equal "
        "to it: each completion used once, as the paper's scripts; twice it: each used twice, as Study 4); "
        f"default {defaults.minibatches}: every update takes the whole batch",
    )
    parser.add_argument("--lr", type=float, default=defaults.learning_rate, help="AdamW learning rate")
    parser.add_argument(
        "--max-new-tokens", type=int, default=defaults.max_new_tokens, help="tokens sampled per completion"
    )
    parser.add_argument(
        "--temperature", type=float, default=defaults.temperature, help="sampling temperature"
    )
    parser.add_argument("--seed", type=int, default=defaults.seed, help="first batch's seed")
    parser.add_argument(
        "--precision",
        default=defaults.precision,
        help="CPU precision: auto (bf16 where the CPU has native bf16 and the model is large enough), float32 or "
        f"bf16; the log-probs of the ratio stay float32 (default: {defaults.precision})",
    )
    parser.add_argument(
        "--attn-implementation",
        default="auto",
        help="attention the model is loaded with: auto (a training run's model.attn_implementation, else "
        "transformers' default), eager, sdpa, ... (default: auto)",
    )
    parser.add_argument(
        "--output-dir",
        "-o",
        default="runs/probe",
        help="output directory; an earlier probe's results there are replaced, another's results.json, "
        "results.md or probe.png refused, and so is a model's folder, or the working or home directory holding "
        "other files (default: runs/probe)",
    )
    add_deprecated_spelling(parser, "--output", "--output-dir")
    parser.add_argument("--no-figures", action="store_true", help="write the tables only")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_dry_run(
        parser,
        "the flags, the dataset (every problem scorable), the model directory (its files, no weights loaded; a "
        "built-in model is not converted) and the output directory",
        "loading the model, sampling, updating or writing",
    )


def run(args: argparse.Namespace) -> int:
    from bandpo._optional import MissingDependencyError, pyplot
    from bandpo_lab._files import expand_path, model_folder_problem, output_dir_problem
    from bandpo_lab.cli.bounds import usage_error
    from bandpo_lab.eval.errors import EvalError
    from bandpo_lab.eval.models import ATTENTION_AUTO
    from bandpo_lab.experiments.llm_probe import ProbeConfig
    from bandpo_lab.training.preflight import attention_problem

    flags = field_flags(ProbeConfig, learning_rate="--lr")
    try:
        text = args.task_options
        if text is None and args.dataset == "arith":
            text = ARITH_DEFAULT
        options = yaml_mapping("--task-options", text, "{digits: [1]}") if text else None
        if not args.rules:
            raise ValueError(f"--rules must name at least one clip rule, got {args.rules.text!r}")
        values = {name: getattr(args, flag[2:].replace("-", "_")) for name, flag in flags.items()}
        try:
            config = ProbeConfig(**{**values, "rules": tuple(args.rules)})
        except ValueError as err:  # "<field> must be ...", or a clip rule's own "unknown clip rule ..."
            raise ValueError(flag_message(str(err), flags) or f"--rules: {err}") from None
        # before the work, which writes only at its end; $VARS and ~ read as eval and train read them
        args.output_dir = str(expand_path(args.output_dir, "--output-dir", ValueError))
        problem = (
            output_dir_problem(args.output_dir, "--output-dir")
            or model_folder_problem(args.output_dir, "--output-dir", "probe", model=args.model)
            or _shared_folder(args.output_dir)
            or _outputs_taken(args.output_dir)
        )
        if args.attn_implementation != ATTENTION_AUTO:  # else found only once the model had loaded
            problem = problem or attention_problem(args.attn_implementation, "--attn-implementation")
        if problem is None:  # the model loads on the GPU where there is one
            import torch

            from bandpo_lab.runtime import bf16_problem

            problem = bf16_problem(config.precision, "--precision", on_gpu=torch.cuda.is_available())
        if problem is not None:
            raise ValueError(problem)
        if not args.no_figures:
            pyplot()
    except ValueError as err:
        usage_error("probe", str(err))
    except MissingDependencyError as err:
        usage_error("probe", f"{err}; or pass --no-figures")
    try:
        if args.dry_run:
            return _plan(args, config, options)
        with progress_bars(not args.no_progress):  # the model's loading bar too
            return _run(args, config, options)
    except EvalError as err:
        usage_error("probe", str(err))


OUTPUT_FILES = ("results.json", "results.md", "probe.png")
"""The files the probe writes into ``--output-dir``."""

RESULT_KEYS = frozenset({"config", "batches", "summary", "model_dir"})
"""Keys of the probe's ``results.json`` (an earlier probe's files are replaced)."""


def _earlier_probe(output_dir: str) -> bool:
    """Whether ``output_dir`` holds an earlier probe's ``results.json``."""
    from bandpo_lab._files import read_json_object

    return read_json_object(Path(output_dir) / "results.json").keys() >= RESULT_KEYS


def _shared_folder(output_dir: str) -> str | None:
    """Why ``output_dir`` is no folder for the probe's files: the working or home directory (or one above them)
    holding other files, unless an earlier probe's (:func:`bandpo_lab._files.shared_folder_problem`)."""
    from bandpo_lab._files import shared_folder_problem

    return None if _earlier_probe(output_dir) else shared_folder_problem(output_dir, "--output-dir", "probe")


def _outputs_taken(output_dir: str) -> str | None:
    """Why the probe's :data:`OUTPUT_FILES` cannot go into ``output_dir``: it holds one of them that no earlier probe
    wrote (its ``results.json`` is not a probe's: a comparison's report, a user's), or ``None``."""
    out = Path(output_dir)
    taken = [name for name in OUTPUT_FILES if (out / name).exists()]
    if not taken or _earlier_probe(output_dir):
        return None
    return (
        f"--output-dir {output_dir!r} holds {', '.join(taken)}, not an earlier bandpo probe's results: the probe "
        "replaces only its own; choose another --output-dir"
    )


def _dataset(args: argparse.Namespace, config: ProbeConfig, options: dict[str, Any] | None) -> Any:
    """The probe's problems (``--dataset``), each checked scorable by its verifier before the model loads."""
    from bandpo_lab.cli.bounds import usage_error
    from bandpo_lab.eval.datasets import load_eval_dataset, raw_prompt_text
    from bandpo_lab.eval.scorers import get_scorer

    dataset = load_eval_dataset(args.dataset, split=config.split, task_options=options)
    if len(dataset.problems) < config.prompts:
        usage_error(
            "probe",
            f"--prompts {config.prompts} is more than the {len(dataset.problems)} problems of {dataset.name}",
        )
    _, check = get_scorer(dataset.verifier)
    for i, problem in enumerate(dataset.problems):  # before the model loads: a bad row fails in one line
        try:
            check(raw_prompt_text(problem["prompt"]), problem.get("answer"))
        except ValueError as err:
            usage_error(
                "probe",
                f"problem {i} of {dataset.name} cannot be scored by verifier {dataset.verifier!r}: {err}",
            )
    return dataset


def _plan(args: argparse.Namespace, config: ProbeConfig, options: dict[str, Any] | None) -> int:
    """``--dry-run``'s plan: the model, the problems, the batches and updates, the files it would write."""
    from bandpo_lab.eval.models import resolve_model_dir

    dataset = _dataset(args, config, options)
    model_dir = resolve_model_dir(args.model, [args.dataset], options, build=False)
    shown = model_dir or f"the built-in model {args.model!r} (converted and cached on first use)"
    files = ["results.json", "results.md", *(["probe.png"] if not args.no_figures else [])]
    return print_plan(
        "probe",
        "no model loaded, nothing sampled, updated or written",
        [
            f"model {shown}",
            f"dataset {dataset.name}: {len(dataset.problems)} problems, verifier {dataset.verifier}"
            + (f", task options {options}" if options else ""),
            f"{config.batches} batch(es) of {config.prompts} prompts x {config.group_size} completions, up to "
            f"{config.max_new_tokens} new tokens at temperature {config.temperature:g}, seeds from {config.seed}",
            f"rules {', '.join(config.rules)}: {config.updates} update(s) per batch and rule in "
            f"{config.minibatches} mini-batch(es), lr {config.learning_rate:g}, precision {config.precision}",
            f"outputs {', '.join(files)} in {args.output_dir}/",
        ],
    )


def _run(args: argparse.Namespace, config: ProbeConfig, options: dict[str, Any] | None) -> int:
    import torch

    from bandpo_lab.eval.datasets import prompt_texts, raw_prompt_text
    from bandpo_lab.eval.models import load_model, loaded_attention, resolve_model_dir
    from bandpo_lab.eval.scorers import get_scorer
    from bandpo_lab.experiments.llm_probe import run_probe
    from bandpo_lab.experiments.llm_probe_report import figure, markdown
    from bandpo_lab.provenance import code_changed, provenance
    from bandpo_lab.runtime import precision_for

    dataset = _dataset(args, config, options)
    score_fn, _ = get_scorer(dataset.verifier)
    model_dir = resolve_model_dir(args.model, [args.dataset], options)
    model, tokenizer = load_model(
        model_dir,
        device="cpu" if not torch.cuda.is_available() else "auto",
        dtype="float32",
        attn_implementation=args.attn_implementation,
    )
    texts, _ = prompt_texts(dataset, tokenizer)

    def score(i: int, completion: str) -> float:
        problem = dataset.problems[i]
        correct, _ = score_fn(raw_prompt_text(problem["prompt"]), completion, problem.get("answer"))
        return 1.0 if correct else 0.0

    print(f"bandpo probe: precision  {precision_for(config.precision, model).describe()}", file=sys.stderr)
    code = provenance()  # the code that runs the probe, recorded before it runs
    result = run_probe(
        model, tokenizer, dataset.problems, texts, score, config, progress=not args.no_progress
    )
    changed = code_changed(code, provenance())
    command = shlex.join(["bandpo", "probe", *sys.argv[2:]]) if sys.argv[1:2] == ["probe"] else None
    result.update(
        {"model": str(args.model), "model_dir": str(model_dir), "dataset": dataset.name, "command": command,
         "attn_implementation": loaded_attention(model),
         "provenance": code, "checkout_changed_during_run": changed}
    )  # fmt: skip
    if changed is True:
        print("bandpo probe: warning: the checkout's code changed while the probe ran (provenance is its start)",
              file=sys.stderr)  # fmt: skip
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(result, indent=1) + "\n")
    title = f"bandpo probe: {args.model} on {dataset.name}, K={config.updates}, lr={config.learning_rate:g}"
    (out / "results.md").write_text(markdown(result, title))
    if not args.no_figures:
        figure(result, out / "probe.png")
    print(markdown(result, title))
    print(f"bandpo probe: {config.batches} batch(es) x {len(config.rules)} rule(s) in {result['wall_time_s']:.0f} s; "
          f"results in {out}/")  # fmt: skip
    return 0
