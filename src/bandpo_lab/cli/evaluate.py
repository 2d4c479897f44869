"""``bandpo eval --model DIR [--dataset countdown | FILE ...] [--k 32] [--ks 1,4,32] ...``: samples ``k`` answers per
problem, prints mean@k, pass@j, best@k and maj@k per dataset and overall, and writes them to ``--output``."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from bandpo_lab.cli._args import (
    add_dry_run,
    add_list_option,
    field_flags,
    flag_message,
    print_plan,
    progress_bars,
    yaml_mapping,
)
from bandpo_lab.runtime.seeds import check_seed
from bandpo_lab.runtime.threads import THREADS_PER_CPU, check_threads

EPILOG = """\
datasets:
  countdown             the built-in task's test split (--split train for the training puzzles); the task options
                        come from the run's train_config.yaml when --model is a training run (or a checkpoint of one)
  FILE.jsonl|.json|.parquet, or a directory with <split>*.<ext> files: scored with --verifier (dapo: the last
                        'Answer:' line; boxed: the last \\boxed{}), columns --prompt-column / --answer-column

output JSON: {"model", "settings", "datasets": {name: metrics}, "overall": metrics, "wall_time_s"}; metrics are
n_problems, n_samples, mean@k, pass@j, best@k, maj@k, n_unparsed (samples without an extractable answer),
n_unparsed_ground_truth (problems left out: the verifier cannot parse their answer; a dataset with no problem
it can parse is refused before any model loads, --dry-run too), entropy, mean_length, truncated_frac.

