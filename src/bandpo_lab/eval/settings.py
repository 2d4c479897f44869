"""How to sample and score: :class:`EvalSettings`, checked at construction, before a model loads."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bandpo.validation import check_int_in
from bandpo_lab.decode import check_temperature
from bandpo_lab.eval.errors import EvalError
from bandpo_lab.runtime import check_precision
from bandpo_lab.runtime.seeds import check_seed

BACKENDS = ("transformers", "vllm")  # vLLM: pip install vllm


def parse_ks(text: str | Sequence[int] | None, k: int) -> tuple[int, ...]:
    """pass@k values from ``"1,4,32"`` (``"k"`` stands for ``k``) or a sequence; ``None``: ``(1, 4, k)`` up to ``k``.

    Raises:
        EvalError: a non-integer entry, an entry < 1, or an entry larger than ``k``.
    """
    if text is None:
        return tuple(sorted({j for j in (1, 4, k) if j <= k}))
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
    """How to sample and score, as ``bandpo eval``'s flags of the same names say: ``k`` samples per problem (all of
    them in mean@k, best@k, maj@k), the pass@j values ``ks`` (:func:`parse_ks`), ``temperature`` (0: greedy),
    ``max_new_tokens`` (``None``: the model's generation config's, else 1024), ``batch_size`` prompts per call,
    ``seed`` (in [0, 2**32 - 1] as a training run's; ``None``: unseeded), ``n_bootstrap`` of best@k, ``backend`` (:data:`BACKENDS`), the CPU sampling
    ``precision`` (:mod:`bandpo_lab.runtime`) and a ``progress`` bar.
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
        check_temperature(self.temperature, EvalError)
        if self.max_new_tokens is not None:
            self.max_new_tokens = check_int_in("max_new_tokens", self.max_new_tokens, 1, error=EvalError)
        self.batch_size = check_int_in("batch_size", self.batch_size, 1, error=EvalError)
        self.n_bootstrap = check_int_in("n_bootstrap", self.n_bootstrap, 1, error=EvalError)
        if self.seed is not None:
            self.seed = check_seed("seed", self.seed, note=" or None", error=EvalError)
        try:
            self.precision = check_precision(self.precision)
        except ValueError as err:
            raise EvalError(str(err)) from None
        if self.backend not in BACKENDS:
            raise EvalError(f"backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
