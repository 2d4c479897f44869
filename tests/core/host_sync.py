"""A context manager that records every Tensor call that copies a value to the host or waits for one.

Two kinds: reads of a value (``item``, ``bool``, ``tolist``, ...) and ops whose output shape depends on the data
(boolean-mask indexing, ``nonzero``, ``masked_select``, ``unique``), which wait on the device on CUDA."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

_HOST_READS = ("__bool__", "item", "tolist", "__float__", "__int__", "numpy")
_DATA_SHAPED = ("nonzero", "masked_select", "unique", "argwhere")  # Tensor methods and torch functions


def _bool_key(key: Any) -> bool:
    """Whether an index holds a boolean tensor (a mask: its output shape is the mask's count)."""
    keys = key if isinstance(key, tuple) else (key,)
    return any(isinstance(k, torch.Tensor) and k.dtype == torch.bool for k in keys)


@contextlib.contextmanager
def record_host_reads() -> Iterator[list[str]]:
    """Yields a list that collects the names of host-reading or data-shaped calls made inside the block."""
    calls: list[str] = []
    patched: list[tuple[Any, str, Callable[..., Any]]] = []

    def patch(owner: Any, name: str, when: Callable[..., bool] = lambda *a, **k: True) -> None:
        orig = getattr(owner, name)

        def spy(*a: Any, **k: Any) -> Any:
            if when(*a, **k):
                calls.append(name)
            return orig(*a, **k)

        patched.append((owner, name, orig))
        setattr(owner, name, spy)

    try:
        for name in (*_HOST_READS, *_DATA_SHAPED):
            patch(torch.Tensor, name)
        for name in _DATA_SHAPED:
            patch(torch, name)
        patch(torch, "where", lambda *a, **k: len(a) + len(k) == 1)  # torch.where(cond) is nonzero
        for name in ("__getitem__", "__setitem__"):
            patch(torch.Tensor, name, lambda self, key, *rest: _bool_key(key))
        yield calls
    finally:
        for owner, name, orig in reversed(patched):
            setattr(owner, name, orig)
