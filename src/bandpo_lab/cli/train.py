"""``bandpo train --config CONFIG [--resume [--allow-config-change]] [--overwrite] [--dry-run] [KEY=VALUE ...]``.

Exit codes: 0 done (or nothing to do), 2 a problem found before training (one line), 130 interrupted (Ctrl-C: one
line naming the last complete checkpoint and the command that resumes).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bandpo_lab.training.run import PreparedRun

EPILOG = """\
config keys:
  top level   TRL GRPOConfig / BandPOConfig fields: learning_rate, num_generations, per_device_train_batch_size,
              steps_per_generation, num_iterations, beta, loss_type, max_completion_length, temperature,
              max_steps, save_steps, logging_steps, report_to, output_dir, seed, use_vllm, clip_rule,
              clip_rule_kwargs, band_divergence, band_delta, band_cap, band_relax, ...
  method      a clip rule (BandPOTrainer; the same as clip_rule) or a TRL-native method run by plain
              GRPOTrainer, whose parameters are its GRPOConfig fields:
{trl_methods}
  model.      path (local dir, HF id, a built-in model such as smollm2-135m, or 'tiny' with data.task), dtype,
              precision (auto, float32, bf16), attn_implementation, cache_dir, warm_start
  data.       task, task_options, path, format, split, prompt_column, answer_column, keep_columns,
              prompt_template, system_prompt, chat_template, max_samples
  reward.     name, options, failure_reward
  base        another config file this one extends

examples:
  bandpo train --config configs/tiny.yaml
  bandpo train --config configs/tiny.yaml clip_rule=grpo output_dir=runs/tiny-grpo
  bandpo train --config configs/tiny.yaml method=cispo output_dir=runs/tiny-cispo   # TRL's CISPO
  bandpo train --config configs/tiny.yaml --resume
  bandpo train --config configs/tiny.yaml --resume max_steps=3200   # extend (constant lr schedule)
  bandpo train --config my.yaml model.path=/models/qwen data.path=train.jsonl reward.name=dapo
  accelerate launch --num_processes 8 -m bandpo_lab.cli.main train --config configs/qwen2.5-3b-instruct.yaml
  ACCELERATE_USE_CPU=true accelerate launch --multi_gpu --num_processes 2 -m bandpo_lab.cli.main train \\
      --config configs/tiny.yaml          # data parallel on CPU cores (gloo), as the tests run it
"""


NO_PROGRESS = ["disable_tqdm=true"]
"""The override ``--no-progress`` adds (train, demo)."""


def _trl_methods_help() -> str:
    """One help line per TRL-native method: its name and parameters."""
    from bandpo_lab.training.methods import TRL_METHODS

    lines = []
    for name in TRL_METHODS.names():
        method = TRL_METHODS.get(name)
        params = ", ".join(f"{p.field} {p.default:g}" for p in method.params)
        lines.append(f"              {name:<6} {method.title}: {params}")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG.format(trl_methods=_trl_methods_help())
    parser.add_argument(
        "--config",
        "-c",
        required=True,
        help="YAML training config: a file, or a built-in recipe's name (tiny, smollm2-arith, ...)",
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="config overrides, typed like the field they set (dotted keys for sections: model.path=/m)",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--resume",
        action="store_true",
        help="continue from the newest complete checkpoint in output_dir (none there: start from scratch; a "
        "finished run: do nothing). Refused if the config changes the experiment (not just logging, saving or, "
        "with a constant lr schedule, max_steps)",
    )
    mode.add_argument(
        "--overwrite",
        action="store_true",
        help="discard the checkpoints (checkpoint-<step>/), metrics, run info and TensorBoard folders of an "
        "earlier bandpo run in output_dir; nothing else there is removed",
    )
    parser.add_argument(
        "--allow-config-change",
        action="store_true",
        help="with --resume: continue even if the config changes the experiment (the changes are printed and "
        "recorded in run_info.json)",
    )
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bars (the training bar, building the model): the same as disable_tqdm=true",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="check everything that needs no model (config, TRL trainer, optimizer, scheduler and generation "
        "settings, vLLM for use_vllm, the attention implementation, model path, data, output_dir), print the "
        "resolved config, and exit without training",
    )


def resume_command(args: argparse.Namespace) -> str:
    """The ``bandpo train`` command line that resumes the run ``args`` describes."""
    words = ["bandpo", "train", "--config", args.config, *args.overrides, "--resume"]
    if args.no_progress:
        words.append("--no-progress")
    if args.allow_config_change:
        words.append("--allow-config-change")
    return shlex.join(words)


def _interrupted(args: argparse.Namespace, output_dir: Path | None) -> int:
    from bandpo_lab.training.preflight import is_main_rank
    from bandpo_lab.training.run import last_checkpoint

    if is_main_rank():  # one line, from the main process
        last = last_checkpoint(output_dir) if output_dir is not None else None
        where = (
            f"last complete checkpoint {last}"
            if last
            else "no complete checkpoint yet (resuming starts over)"
        )
        print(f"\nbandpo train: interrupted; {where}; continue with: {resume_command(args)}", file=sys.stderr)
    return 130


def run(args: argparse.Namespace) -> int:
    from bandpo_lab.config import recipe_note
    from bandpo_lab.training.config import ConfigError, load_train_config
    from bandpo_lab.training.run import prepare, train

    output_dir = None
    try:
        config = load_train_config(args.config, [*args.overrides, *NO_PROGRESS[: args.no_progress]])
        output_dir = config.output_dir
        prepared = prepare(
            config, resume=args.resume, overwrite=args.overwrite, allow_config_change=args.allow_config_change
        )
        if args.dry_run:
            # BandPOConfig says when every update is on-policy; a TRL-native method's GRPOConfig has no clip rule
            note_of = getattr(prepared.args, "on_policy_note", None)
            note = note_of() if note_of is not None else None
            if note is not None:
                print(f"bandpo train: warning: {note}", file=sys.stderr)
            print(f"# config {args.config}: {recipe_note(config.source)}")
            print(config.to_yaml(), end="")
            print(
                f"# ok: {len(prepared.problems)} prompts, output_dir {config.output_dir}{_dry_run_plan(prepared)}"
            )
            return 0
        train(config, resume=args.resume, overwrite=args.overwrite, prepared=prepared)
        _end_distributed()
    except ConfigError as err:
        print(f"bandpo train: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return _interrupted(args, output_dir)
    return 0


def _end_distributed() -> None:
    """Destroy the process group of ``accelerate launch`` after a run that succeeded: left to the interpreter's exit,
    Gloo's threads can abort a process (SIGABRT) whose work is done."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def _dry_run_plan(prepared: PreparedRun) -> str:
    """What a run of ``prepared`` would do with the checkpoints it found (for ``--dry-run``)."""
    plan = prepared.resume_plan
    if plan is None:
        return ""
    text = ""
    if plan.scan.skipped:
        text += f", would skip incomplete {plan.scan.describe_skipped()}"
    if plan.complete_at is not None:
        return text + f", the run is complete at step {plan.complete_at}: nothing to train"
    if plan.scan.latest is not None:
        return text + f", would resume from {plan.scan.latest}"
    return text + ", no complete checkpoint: would start from scratch"
