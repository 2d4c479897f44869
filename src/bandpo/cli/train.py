"""``bandpo train --config CONFIG [--resume] [--overwrite] [--dry-run] [KEY=VALUE ...]``.

The config is YAML in TRL's own names (``bandpo.training.config``); ``KEY=VALUE`` overrides follow it (dotted
keys for the sections: ``model.path=/models/x``, ``data.path=train.jsonl``, ``reward.name=dapo``). Data parallel:
``accelerate launch --num_processes N -m bandpo.cli.main train --config ...``.
"""

from __future__ import annotations

import argparse
import sys

EPILOG = """\
config keys:
  top level   TRL GRPOConfig / BandPOConfig fields: learning_rate, num_generations, per_device_train_batch_size,
              steps_per_generation, num_iterations, beta, loss_type, max_completion_length, temperature,
              max_steps, save_steps, logging_steps, report_to, output_dir, seed, use_vllm, clip_rule,
              clip_rule_kwargs, band_divergence, band_delta, band_cap, band_relax, ...
  model.      path (local dir, HF id, or 'tiny' with data.task), dtype, attn_implementation, cache_dir, warm_start
  data.       task, task_options, path, format, split, prompt_column, answer_column, keep_columns,
              prompt_template, system_prompt, chat_template, max_samples
  reward.     name, options, failure_reward
  base        another config file this one extends

examples:
  bandpo train --config configs/tiny.yaml
  bandpo train --config configs/tiny.yaml clip_rule=grpo output_dir=runs/tiny-grpo
  bandpo train --config configs/tiny.yaml --resume
  bandpo train --config my.yaml model.path=/models/qwen data.path=train.jsonl reward.name=dapo
  accelerate launch --num_processes 8 -m bandpo.cli.main train --config configs/qwen2.5-3b-instruct.yaml
  ACCELERATE_USE_CPU=true accelerate launch --multi_gpu --num_processes 2 -m bandpo.cli.main train \
      --config configs/tiny.yaml          # data parallel on CPU cores (gloo), as the tests run it
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    parser.add_argument("--config", "-c", required=True, help="YAML training config (e.g. configs/tiny.yaml)")
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
        help="continue from the last checkpoint in output_dir (none there: start from scratch)",
    )
    mode.add_argument(
        "--overwrite",
        action="store_true",
        help="discard the checkpoints and metrics of an earlier run in output_dir",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="check the config, model path and data, print the resolved config, and exit without training",
    )


def run(args: argparse.Namespace) -> int:
    from bandpo.training.config import ConfigError, load_train_config
    from bandpo.training.run import prepare, train

    try:
        config = load_train_config(args.config, args.overrides)
        prepared = prepare(config, resume=args.resume, overwrite=args.overwrite)
    except ConfigError as err:
        print(f"bandpo train: error: {err}", file=sys.stderr)
        return 2
    if args.dry_run:
        print(config.to_yaml(), end="")
        print(
            f"# ok: {len(prepared.problems)} prompts, output_dir {config.output_dir}"
            + (f", would resume from {prepared.resume_from}" if prepared.resume_from else ""),
        )
        return 0
    train(config, resume=args.resume, overwrite=args.overwrite, prepared=prepared)
    return 0
