"""One run of a comparison: its files read (:func:`load_runs`) and reduced to numbers (:func:`run_summary`; the
training numbers are defined in docs/trl.md, "The compare config and the output directory")."""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bandpo_lab._files import read_json_object, read_jsonl
from bandpo_lab.experiments.compare.layout import HELDOUT_FILE, RESULTS_FILE, RUN_SPEC_FILE
from bandpo_lab.experiments.report.series import bin_names
from bandpo_lab.training.layout import METRICS_FILE, RUN_INFO_FILE

TAIL_BIN = "p0.0-0.2"

LATE = "late/"
"""Prefix of the late means (``results.json``'s ``late``: each metric averaged over the evaluations at
``eval.at_steps`` and the final one)."""


@dataclass
class RunData:
    """One run's files."""

    label: str
    clip_rule: str
    params: dict[str, Any]
    seed: int
    method_index: int
    run_dir: Path
    metrics: list[dict[str, Any]] = field(default_factory=list)
    heldout: list[dict[str, Any]] = field(default_factory=list)
    results: dict[str, Any] | None = None
    run_info: dict[str, Any] | None = None  # run_info.json (the training calls' provenance); None: none


def run_folder_seed(run_dir: Path) -> int | None:
    """The seed a run folder's name ``seed<seed>`` gives; ``None`` for any other name (a copy such as
    ``seed410.bak`` is not a run)."""
    match = re.fullmatch(r"seed(\d+)", run_dir.name)
    return int(match.group(1)) if match else None


def load_runs(output_dir: str | Path) -> list[RunData]:
    """Every ``runs/<label>/seed<seed>/`` with a ``run_spec.json``, with its metrics, held-out rows, results
    (``None``: missing, torn or empty, the run is unfinished) and run info; other folder names are not runs.

    Raises:
        ValueError: a run folder whose ``run_spec.json`` names another label or seed than the folder.
    """
    runs = []
    for spec_path in sorted(Path(output_dir).glob(f"runs/*/seed*/{RUN_SPEC_FILE}")):
        run_dir = spec_path.parent
        seed = run_folder_seed(run_dir)
        if seed is None:
            continue
        try:
            spec = json.loads(spec_path.read_text())
        except json.JSONDecodeError:
            continue
        label = str(spec.get("label", run_dir.parent.name))
        if (label, int(spec.get("seed", -1))) != (run_dir.parent.name, seed):
            raise ValueError(
                f"{spec_path} is the run {spec.get('label')!r} seed {spec.get('seed')!r}, not the one its folder "
                f"names ({run_dir.parent.name!r} seed {seed})"
            )
        runs.append(
            RunData(
                label=label,
                clip_rule=str(spec.get("method") or spec.get("clip_rule") or "?"),
                params=dict(spec.get("params") or {}),
                seed=seed,
                method_index=int(spec.get("method_index", 10**6)),
                run_dir=run_dir,
                metrics=[r for r in read_jsonl(run_dir / METRICS_FILE) if "train_runtime" not in r],
                heldout=read_jsonl(run_dir / HELDOUT_FILE),
                results=read_json_object(run_dir / RESULTS_FILE) or None,
                run_info=read_json_object(run_dir / RUN_INFO_FILE) or None,
            )
        )
    runs.sort(key=lambda r: (r.method_index, r.label, r.seed))
    return runs


def _values(rows: Sequence[Mapping[str, Any]], key: str) -> list[float]:
    return [float(r[key]) for r in rows if r.get(key) is not None]


def entropy_values(rows: Sequence[Mapping[str, Any]]) -> list[float]:
    """A run's logged policy entropies in step order: bandpo's ``policy/entropy``, else TRL's ``entropy``."""
    return _values(rows, "policy/entropy") or _values(rows, "entropy")


def _mean(xs: Sequence[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def run_summary(run: RunData) -> dict[str, Any]:
    """One run's numbers: the final evaluation's metrics, its late means (``late/<metric>``), the training numbers
    (``train/...``), per-bin clip rates and token shares (``bins/up|down|share/<bin>``) and per-bin clipped mass
    (``bins/mass/up|down/<bin>``: the step's clip rate in the bin times the bin's token share, averaged over steps)."""
    out: dict[str, Any] = {}
    if run.results:
        for part, prefix in (("metrics", ""), ("late", LATE)):
            for key, value in (run.results.get(part) or {}).items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    out[f"{prefix}{key}"] = value
        for key in ("train_wall_s", "eval_wall_s"):
            if run.results.get(key) is not None:
                out[key] = run.results[key]
    rows = run.metrics
    steps = _values(rows, "step")
    out["train/steps"] = int(max(steps)) if steps else None
    entropy = entropy_values(rows)
    out["train/entropy_last"] = entropy[-1] if entropy else None
    reward = _values(rows, "reward")
    out["train/reward_last"] = reward[-1] if reward else None
    for name, key in (
        ("train/clip_frac", "clip/frac"),
        ("train/clip_frac_up", "clip/frac_up"),
        ("train/clip_frac_down", "clip/frac_down"),
        ("train/tail_up_rate", f"clip/frac_up/{TAIL_BIN}"),
        ("train/hi_mean", "band/hi_mean"),
        ("train/lo_mean", "band/lo_mean"),
    ):
        out[name] = _mean(_values(rows, key))
    pooled = [
        r
        for r in rows
        if all(
            r.get(k) is not None for k in ("clip/frac", f"clip/frac/{TAIL_BIN}", f"tokens/share/{TAIL_BIN}")
        )
    ]
    if pooled:
        clipped = sum(float(r["clip/frac"]) for r in pooled)
        tail = sum(float(r[f"clip/frac/{TAIL_BIN}"]) * float(r[f"tokens/share/{TAIL_BIN}"]) for r in pooled)
        # no clipped token (or a non-finite log): no share to speak of, not a share of 0 (it would pull the mean)
        out["train/tail_share"] = tail / clipped if math.isfinite(tail) and clipped > 0 else None
    else:
        out["train/tail_share"] = _mean(_values(rows, "clip/tail_share"))
    names = {k.split("/")[-1] for r in rows for k in r if k.startswith("clip/frac_up/")}
    for b in bin_names(names):
        out[f"bins/up/{b}"] = _mean(_values(rows, f"clip/frac_up/{b}"))
        out[f"bins/down/{b}"] = _mean(_values(rows, f"clip/frac_down/{b}"))
        out[f"bins/share/{b}"] = _mean(_values(rows, f"tokens/share/{b}"))
        # the share of all tokens clipped on each side in bin b: per step rate x share, averaged over steps
        for side in ("up", "down"):
            rate, share = f"clip/frac_{side}/{b}", f"tokens/share/{b}"
            both = [r for r in rows if r.get(rate) is not None and r.get(share) is not None]
            out[f"bins/mass/{side}/{b}"] = _mean([float(r[rate]) * float(r[share]) for r in both])
    return out
