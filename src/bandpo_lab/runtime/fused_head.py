"""A patch of one TRL internal for CPU runs: :func:`completion_tokens_only` (TRL's fused LM head projects only the
scored positions)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def completion_tokens_only() -> Iterator[None]:
    """TRL's fused LM head (``trl.trainer.utils.add_fused_lm_head``) on a CPU: project only the positions whose
    next token is scored (the completion tokens) instead of every position of prompt and completion (the same
    log-probs; TRL's compact path is for Triton devices). Without TRL, or with a TRL whose fused head does not
    read ``_use_triton``, this does nothing."""
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
