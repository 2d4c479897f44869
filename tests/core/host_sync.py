"""A context manager that records every Tensor method call that copies a value to the host."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

_HOST_READS = ("__bool__", "item", "tolist", "__float__", "__int__")


@contextlib.contextmanager
def record_host_reads() -> Iterator[list[str]]:
    """Yields a list that collects the names of host-reading Tensor methods called inside the block."""
    calls: list[str] = []
    orig = {name: getattr(torch.Tensor, name) for name in _HOST_READS}

    def spy(name: str):
        def f(self, *a, **k):
            calls.append(name)
            return orig[name](self, *a, **k)

        return f

    try:
        for name in orig:
            setattr(torch.Tensor, name, spy(name))
        yield calls
    finally:
        for name, fn in orig.items():
            setattr(torch.Tensor, name, fn)
