"""``bandpo demo``: the main job on the embedded default.

Warm-starts (or reuses) the tiny countdown model, evaluates it on the held-out split, trains it with BandPO
(``configs/tiny.yaml``: 1600 steps, about 10 minutes on one idle core), evaluates again, and prints a short summary: accuracy before and
after, entropy, clipping, and where the metrics are.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

DEFAULT_CONFIG = Path(__file__).resolve().parents[3] / "configs" / "tiny.yaml"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        default=str(DEFAULT_CONFIG),
        help="training recipe (default: the repository's configs/tiny.yaml)",
    )
    parser.add_argument("--k", type=int, default=8, help="samples per held-out problem (default 8)")
    parser.add_argument(
        "--eval-problems", type=int, default=200, help="held-out problems to score (default 200)"
    )
    parser.add_argument("--output-dir", default="runs/demo", help="where the run goes (default runs/demo)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="training config overrides")


def _metrics_summary(metrics_path: Path) -> dict[str, float]:
    """First/last entropy and mean clipping statistics over the run's logged steps."""
    from bandpo._files import read_jsonl

    rows = [r for r in read_jsonl(metrics_path) if "clip/frac" in r]
    if not rows:
        return {}

    def mean(key: str) -> float:
        vals = [r[key] for r in rows if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
        return sum(vals) / len(vals) if vals else float("nan")

    ent_key = "policy/entropy" if "policy/entropy" in rows[-1] else "entropy"
    return {
        "entropy_first": float(rows[0].get(ent_key, float("nan"))),
        "entropy_last": float(rows[-1].get(ent_key, float("nan"))),
        "clip_frac": mean("clip/frac"),
        "clip_frac_up": mean("clip/frac_up"),
        "clip_frac_down": mean("clip/frac_down"),
        "tail_share": mean("clip/tail_share"),
        "hi_mean": mean("band/hi_mean"),
        "steps": float(rows[-1].get("step", len(rows))),
    }


def _evaluate(model_dir: Path, dataset: Any, k: int) -> dict[str, Any]:
    from bandpo.eval.evaluate import evaluate_model_dir
    from bandpo.eval.settings import EvalSettings

    settings = EvalSettings(k=k, ks=(1, k), temperature=1.0, max_new_tokens=8, progress=True)
    return evaluate_model_dir(model_dir, [dataset], settings)["overall"]


def run(args: argparse.Namespace) -> int:
    from bandpo.eval.datasets import load_eval_dataset
    from bandpo.training.config import ConfigError, load_train_config
    from bandpo.training.layout import METRICS_FILE
    from bandpo.training.run import prepare, train
    from bandpo.training.tasks import TASKS, build_task_model, default_cache_dir

    try:
        config = load_train_config(args.config, [*args.overrides, f"output_dir={args.output_dir}"])
        prepared = prepare(config, overwrite=True)
    except ConfigError as err:
        print(f"bandpo demo: error: {err}", file=sys.stderr)
        return 2
    if config.data.task is None:
        print("bandpo demo: error: the demo config must name a built-in task (data.task)", file=sys.stderr)
        return 2
    task = TASKS.get(config.data.task)
    print(f"[1/4] warm start of the tiny model for task {task.name!r} (cached after the first run)")
    model_dir = build_task_model(
        task.name, config.data.task_options or {}, config.model.warm_start or {}, default_cache_dir()
    )
    dataset = load_eval_dataset(
        task.name, split="test", task_options=config.data.task_options or {}, max_problems=args.eval_problems
    )
    print(f"[2/4] held-out evaluation before RL ({args.k} samples per problem)")
    before = _evaluate(model_dir, dataset, args.k)
    kw = config.trainer_kwargs()
    print(f"[3/4] RL with clip rule {kw.get('clip_rule')!r} for {kw.get('max_steps')} steps")
    try:  # a rerun discards the earlier run's checkpoints, metrics and TensorBoard folders
        out = train(config, overwrite=True, prepared=prepared)
    except ConfigError as err:  # e.g. another run is using the output directory
        print(f"bandpo demo: error: {err}", file=sys.stderr)
        return 2
    print("[4/4] held-out evaluation after RL")
    after = _evaluate(out, dataset, args.k)
    stats = _metrics_summary(out / METRICS_FILE)
    k = args.k
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
            f"tail share {100 * stats['tail_share']:.1f}%, mean upper bound {stats['hi_mean']:.2f}",
        ]
    lines += [
        f"model: {out}",
        f"metrics: {out / 'metrics.jsonl'} (TensorBoard: tensorboard --logdir {out})",
        f"compare with GRPO: bandpo train --config {args.config} clip_rule=grpo output_dir=runs/demo-grpo",
    ]
    print("\n".join(lines))
    (out / "demo_summary.json").write_text(
        json.dumps({"before": before, "after": after, "training": stats}, indent=1)
    )
    return 0
