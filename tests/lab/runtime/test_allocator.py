"""Tests for ``bandpo_lab.runtime.allocator``: glibc's allocator kept from returning freed memory during training
(:func:`freed_memory_kept`) and returning it around an evaluation inside it (:func:`freed_memory_returned`)."""

from __future__ import annotations

import os
import platform
import resource
import subprocess
import sys

import pytest
import torch

import bandpo_lab.runtime.allocator as allocator
from bandpo_lab.runtime import freed_memory_kept, freed_memory_returned

GLIBC = platform.libc_ver()[0] == "glibc"
"""Whether this Python runs on glibc: there the settings must apply, so a False from the block fails (not skips)."""


def test_freed_memory_kept_applies_inside_and_returns_memory_after() -> None:
    """Inside the block a freed 160 MB buffer stays in the heap (the process's size does not fall after the free);
    after it, glibc's defaults are back and the free heap is returned."""

    def rss_mb() -> float:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize() / 1e6

    with freed_memory_kept() as applied:
        assert isinstance(applied, bool)
        if not applied:
            assert not GLIBC, "this is glibc, yet freed_memory_kept() did not apply its settings"
            pytest.skip("not glibc")
        big = torch.ones(40_000_000)  # 160 MB: above glibc's largest mmap threshold, from the heap here
        assert float(big[-1]) == 1.0
        before_free = rss_mb()
        del big
        assert rss_mb() > before_free - 50  # kept
    after = rss_mb()
    assert after < before_free - 100  # returned at the end of the block


_RETURNED_SCRIPT = """
import resource, sys, torch
from bandpo_lab.runtime import freed_memory_kept, freed_memory_returned

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 1e6

with freed_memory_kept() as applied:
    if not applied:
        print("not glibc"); sys.exit(0)
    with freed_memory_returned():
        big = torch.ones(40_000_000)
        assert float(big[-1]) == 1.0
        before_free = rss_mb()
        del big
        returned = rss_mb() - before_free
    big = torch.ones(40_000_000)
    assert float(big[-1]) == 1.0
    before_free = rss_mb()
    del big
    kept = rss_mb() - before_free
with freed_memory_returned():  # outside a kept block: nothing to change
    pass
print(f"{returned:.1f} {kept:.1f}")
"""


def _fresh_process(script: str) -> list[str]:
    """The words ``script`` prints, run in a fresh Python process (one torch thread); skips off glibc."""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    if out.stdout.strip() == "not glibc":
        assert not GLIBC, "this is glibc, yet freed_memory_kept() did not apply its settings"
        pytest.skip("not glibc")
    return out.stdout.split()


def test_freed_memory_returned_inside_a_kept_block_returns_it_and_keeps_again_after() -> None:
    """An evaluation during training: inside ``freed_memory_returned`` (itself inside ``freed_memory_kept``) a freed
    160 MB buffer goes back to the kernel; after it, the training's setting holds again (a freed buffer stays).
    In a fresh process: in a long-lived one (a pytest worker) a heap fragmented by earlier tests can serve the
    buffer from a free chunk, which no setting returns."""
    returned, kept = map(float, _fresh_process(_RETURNED_SCRIPT))
    assert returned < -100  # returned at once (MB)
    assert kept > -50  # kept again


_REUSE_SCRIPT = """
import resource, sys, torch
from bandpo_lab.runtime import freed_memory_kept, freed_memory_returned

def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

def cycles():
    x = torch.ones(1_000_000)
    del x
    before = faults()
    for _ in range(20):
        x = torch.ones(1_000_000)  # 4 MB, written: below a fresh process's settled mmap threshold
        del x
    return faults() - before

with freed_memory_kept() as applied:
    if not applied:
        print("not glibc"); sys.exit(0)
    with freed_memory_returned():
        during = cycles()
after = cycles()
print(during, after)
"""


def test_blocks_below_32_mib_are_reused_from_the_heap_during_and_after_the_training_block() -> None:
    """The slowdown this prevents: with the mmap threshold fixed at glibc's starting 128 KiB (what the block used
    to restore), each 4 MB buffer of an evaluation was a fresh mapping, ~1,000 page faults every time (19,540 for
    20 buffers, measured), and an evaluation ran 2.4x longer; at the settled 32 MiB the heap serves them again.
    In a fresh process, as the test above. The bound is half of the fresh-mapping count: here 0 to 3,906 faults
    (976, one buffer's pages, most often), up to 4,883 on a machine short of memory with both cores busy (seen
    2026-12-06, beside two training runs and a probe); the failure this guards against gives 19,540."""
    during, after = map(int, _fresh_process(_REUSE_SCRIPT))
    mapped_afresh = 20 * 4_000_000 // resource.getpagesize()  # faults if each buffer were a new mapping
    assert during < mapped_afresh / 2 and after < mapped_afresh / 2, (during, after)


def test_nested_freed_memory_returned_keeps_the_defaults_until_the_outermost_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An evaluation inside an evaluation during training: the training's setting comes back when the outermost
    ``freed_memory_returned`` ends, not the inner one; glibc's values when the training's block ends."""
    applied: list[str] = []

    class _Libc:
        def malloc_trim(self, pad: int) -> int:
            return 1

    names = {id(allocator._KEEP): "keep", id(allocator._RETURNED): "defaults"}
    monkeypatch.setattr(allocator, "_libc", lambda: _Libc())
    monkeypatch.setattr(allocator, "_set", lambda libc, settings: applied.append(names[id(settings)]) or True)
    with freed_memory_kept():
        with freed_memory_returned():
            with freed_memory_returned():
                assert applied == ["keep", "defaults"]
            assert applied == ["keep", "defaults"]  # still glibc's in the outer evaluation
        assert applied == ["keep", "defaults", "keep"]
    assert applied == ["keep", "defaults", "keep", "defaults"]
