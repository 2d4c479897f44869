"""Provenance: the code a run ran. bandpo's version and git commit (with a dirty flag), Python's and the libraries'
versions, as one JSON-able dict that training runs, comparisons and the benchmark record. Nothing heavy is
imported: versions come from ``importlib.metadata``, the commit from ``git`` (tens of milliseconds).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

UNKNOWN = "unknown"
"""The value of ``commit`` and ``dirty`` when bandpo is not in a git checkout (an installed wheel) or git fails."""
NOT_INSTALLED = "not installed"
"""The version recorded for a library that is not installed."""
DEFAULT_PACKAGES = ("torch", "transformers", "trl")
"""The libraries whose versions every record holds (a caller adds others it uses, e.g. ``verl``)."""
MAX_DIRTY_FILES = 20
"""At most this many changed paths are listed under ``dirty_files`` (the count is in ``dirty_count``)."""
_GIT_TIMEOUT_S = 10.0


def _git(directory: Path, *args: str) -> str:
    """``git -C directory args`` 's standard output (trailing newlines removed), without optional locks (``git
    status`` then never takes the index lock of a commit being made).

    Raises:
        OSError: git is not installed; subprocess.SubprocessError: git failed or timed out.
    """
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}
    done = subprocess.run(
        ["git", "-C", str(directory), *args],
        capture_output=True,
        text=True,
        timeout=_GIT_TIMEOUT_S,
        env=env,
        check=True,
    )
    return done.stdout.rstrip("\n")


def git_state(directory: str | Path | None = None) -> dict[str, Any]:
    """The git commit of the checkout holding ``directory`` (default: this package's source directory) and
    whether its working tree differs from it.

    Returns:
        ``{"commit": 40 hex digits, "dirty": bool}``, plus, when dirty, ``dirty_count`` (changed or untracked
        paths), ``dirty_files`` (the first :data:`MAX_DIRTY_FILES` of them) and ``dirty_sha256``
        (:func:`_dirty_fingerprint`). ``{"commit": "unknown", "dirty": "unknown"}`` when git is missing or fails,
        or when ``directory`` is not a tracked part of a checkout.
    """
    where = Path(directory) if directory is not None else Path(__file__).resolve().parent
    unknown: dict[str, Any] = {"commit": UNKNOWN, "dirty": UNKNOWN}
    try:
        if not _git(where, "ls-files", "--", "."):  # not tracked here: not the code of this checkout
            return unknown
        commit = _git(where, "rev-parse", "HEAD")
        top = Path(_git(where, "rev-parse", "--show-toplevel"))
        status = _git(top, "status", "--porcelain", "--untracked-files=normal")
    except (OSError, subprocess.SubprocessError):
        return unknown
    changed = [line[3:] for line in status.splitlines() if line.strip()]
    out: dict[str, Any] = {"commit": commit, "dirty": bool(changed)}
    if changed:
        out["dirty_count"] = len(changed)
        out["dirty_files"] = changed[:MAX_DIRTY_FILES]
        try:
            out["dirty_sha256"] = _dirty_fingerprint(top)
        except (OSError, subprocess.SubprocessError):
            out["dirty_sha256"] = UNKNOWN
    return out


def _dirty_fingerprint(top: Path) -> str:
    """SHA-256 of the uncommitted changes: ``git diff HEAD`` and the name and bytes of every untracked, not ignored
    file, so that two records of a dirty checkout tell whether its code changed in between."""
    digest = hashlib.sha256(_git(top, "diff", "HEAD", "--binary").encode())
    untracked = _git(top, "ls-files", "--others", "--exclude-standard", "-z").split("\0")
    for name in sorted(n for n in untracked if n):
        path = top / name
        if path.is_file():
            digest.update(name.encode() + b"\0")
            digest.update(path.read_bytes())
    return digest.hexdigest()


def code_changed(start: dict[str, Any], end: dict[str, Any]) -> bool | str:
    """Whether the code of two :func:`provenance` records differs (commit, dirty flag or uncommitted changes):
    ``True`` / ``False``, or ``"unknown"`` when either record could not read the checkout."""
    if UNKNOWN in [record.get(k) for record in (start, end) for k in ("commit", "dirty_sha256")]:
        return UNKNOWN
    return any(start.get(k) != end.get(k) for k in ("commit", "dirty", "dirty_sha256"))


def package_version(name: str) -> str:
    """The installed version of distribution ``name`` (:data:`NOT_INSTALLED` when it is not installed)."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return NOT_INSTALLED


def provenance(extra_packages: Sequence[str] = ()) -> dict[str, Any]:
    """The record of the code that runs now: ``{"bandpo": version, **git_state(), "python": version, "torch":
    version, ...}`` for :data:`DEFAULT_PACKAGES` and ``extra_packages`` (:data:`NOT_INSTALLED` for a missing one;
    bandpo's version is :data:`UNKNOWN` in a source tree that was never installed)."""
    version = package_version("bandpo")
    out: dict[str, Any] = {"bandpo": UNKNOWN if version == NOT_INSTALLED else version}
    out.update(git_state())
    out["python"] = platform.python_version()
    for name in dict.fromkeys([*DEFAULT_PACKAGES, *extra_packages]):
        out[name] = package_version(name)
    return out
