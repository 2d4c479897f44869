"""The training step (``benchmarks/bench.py``'s last section): ``BandPOTrainer`` with ``band`` against ``grpo`` on
the tiny countdown model, each step's time read from the run's own log (setup not timed)."""

from __future__ import annotations

import math
from pathlib import Path

from bench_timing import progress_bar

from bandpo.validation import check_int_in
from bandpo_lab._files import RECIPES, read_jsonl

__all__ = ["TINY_RECIPE", "bench_train_step", "step_seconds"]

TINY_RECIPE = RECIPES / "tiny.yaml"
"""The recipe :func:`bench_train_step` times (a checkout's ``configs/`` or a wheel's copy: :data:`bandpo_lab._files.RECIPES`)."""


def bench_train_step(
    steps: int = 24, rounds: int = 2, workdir: str | None = None, progress: bool = False
) -> list[dict]:
    """Wall time per optimizer step of ``BandPOTrainer`` with ``band`` (kl) against ``grpo`` on the same tiny
    (untrained) countdown model and settings, rounds interleaved (band, grpo, band, grpo, ...); best round each.

    Uses :data:`TINY_RECIPE` (64 completions per step, ``steps_per_generation`` 4). A step's time is read from the
    run's own log: the wall time from the end of the first generation round (warm-up: model loading, trainer setup,
    first calls) to the end of the last, over the optimizer steps between, so whole rounds (each with its
    generation) and no setup are timed. ``steps`` must be a whole number of rounds, at least 2. ``progress``: a
    progress bar over the ``2 * rounds`` training runs (stderr).

    Returns:
        rows ``{"case", "ms", "x_grpo"}`` (ms per step, best round; ``x_grpo`` = band's / grpo's).

    Raises:
        FileNotFoundError: no :data:`TINY_RECIPE` (an install without the recipes).
        ValueError: ``steps`` not a multiple of the recipe's ``steps_per_generation`` or under 2 rounds; ``rounds`` < 1.
    """
    import contextlib
    import io
    import shutil
    import tempfile
    import warnings

    from bandpo_lab.config import ConfigWarning
    from bandpo_lab.tasks.tiny_model import build_model, build_tokenizer
    from bandpo_lab.training.config import load_train_config
    from bandpo_lab.training.layout import METRICS_FILE
    from bandpo_lab.training.run import train

    if not TINY_RECIPE.is_file():
        raise FileNotFoundError(
            f"the training-step benchmark needs {TINY_RECIPE}, which this install of bandpo lacks"
        )
    per_round = int(load_train_config(TINY_RECIPE).trainer.get("steps_per_generation", 1))
    note = f" and a multiple of steps_per_generation ({per_round}): whole rounds, the first one warm-up"
    if check_int_in("steps", steps, 2 * per_round, note=note) % per_round:
        raise ValueError(f"steps must be an integer >= {2 * per_round}{note}, got {steps!r}")
    check_int_in("rounds", rounds, 1)
    root = Path(tempfile.mkdtemp(prefix="bandpo-bench-", dir=workdir))
    try:
        tokenizer = build_tokenizer()
        build_model(tokenizer).save_pretrained(root / "model")
        tokenizer.save_pretrained(root / "model")
        best: dict[str, float] = {}
        runs = [(r, rule) for r in range(rounds) for rule in ("band", "grpo")]
        with progress_bar("training step (TRL)" if progress else None, len(runs), unit="run") as bar:
            for r, rule in runs:
                out = root / f"{rule}-{r}"
                overrides = [
                    f"model.path={root / 'model'}",
                    f"clip_rule={rule}",
                    f"max_steps={steps}",
                    f"output_dir={out}",
                    "save_steps=100000",
                    "report_to=none",
                    "logging_steps=1",
                    "disable_tqdm=true",
                ]
                with warnings.catch_warnings():  # grpo's switch from the recipe's band drops band_*: intended
                    warnings.simplefilter("ignore", ConfigWarning)
                    config = load_train_config(TINY_RECIPE, overrides)
                with contextlib.redirect_stdout(io.StringIO()):  # the per-step log lines of logging_steps=1
                    train(config, overwrite=True)
                best[rule] = min(best.get(rule, math.inf), step_seconds(out / METRICS_FILE, per_round, steps))
                bar.update()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return [
        {"case": f"train step {rule}", "ms": 1e3 * t, "x_grpo": t / best["grpo"]} for rule, t in best.items()
    ]


def step_seconds(metrics: Path, first: int, last: int) -> float:
    """Seconds per optimizer step between the logged ends of steps ``first`` and ``last`` of a run's
    ``metrics.jsonl`` (each row's ``elapsed_s`` is taken when the step is logged, after its optimizer update).

    Raises:
        ValueError: either step missing from the log (logging every step is needed).
    """
    at: dict[int, float] = {}
    for row in read_jsonl(metrics):
        if isinstance(row.get("step"), int) and "elapsed_s" in row:
            at.setdefault(row["step"], float(row["elapsed_s"]))
    missing = [s for s in (first, last) if s not in at]
    if missing:
        raise ValueError(f"{metrics}: no logged step {missing[0]} (steps logged: {len(at)})")
    return (at[last] - at[first]) / (last - first)
