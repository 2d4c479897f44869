"""One training run per ``output_dir``: an OS file lock (:func:`bandpo_lab._files.flock`) on
``<output_dir>/.bandpo-train.lock``, which records the holder (pid, host, start, command) for the message a second
run gets (docs/trl.md, "Troubleshooting runs")."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from bandpo_lab._files import HAS_FLOCK, flock, read_json_object
from bandpo_lab.training.config import ConfigError
from bandpo_lab.training.layout import LOCK_FILE


class OutputDirLockedError(ConfigError):
    """Another live process trains into the same ``output_dir``."""


def lock_holder(output_dir: str | Path) -> dict[str, Any] | None:
    """What the live process holding ``output_dir``'s lock recorded (``{}`` before it wrote it), or ``None`` when
    no live process holds it."""
    path = Path(output_dir) / LOCK_FILE
    if not path.is_file():
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        if flock(fd, blocking=False):
            return None  # a stale file: nobody holds it (or no flock: Windows)
        return read_json_object(path)
    finally:
        os.close(fd)  # closing drops a lock this check took


def _locked_message(output_dir: Path, holder: dict[str, Any]) -> str:
    who = f"pid {holder.get('pid', '?')}"
    if holder.get("host") and holder["host"] != socket.gethostname():
        who += f" on {holder['host']}"
    if holder.get("started"):
        who += f", started {holder['started']}"
    if holder.get("command"):
        who += f": {holder['command']}"
    return (
        f"output_dir {str(output_dir)!r} is in use by another bandpo train ({who}); wait for it to finish, stop "
        "it, or choose another output_dir"
    )


def check_unlocked(output_dir: str | Path) -> None:
    """Raise :class:`OutputDirLockedError` (naming the other process) if a live process holds ``output_dir``'s
    lock; takes nothing."""
    holder = lock_holder(output_dir)
    if holder is not None:
        raise OutputDirLockedError(_locked_message(Path(output_dir), holder))


class OutputDirLock:
    """``with OutputDirLock(output_dir):`` holds ``output_dir``'s lock (creating the directory; removing the file
    on exit), or raises :class:`OutputDirLockedError` at once if another live process holds it."""

    def __init__(self, output_dir: str | Path) -> None:
        self.output_dir = Path(output_dir)
        self.path = self.output_dir / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        if not HAS_FLOCK:  # Windows: no lock (and an open file there cannot be removed on release)
            return
        self.output_dir.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            if not flock(fd, blocking=False):
                os.close(fd)
                raise OutputDirLockedError(_locked_message(self.output_dir, read_json_object(self.path)))
            try:  # the holder may have removed the file between our open and flock: lock the current one
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": " ".join(sys.argv),
        }
        os.ftruncate(fd, 0)
        os.write(fd, (json.dumps(info) + "\n").encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        self.path.unlink(missing_ok=True)  # still locked: nobody else can have taken this file meanwhile
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> OutputDirLock:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()
