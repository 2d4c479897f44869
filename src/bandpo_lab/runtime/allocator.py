"""glibc's allocator during training (:func:`freed_memory_kept`) and during an evaluation inside it
(:func:`freed_memory_returned`), through ``mallopt`` and ``malloc_trim`` (ctypes; nothing off Linux/glibc). Why
and the measurements: docs/smollm2.md, "No waste in the step".
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import sys
from collections.abc import Iterable, Iterator

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
where glibc's dynamic mmap threshold settles in a process that frees large blocks (32 MiB, the trim threshold at
twice it), fixed: glibc never adjusts a threshold ``mallopt`` has set (docs/smollm2.md, "No waste in the step")."""


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
    ``mallopt``: no mmap for large blocks, trim threshold and top pad 1 GiB / 256 MiB); at its end,
    :data:`_RETURNED` applies and the free heap is returned (``malloc_trim``), so that what runs next does not grow
    on a heap the training fragmented. An evaluation inside the block runs under :func:`freed_memory_returned`.
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
    returned first), then the training's setting again (when the outermost such block ends): for an evaluation
    during training. Outside such a block: nothing changes."""
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
