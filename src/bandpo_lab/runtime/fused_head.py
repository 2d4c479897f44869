"""A patch of one TRL internal for CPU runs: :func:`completion_tokens_only` (TRL's fused LM head projects only the
scored positions)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["completion_tokens_only"]


@contextlib.contextmanager
def completion_tokens_only() -> Iterator[None]:
    """TRL's fused LM head (``trl.trainer.utils.add_fused_lm_head``) on a CPU: project only the positions whose
    next token is scored (the completion tokens) instead of every position of prompt and completion.

    TRL scores every position on devices without Triton so that tile shapes stay fixed for compilers (Neuron);
    an eager CPU run has no such need, and the prompt positions are 60-75 % of the logits it computes and then
    masks (the same log-probs either way: each position's product is computed alone). Without TRL, or with a
    TRL whose fused head does not read ``_use_triton``, this does nothing.
    """
    try:
        import trl.trainer.utils as trl_utils
    except ImportError:
        yield
        return
    original = getattr(trl_utils, "_use_triton", None)
    if original is None:
        yield
        return

    def compact(device: object) -> bool:
        return getattr(device, "type", None) == "cpu" or bool(original(device))

    trl_utils._use_triton = compact
    try:
        yield
    finally:
        trl_utils._use_triton = original
