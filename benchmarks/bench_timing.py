"""The timing of every benchmark here: ``torch.utils.benchmark``'s ``Timer``, cases measured in turn.

:func:`measure` gives each case a ``Timer`` (its statement a call of the case's function, at this process's torch
thread count, the GPU synchronised around each block where there is one) and measures the cases in turn, round after
round (a, b, c, a, b, c, ...), so that a noisy stretch of the machine hits every case alike. In each round a case
runs ``Timer.blocked_autorange``: untimed calls first (a warm-up after the other cases ran, which also picks the
block size: the number of calls whose time dwarfs the timer's), then timed blocks until ``min_run_time`` (one block
at least); a case's blocks over all rounds are merged into one ``Measurement`` (``.times``: seconds per call of each
block; ``.median``). A call longer than ``min_run_time`` thus runs twice a round, once untimed. The benchmarks
report the best block (:func:`best`) and, where asked, the median, each as a ratio to a baseline measured in the
same run.

Clocks: ``wall`` (``Timer``'s default, ``timeit.default_timer``) and ``cpu`` (this process's CPU time,
``time.process_time``: the waits for a core on a busy machine inflate the wall time but not it, so with one torch
thread it measures the work itself).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch.utils.benchmark import Measurement, Timer

__all__ = ["CLOCKS", "MIN_RUN_TIME", "best", "measure", "measure_clocks", "progress_bar", "sample_logp"]

CLOCKS = ("wall", "cpu")
"""The clocks :func:`measure` reads (module docstring)."""

MIN_RUN_TIME = 0.05
"""Seconds of timed blocks per case and round at least (``Timer.blocked_autorange``'s ``min_run_time``); a call
longer than this is timed once per round."""


def measure(
    fns: Mapping[str, Callable[[], object]],
    rounds: int,
    *,
    clock: str = "wall",
    min_run_time: float = MIN_RUN_TIME,
    progress: str | None = None,
) -> dict[str, Measurement]:
    """Each case of ``fns`` (label -> a call without arguments) measured for ``rounds`` rounds, the cases in turn
    (module docstring), by ``clock`` (one of :data:`CLOCKS`): :func:`measure_clocks` with one clock."""
    return measure_clocks(fns, rounds, clocks=(clock,), min_run_time=min_run_time, progress=progress)[clock]


def measure_clocks(
    fns: Mapping[str, Callable[[], object]],
    rounds: int,
    *,
    clocks: tuple[str, ...] = CLOCKS,
    min_run_time: float = MIN_RUN_TIME,
    progress: str | None = None,
) -> dict[str, dict[str, Measurement]]:
    """Each case of ``fns`` (label -> a call without arguments) measured for ``rounds`` rounds by each of ``clocks``
    (:data:`CLOCKS`), the cases in turn and, within a case, the clocks in turn (module docstring). ``progress``: the
    label of a progress bar over the ``len(fns) * len(clocks) * rounds`` rounds of a case (:func:`progress_bar`), or
    None for none.

    Returns:
        clock -> label -> the merged ``torch.utils.benchmark.Measurement`` of its blocks (``.times``: seconds per
        call of each block; ``.metadata["calls"]``: the calls timed, warm-up excluded).

    Raises:
        ValueError: ``rounds`` not an integer >= 1, a clock not one of :data:`CLOCKS` (or none), ``min_run_time``
            not a number >= 0.
    """
    from bandpo.validation import check_int_in

    check_int_in("rounds", rounds, 1)
    if not clocks or any(c not in CLOCKS for c in clocks):
        raise ValueError(f"clocks must be one or more of {', '.join(CLOCKS)}, got {clocks!r}")
    if not (isinstance(min_run_time, (int, float)) and min_run_time >= 0):
        raise ValueError(f"min_run_time must be a number >= 0 (seconds), got {min_run_time!r}")
    threads = torch.get_num_threads()
    timer_of = {"wall": {}, "cpu": {"timer": time.process_time}}
    timers = {
        (clock, name): Timer(
            "fn()", globals={"fn": fn}, num_threads=threads, description=name, **timer_of[clock]
        )
        for name, fn in fns.items()
        for clock in clocks
    }
    blocks: dict[tuple[str, str], list[Measurement]] = {key: [] for key in timers}
    with progress_bar(progress, len(timers) * rounds, unit="round") as bar:
        for _ in range(rounds):
            for key, timer in timers.items():
                blocks[key].append(timer.blocked_autorange(min_run_time=min_run_time))
                bar.update()
    out: dict[str, dict[str, Measurement]] = {clock: {} for clock in clocks}
    for (clock, name), found in blocks.items():
        (merged,) = Measurement.merge(found)
        merged.metadata = {"calls": sum(b.number_per_run * len(b.raw_times) for b in found)}
        out[clock][name] = merged
    return out


def best(measurement: Measurement) -> float:
    """Seconds per call of the fastest block of ``measurement``."""
    return min(measurement.times)


def progress_bar(label: str | None, total: int, unit: str = "call") -> Any:
    """A progress bar on stderr (count, rate, ETA) labelled ``label`` over ``total`` steps, removed when done (the
    tables go to stdout); with ``label`` None, or without tqdm, one that shows nothing. Use as a context manager;
    ``update()`` after each step."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        tqdm = None
    if tqdm is None or label is None:
        return _NoBar()
    return tqdm(total=total, desc=label, unit=unit, leave=False, dynamic_ncols=True)


class _NoBar:
    """The interface of a progress bar that :func:`progress_bar` uses, showing nothing."""

    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, n: int = 1) -> None:
        return None


def sample_logp(n: int, seed: int = 0, device: str = "cpu") -> torch.Tensor:
    """(n,) float32 old log-probs shaped like an LLM's sampled tokens: 70% near 0 (p > 0.9), the rest down to
    p = exp(-18) = 1.5e-8 (log p uniform in [-18, 0]), on ``device`` (drawn on the CPU: the same values on every device)."""
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(n, generator=g)
    logp = torch.where(u < 0.7, -torch.rand(n, generator=g) * 0.1, -torch.rand(n, generator=g) * 18.0)
    return logp.to(device)
