"""glibc's allocator during training (:func:`freed_memory_kept`) and during an evaluation inside it
(:func:`freed_memory_returned`), through ``mallopt`` and ``malloc_trim`` (ctypes; nothing off Linux/glibc).

One step of a real model allocates and frees buffers of 100 MB and more (the gradient of a 49,152 x 576 embedding,
its tied twin, chunks of logits). glibc returns blocks above its mmap threshold to the kernel at every ``free``, so
every step pays page faults to get them back (measured: a third of the step in system time). Training turns that off
for its own duration with ``mallopt`` (no mmap for large blocks, no trimming of the heap) and turns it back on,
returning the free heap, when it ends, with the mmap threshold where a fresh process's dynamic one settles (32 MiB,
:data:`_RETURNED`), not at its 128 KiB start, which made an evaluation after or during training 2.4x slower.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import sys
from collections.abc import Iterable, Iterator

__all__ = ["freed_memory_kept", "freed_memory_returned"]

_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3
_M_MMAP_MAX = -4
_RETURNED = (
    (_M_MMAP_MAX, 65536),
    (_M_MMAP_THRESHOLD, 32 << 20),
    (_M_TRIM_THRESHOLD, 64 << 20),
    (_M_TOP_PAD, 128 * 1024),
)
"""The settings outside the training's block (:func:`freed_memory_kept`'s end, :func:`freed_memory_returned`):
where glibc's dynamic mmap threshold settles in a process that frees large blocks, fixed. A fresh process starts
at 128 KiB and raises the threshold to each freed mapped block's size up to 32 MiB (``DEFAULT_MMAP_THRESHOLD_MAX``
on 64-bit), with the trim threshold at twice it; but once ``mallopt`` has set a threshold, glibc never adjusts it
again, so the training's block would leave whatever it restores fixed for the rest of the process. Restoring the
starting 128 KiB made every block above it (a batch's logits over a 49,152-token vocabulary, say) a fresh mapping
and its page faults: an evaluation of SmolLM2-135M in bf16 took 2.4x as long after or during training as in a
fresh process (86-88 s against 35-40 s for 16 problems x 8 samples; ``benchmarks/eval_allocator_speed.py``). Blocks
above 32 MiB are still mapped and returned at ``free``, and a free heap top above 64 MiB is trimmed."""


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt  # noqa: B018 - glibc only
        libc.malloc_trim  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


_KEEP = ((_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, 1 << 30), (_M_TOP_PAD, 256 << 20))
"""The settings of :func:`freed_memory_kept`."""

_kept_depth = 0  # how many freed_memory_kept blocks are open in this process
_returned_depth = 0  # how many freed_memory_returned blocks are open inside them


def _set(libc: ctypes.CDLL, settings: Iterable[tuple[int, int]]) -> bool:
    return all([libc.mallopt(option, value) == 1 for option, value in settings])


@contextlib.contextmanager
def freed_memory_kept() -> Iterator[bool]:
    """Inside the block, keep freed memory in this process's heap instead of returning it to the kernel (glibc
    ``mallopt``: no mmap for large blocks, trim threshold and top pad 1 GiB / 256 MiB; module docstring for why);
    at its end, :data:`_RETURNED` applies (blocks above 32 MiB mapped) and the free heap is returned
    (``malloc_trim``), so that what runs next (an evaluation in the same process, say) does not grow on a heap the
    training fragmented. Measured: an evaluation after training with the setting left on reached 12 GB and was
    killed for memory. An evaluation inside the block (during training) runs under :func:`freed_memory_returned`.
    Yields whether the setting applied (False off Linux/glibc)."""
    global _kept_depth
    libc = _libc()
    applied = libc is not None and _set(libc, _KEEP)
    _kept_depth += 1
    try:
        yield applied
    finally:
        _kept_depth -= 1
        if libc is not None and _kept_depth == 0:
            _set(libc, _RETURNED)
            libc.malloc_trim(0)


@contextlib.contextmanager
def freed_memory_returned() -> Iterator[None]:
    """Inside a :func:`freed_memory_kept` block, :data:`_RETURNED` for the duration of this block (the free heap
    returned first), then the training's setting again: for work of another shape, such as an evaluation during
    training, that would otherwise grow the heap the training keeps. Outside such a block: nothing changes. Nested
    in another, the training's setting comes back when the outermost one ends."""
    global _returned_depth
    libc = _libc()
    if libc is None or _kept_depth == 0:
        yield
        return
    if _returned_depth == 0:
        _set(libc, _RETURNED)
        libc.malloc_trim(0)
    _returned_depth += 1
    try:
        yield
    finally:
        _returned_depth -= 1
        if _returned_depth == 0:
            _set(libc, _KEEP)
