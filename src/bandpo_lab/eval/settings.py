"""How to sample and score: :class:`EvalSettings` (k, the pass@j values, temperature, budget, batch size, seed,
backend), checked at construction, before a model loads."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from bandpo.validation import check_int_in
from bandpo_lab.eval.errors import EvalError
from bandpo_lab.runtime import check_precision

__all__ = ["BACKENDS", "EvalSettings", "default_ks", "parse_ks"]

BACKENDS = ("transformers", "vllm")
"""Sampling backends: plain transformers ``generate``, or vLLM (``pip install vllm``)."""


def default_ks(k: int) -> tuple[int, ...]:
    """``(1, 4, k)`` restricted to values <= ``k``."""
    return tuple(sorted({j for j in (1, 4, k) if j <= k}))


def parse_ks(text: str | Sequence[int] | None, k: int) -> tuple[int, ...]:
    """pass@k values from ``"1,4,32"`` (``"k"`` stands for ``k``) or a sequence; ``None``: :func:`default_ks`.

    Raises:
        EvalError: a non-integer entry, an entry < 1, or an entry larger than ``k`` (the number of samples per
            problem: pass@j needs j <= samples).
    """
    if text is None:
        return default_ks(k)
    items = [s.strip() for s in text.split(",") if s.strip()] if isinstance(text, str) else list(text)
    out = []
    for item in items:
        value = k if item == "k" else item
        try:
            if isinstance(value, bool):
                raise ValueError
            number = int(value)
            if isinstance(value, float) or (isinstance(value, str) and str(number) != value.strip()):
                raise ValueError
        except (TypeError, ValueError):
            raise EvalError(f"ks entries must be integers >= 1 (or 'k'), got {item!r} in {text!r}") from None
        if number < 1:
            raise EvalError(f"ks entries must be integers >= 1, got {number} in {text!r}")
        if number > k:
            raise EvalError(
                f"ks entry {number} is larger than k={k}, the number of samples per problem: pass@j needs j <= the "
                f"number of samples; sample more (k >= {number}) or drop it"
            )
        out.append(number)
    if not out:
        raise EvalError(f"ks must hold at least one integer, got {text!r}")
    return tuple(sorted(set(out)))


@dataclass
class EvalSettings:
    """How to sample and score.

    Args:
        k: samples per problem (>= 1); mean@k, best@k and maj@k use all of them.
        ks: the pass@j values to report, each in [1, k] (``None``: ``(1, 4, k)`` up to ``k``).
        temperature: sampling temperature >= 0 (0: greedy; the authors evaluate at 1.0).
        max_new_tokens: generation budget per sample (``None``: the model's ``generation_config.max_new_tokens``,
            else 1024).
        batch_size: prompts per generate call (``batch_size * k`` sequences).
        seed: sampling seed (``None``: unseeded).
        n_bootstrap: resamples of best@k (the authors: 1000).
        backend: one of :data:`BACKENDS`.
        precision: how the transformers backend samples on a CPU (:mod:`bandpo_lab.runtime`): ``auto`` (bf16 where
            the CPU has native bfloat16 and the model is large enough), ``float32`` or ``bf16``.
        progress: show a progress bar with ETA.
    """

    k: int = 32
    ks: tuple[int, ...] | None = None
    temperature: float = 1.0
    max_new_tokens: int | None = None
    batch_size: int = 64
    seed: int | None = 0
    n_bootstrap: int = 1000
    backend: str = "transformers"
    precision: str = "auto"
    progress: bool = True

    def __post_init__(self) -> None:
        self.k = check_int_in("k", self.k, 1, error=EvalError)
        self.ks = parse_ks(self.ks, self.k)
        t = self.temperature
        if not isinstance(t, (int, float)) or isinstance(t, bool) or not math.isfinite(t) or t < 0:
            raise EvalError(f"temperature must be a finite number >= 0 (0: greedy), got {t!r}")
        if self.max_new_tokens is not None:
            self.max_new_tokens = check_int_in("max_new_tokens", self.max_new_tokens, 1, error=EvalError)
        self.batch_size = check_int_in("batch_size", self.batch_size, 1, error=EvalError)
        self.n_bootstrap = check_int_in("n_bootstrap", self.n_bootstrap, 1, error=EvalError)
        if self.seed is not None:
            self.seed = check_int_in("seed", self.seed, 0, note=" or None", error=EvalError)
        try:
            self.precision = check_precision(self.precision)
        except ValueError as err:
            raise EvalError(str(err)) from None
        if self.backend not in BACKENDS:
            raise EvalError(f"backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