output files: --output and --save-samples are two files, never one; neither is written into a folder holding a
  model (config.json + weights: the model evaluated, a folder inside it, another model's) but the default
  <model>/eval_results.json, and neither replaces an existing file that is not empty or an earlier bandpo eval
  output (a results JSON, a samples JSONL): refused before any work

examples:
  bandpo eval --model runs/tiny --dataset countdown --k 32
  bandpo eval --model runs/tiny/checkpoint-200 --k 8 --ks 1,2,8 --temperature 0.6
  bandpo eval --model /models/qwen --dataset aime24.jsonl --verifier dapo --answer-column solution --vllm
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from bandpo_lab.eval.scorers import verifier_names
    from bandpo_lab.training.sections import DTYPES

    parser.epilog = EPILOG
    parser.add_argument(
        "--model",
        "-m",
        required=True,
        help="model directory (a training run's output_dir or a checkpoint-N in it), a built-in model (e.g. "
        "smollm2-135m, converted and cached on first use), or 'tiny': the built-in task's cached warm-started model",
    )
    parser.add_argument(
        "--dataset",
        "-d",
        action="append",
        default=None,
        help="a built-in task (countdown) or a JSONL / JSON / parquet file or directory; repeat for several "
        "(default: countdown)",
    )
    parser.add_argument("--split", default="test", help="task split, or file prefix in a directory")
    parser.add_argument(
        "--verifier",
        choices=verifier_names(),
        default=None,
        help="answer checker (default: the task's own, dapo for files)",
    )
    parser.add_argument("--prompt-column", default="prompt", help="prompt column of the files")
    parser.add_argument(
        "--answer-column", default="answer", help="ground-truth column (dots for nested keys)"
    )
    parser.add_argument(
        "--prompt-template", default=None, help="format string with {prompt} applied to prompts"
    )
    parser.add_argument("--system-prompt", default=None, help="system message (chat) or prefix line")
    parser.add_argument(
        "--chat-template",
        choices=("auto", "always", "never"),
        default="auto",
        help="use the tokenizer's chat template",
    )
    parser.add_argument(
        "--task-options",
        default=None,
        help="the task's options as YAML (JSON reads too), e.g. '{n_test: 100}': they change the training run's "
        "(default: the run's, else the task's defaults); a test split that would then hold problems of the run's "
        "training split is refused",
    )
    parser.add_argument(
        "--max-problems", type=int, default=None, help="first N problems of each dataset (default: all)"
    )
    parser.add_argument("--k", type=int, default=32, help="samples per problem")
    add_list_option(
        parser,
        "--ks",
        default=None,
        help="pass@j values, comma-separated, each <= k ('k' for k) (default: 1,4,k)",
    )
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help="new tokens per answer (default: the task's answer length where every dataset is a built-in task that "
        "has one, arith: 16; else the model's generation config, else 1024)",
    )
    parser.add_argument("--batch-size", type=int, default=64, help="prompts per generate call")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed, in [0, 2**32 - 1]")
    parser.add_argument("--n-bootstrap", type=int, default=1000, help="best@k resamples")
    parser.add_argument("--vllm", action="store_true", help="sample with vLLM (must be installed)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help=f"torch CPU threads, at most {THREADS_PER_CPU} per CPU core (1 is fastest on a busy machine; default: "
        "torch's)",
    )
    parser.add_argument(
        "--dtype",
        default="auto",
        choices=DTYPES,
        help="dtype the model is loaded in (auto: its config's)",
    )
    parser.add_argument(
        "--attn-implementation",
        default="auto",
        help="attention the model is loaded with: auto (the training run's model.attn_implementation, else "
        "transformers' default, sdpa for most models; a saved model does not record it), eager, sdpa, ... "
        "(default: auto)",
    )
    parser.add_argument(
        "--precision",
        default="auto",
        help="CPU sampling precision: auto (bf16 where the CPU has native bf16 and the model is large enough), "
        "float32 or bf16",
    )
    parser.add_argument(
        "--output", "-o", default=None, help="JSON results file (default: <model>/eval_results.json)"
    )
    parser.add_argument("--save-samples", default=None, help="also write every completion to this JSONL file")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_dry_run(
        parser,
        "the flags, the model directory (its files, no weights loaded; a built-in or tiny model is not built), the "
        "datasets and the output files",
        "loading the model, sampling or writing",
    )


def _check_outputs(output: str | Path | None, samples: str | None, model: str | Path | None) -> None:
    """``EvalError`` where :func:`bandpo_lab.eval.outputs.outputs_problem` refuses the output files."""
    from bandpo_lab.eval.errors import EvalError
    from bandpo_lab.eval.outputs import outputs_problem

    problem = outputs_problem({"--output": output, "--save-samples": samples}, model)
    if problem is not None:
        raise EvalError(problem)


def _check_datasets(args: argparse.Namespace, specs: list[str], options: dict[str, Any] | None) -> None:
    """The dataset flags that need no model: ``--max-problems``, ``--dataset`` with ``--split`` and
    ``--task-options`` (only with a built-in task among the datasets). Raises ``EvalError`` naming the flag."""
    from bandpo.validation import check_int_in
    from bandpo_lab.eval.datasets import check_eval_specs, task_options_for
    from bandpo_lab.eval.errors import EvalError
    from bandpo_lab.training.tasks import TASKS

    if args.max_problems is not None:
        check_int_in("--max-problems", args.max_problems, 1, error=EvalError)
    tasks = check_eval_specs(specs, split=args.split)
    if args.task_options is not None and not tasks:
        raise EvalError(
            f"--task-options {args.task_options!r} applies to a built-in task ({', '.join(TASKS.names())}), and "
            f"no --dataset is one: {', '.join(map(repr, specs))} (files take no task options)"
        )
    for task in dict.fromkeys(tasks) if options is not None else ():
        task_options_for(task, options)  # an unknown key or a value the task refuses, before the model


def _check_scorable(args: argparse.Namespace, specs: list[str], datasets: list[Any]) -> None:
    """``EvalError`` for a dataset none of whose problems the verifier can score (every ground truth unparsable or
    missing: a wrong ``--answer-column`` or ``--verifier``), naming the ``--dataset`` and the first one."""
    from bandpo_lab.eval.datasets import unscorable_reason
    from bandpo_lab.eval.errors import EvalError
    from bandpo_lab.eval.scorers import TASK_SCORERS

    for spec, dataset in zip(specs, datasets):
        reason = unscorable_reason(dataset)
        if reason is not None:
            column = "--prompt-column" if dataset.verifier in TASK_SCORERS else "--answer-column"
            now = args.prompt_column if dataset.verifier in TASK_SCORERS else args.answer_column
            raise EvalError(
                f"--dataset {spec!r}: {reason}; nothing would be scored: check {column} (now {now!r}) and "
                f"--verifier (now {dataset.verifier})"
            )


UNPARSED_WARNING_SHARE = 0.9
"""A dataset whose verifier extracts no answer from more than this share of the samples gets a warning: its
accuracy is then more likely the verifier's than the model's."""


def unparsed_warnings(results: dict[str, Any]) -> list[str]:
    """The warnings of ``results``, per dataset: problems left out for a ground truth the verifier cannot parse,
    and more than :data:`UNPARSED_WARNING_SHARE` of the samples unparsed (with the hint to check ``--verifier``)."""
    from bandpo_lab.eval.scorers import verifier_names

    lines = []
    for name, metrics in results["datasets"].items():
        bad = metrics.get("n_unparsed_ground_truth", 0)
        if bad:
            lines.append(
                f"warning: {name}: {bad} of {bad + metrics['n_problems']} problems left out: the {metrics['verifier']} "
                "verifier cannot parse their ground-truth answer (n_unparsed_ground_truth)"
            )
        n, unparsed = metrics.get("n_samples") or 0, metrics.get("n_unparsed") or 0
        if n and unparsed > UNPARSED_WARNING_SHARE * n:
            lines.append(
                f"warning: {name}: the {metrics['verifier']} verifier found no answer in {unparsed} of {n} samples "
                f"(n_unparsed), which all score as wrong: check --verifier ({', '.join(verifier_names())}; default: "
                "a built-in task's own, dapo for files)"
            )
    return lines


def _plan(
    args: argparse.Namespace, model: Path | None, output: Path | None, datasets: list[Any], settings: Any
) -> int:
    """``--dry-run``'s plan: the model, each dataset's problems, the sampling, the files it would write."""
    if model is not None:
        shown = str(model)
    elif args.model == "tiny":
        shown = "tiny: the built-in task's warm-started model (built and cached on first use)"
    else:
        shown = f"the built-in model {args.model!r} (converted and cached on first use)"
    length = (
        f"up to {settings.max_new_tokens} new tokens"
        if settings.max_new_tokens
        else "new tokens as the model's generation config says (else up to 1024)"
    )
    where = str(output) if output is not None else "eval_results.json in the model's folder"
    return print_plan(
        "eval",
        "no model loaded, nothing sampled or written",
        [
            f"model {shown}",
            *(
                f"dataset {d.name}: {len(d.problems)} problems, verifier {d.verifier} ({d.source})"
                for d in datasets
            ),
            f"sampling: {settings.k} per problem at temperature {settings.temperature:g}, {length}, "
            f"{settings.backend} backend, device {args.device}; pass@{','.join(map(str, settings.ks))}",
            f"results {where}" + (f"; samples {args.save_samples}" if args.save_samples else ""),
        ],
    )


def run(args: argparse.Namespace) -> int:
    with progress_bars(not args.no_progress):  # transformers' bars too: building or loading the model
        return _run(args)


def _settings(args: argparse.Namespace) -> Any:
    """The run's ``EvalSettings``; a bad value's error names its flag (``--batch-size``), not the field."""
    from bandpo_lab.eval.errors import EvalError
    from bandpo_lab.eval.settings import EvalSettings

    # before EvalSettings, whose message also allows None, which no flag gives
    check_seed("--seed", args.seed, error=EvalError)
    try:
        return EvalSettings(
            k=args.k,
            ks=None if args.ks is None else args.ks.text,  # EvalSettings reads 'k' and names what was typed
            temperature=args.temperature,
            max_new_tokens=args.max_new_tokens,
            batch_size=args.batch_size,
            seed=args.seed,
            n_bootstrap=args.n_bootstrap,
            backend="vllm" if args.vllm else "transformers",
            precision=args.precision,
            progress=not args.no_progress,
        )
    except EvalError as err:
        message = flag_message(str(err), field_flags(EvalSettings))
        if message is None:
            raise
        raise EvalError(message) from None


def _run(args: argparse.Namespace) -> int:
    from bandpo_lab._files import expand_path, write_json
    from bandpo_lab.eval.backends import VLLM_MISSING
    from bandpo_lab.eval.datasets import resolve_eval_datasets, task_answer_length
    from bandpo_lab.eval.errors import EvalError
    from bandpo_lab.eval.evaluate import evaluate_model_dir, format_table
    from bandpo_lab.eval.models import ATTENTION_AUTO, check_device, resolve_model_dir
    from bandpo_lab.eval.outputs import DEFAULT_RESULTS
    from bandpo_lab.runtime import bf16_problem
    from bandpo_lab.training.preflight import attention_problem
    from bandpo_lab.training.sections import prompt_template_problem

    specs = args.dataset or ["countdown"]
    try:
        settings = _settings(args)
        options = None
        if args.task_options is not None:
            try:
                options = yaml_mapping("--task-options", args.task_options, "{n_test: 100}")
            except ValueError as err:
                raise EvalError(str(err)) from None
        device = check_device(args.device)  # before the model and the datasets load
        # each failed only once the model had loaded (and formatted the prompts)
        problem = prompt_template_problem(args.prompt_template, "--prompt-template")
        if settings.backend == "vllm" and importlib.util.find_spec("vllm") is None:  # dry run too
            problem = problem or VLLM_MISSING
        if settings.backend == "transformers":
            problem = problem or bf16_problem(settings.precision, "--precision", on_gpu=device != "cpu")
        if args.attn_implementation != ATTENTION_AUTO:  # auto: the run's, checked as the run's config was
            problem = problem or attention_problem(args.attn_implementation, "--attn-implementation")
        if problem is not None:
            raise EvalError(problem)
        if args.threads is not None:
            check_threads("--threads", args.threads, EvalError)
        _check_datasets(args, specs, options)  # before the model, which "tiny" may warm-start for minutes
        # the files named on the command line, before the model; the default one (in the model's folder) after it
        local = expand_path(args.model, "--model", EvalError)  # a folder; not yet a built-in or tiny model
        _check_outputs(args.output, args.save_samples, local if local.is_dir() else None)
        # a folder is checked now (a wrong path fails fast); a built-in or tiny model (None) is converted or built
        # only after the datasets passed their checks, and never on a dry run
        model = resolve_model_dir(args.model, specs, options, build=False)
        # $VARS and ~ expanded as the checks read them: the file checked is the file written
        output = (
            expand_path(args.output) if args.output else None if model is None else model / DEFAULT_RESULTS
        )
        if model is not None:  # the default file, in the model's folder
            _check_outputs(output, args.save_samples, model)
        datasets = resolve_eval_datasets(
            specs,
            model,
            task_options=options,
            report=lambda message: print(f"bandpo eval: {message}", file=sys.stderr),
            split=args.split,
            verifier=args.verifier,
            prompt_column=args.prompt_column,
            answer_column=args.answer_column,
            max_problems=args.max_problems,
            prompt_template=args.prompt_template,
            system_prompt=args.system_prompt,
            chat_template=args.chat_template,
        )
        _check_scorable(args, specs, datasets)  # else the run samples, then finds nothing to score
        if settings.max_new_tokens is None:  # a built-in task's own answer length (arith: 16)
            settings.max_new_tokens = task_answer_length(datasets)
        if args.dry_run:
            return _plan(args, model, output, datasets, settings)
        if args.threads is not None:  # not on a dry run; before building the tiny model, which trains it
            import torch

            torch.set_num_threads(args.threads)
        if model is None:  # a built-in model converted, or the tiny model built, now
            model = resolve_model_dir(args.model, specs, options)
            output = expand_path(args.output) if args.output else model / DEFAULT_RESULTS
            _check_outputs(output, args.save_samples, model)  # the default file, in its folder
        results = evaluate_model_dir(
            model,
            datasets,
            settings,
            device=args.device,
            dtype=args.dtype,
            attn_implementation=args.attn_implementation,
            keep_samples=bool(args.save_samples),
        )
    except EvalError as err:
        print(f"bandpo eval: error: {err}", file=sys.stderr)
        return 2
    samples = results.pop("samples", None)
    output.parent.mkdir(parents=True, exist_ok=True)
    write_json(output, results)
    if samples is not None:
        path = expand_path(args.save_samples)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(row) + "\n" for row in samples))
    print(f"model {results['model']}")
    resolved = results.get("settings", {}).get("precision_resolved")
    if resolved:
        print(f"precision {resolved['name']} ({resolved['reason']})")
    print(format_table(results))
    for line in unparsed_warnings(results):
        print(line, file=sys.stderr)
    print(f"results: {output}" + (f"; samples: {args.save_samples}" if samples is not None else ""))
    if results["overall"]["n_problems"] == 0:
        print(
            "bandpo eval: error: no problem could be scored (every ground truth is unparsable)",
            file=sys.stderr,
        )
        return 1
    return 0
