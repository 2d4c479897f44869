"""Synthetic comparison output directories: fake ``metrics.jsonl`` / ``heldout.jsonl`` / ``results.json`` files,
no training (shared by the compare and report tests)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bandpo_lab.experiments.compare import (
    RESULTS_FILE,
)

REPO = Path(__file__).resolve().parents[3]
CONFIGS = REPO / "configs"
BINS = ["p0.0-0.2", "p0.2-0.4", "p0.4-0.6", "p0.6-0.8", "p0.8-1.0"]


# ------------------------------------------------------------------------------------------ synthetic runs
def metrics_rows(shift: float, n_steps: int = 10) -> list[dict[str, Any]]:
    """Training log rows of a fake run: deterministic, distinct per ``shift``."""
    rows = []
    for i in range(1, n_steps + 1):
        row: dict[str, Any] = {
            "step": 2 * i,
            "loss": 0.01 * i,
            "reward": 0.1 + 0.01 * i + shift,
            "policy/entropy": 0.7 - 0.03 * i - shift,
            "clip/frac": 0.02 + 0.001 * i + shift / 10,
            "clip/frac_up": 0.005 + 0.0005 * i,
            "clip/frac_down": 0.015 + 0.0005 * i + shift / 10,
            "clip/tail_share": 0.1 * (i % 3),
            "band/hi_mean": 1.3 + shift,
            "band/lo_mean": 0.7 - shift,
        }
        for j, b in enumerate(BINS):
            row[f"clip/frac_up/{b}"] = 0.001 * (j + 1) * i + shift / 100
            row[f"clip/frac_down/{b}"] = 0.002 * (j + 1) + shift / 100
            row[f"clip/frac/{b}"] = row[f"clip/frac_up/{b}"] + row[f"clip/frac_down/{b}"]
            row[f"tokens/share/{b}"] = [0.05, 0.35, 0.2, 0.05, 0.35][j]
        rows.append(row)
    rows.append({"step": 2 * n_steps, "train_runtime": 12.5, "train_loss": 0.1})  # end-of-training summary
    return rows


def results_payload(label: str, rule: str, seed: int, mean: float, entropy: float) -> dict[str, Any]:
    return {
        "label": label,
        "clip_rule": rule,
        "seed": seed,
        "dataset": "countdown/test",
        "settings": {"k": 8, "ks": [1, 4, 8], "temperature": 1.0},
        "metrics": {
            "n_problems": 200,
            "n_samples": 1600,
            "mean@8": mean,
            "pass@1": mean,
            "pass@4": min(1.0, 3 * mean),
            "pass@8": min(1.0, 4.5 * mean),
            "best@8": min(1.0, 3.5 * mean),
            "maj@8": mean * 0.9,
            "n_unparsed": seed,
            "n_unparsed_ground_truth": 0,
            "entropy": entropy,
        },
        "train_wall_s": 30.0 + seed,
        "eval_wall_s": 3.0,
    }


def make_run(
    root: Path,
    label: str,
    rule: str,
    params: dict[str, Any],
    seed: int,
    index: int,
    mean: float,
    shift: float,
    finished: bool = True,
    heldout: bool = True,
) -> Path:
    run_dir = root / "runs" / label / f"seed{seed}"
    run_dir.mkdir(parents=True)
    spec = {"label": label, "clip_rule": rule, "params": params, "seed": seed, "method_index": index}
    (run_dir / "run_spec.json").write_text(json.dumps(spec))
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics_rows(shift)))
    if heldout:
        rows = [{"step": s, "mean@4": mean * s / 20 + 0.05, "pass@1": mean} for s in (0, 10, 20)]
        (run_dir / "heldout.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows) + '{"step": 3'
        )  # torn
    if finished:
        (run_dir / RESULTS_FILE).write_text(json.dumps(results_payload(label, rule, seed, mean, 0.5 - shift)))
    return run_dir


# mean@8 per seed: band-kl is better than grpo by 0.05 +/- 0.002 on every seed (significant); band-tv is the same
# as grpo up to noise (not significant).
GRPO = {0: 0.10, 1: 0.12, 2: 0.11}
BAND_KL = {0: 0.152, 1: 0.168, 2: 0.161}
BAND_TV = {0: 0.13, 1: 0.10, 2: 0.115}


# ------------------------------------------------------------------------------------- TRL-native methods
def trl_rows(n_steps: int = 10) -> list[dict[str, Any]]:
    """Training log rows of a TRL-native run (plain GRPOTrainer): TRL's metrics, none of our clip diagnostics."""
    rows = [
        {"step": 2 * i, "loss": 0.01 * i, "reward": 0.1 + 0.01 * i, "entropy": 0.6, "cispo_clip_ratio": 0.0}
        for i in range(1, n_steps + 1)
    ]
    return [*rows, {"step": 2 * n_steps, "train_runtime": 12.5, "train_loss": 0.1}]


# ------------------------------------------------------------------------------- runs of a compare config
def make_planned_runs(config: Any, skip: Any = (), train_files: bool = False) -> list[Any]:
    """Finished fake runs of every planned ``(label, seed)`` of the compare ``config`` but those in ``skip``: their
    spec and results carry the plan's fingerprint, so the comparison counts them done. ``train_files``: also what a
    finished training run leaves besides its model (``train_config.yaml``, ``config.json``, ``run_info.json``
    recording the end of training), which a resume compares its config with. Returns the plans."""
    from bandpo_lab.experiments.compare import plan_runs
    from bandpo_lab.training.config import TrainConfig

    plans = plan_runs(config)
    for p in plans:
        if (p.method.label, p.seed) in skip:
            continue
        p.run_dir.mkdir(parents=True, exist_ok=True)
        (p.run_dir / "run_spec.json").write_text(json.dumps(p.spec(config)))
        rows = metrics_rows(0.01 * p.seed + 0.02 * p.method_index)
        (p.run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        mean = 0.1 + 0.01 * p.seed + 0.03 * p.method_index
        results = results_payload(p.method.label, p.method.method, p.seed, mean, 0.5)
        (p.run_dir / RESULTS_FILE).write_text(json.dumps({**results, "fingerprint": p.fingerprint}))
        if train_files:
            train_config = TrainConfig.from_dict(p.train_config, source=p.train_source)
            (p.run_dir / "train_config.yaml").write_text(train_config.to_yaml())
            (p.run_dir / "config.json").write_text("{}")
            max_steps = p.train_config["max_steps"]
            finished = {
                "provenance": {"bandpo": "0.0.test"},  # what marks a folder as a bandpo run's
                "finished": {"global_step": max_steps, "max_steps": max_steps},
            }
            (p.run_dir / "run_info.json").write_text(json.dumps(finished))
    return plans
