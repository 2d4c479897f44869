"""Tests for ``bandpo_lab.training.lock``: one run per output directory; a dead process's lock does not block.

The other process is a small Python child that takes the lock the way ``bandpo train`` does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import CONFIGS

pytest.importorskip("trl")

from bandpo_lab.cli.main import main
from bandpo_lab.training.lock import (
    LOCK_FILE,
    OutputDirLock,
    OutputDirLockedError,
    check_unlocked,
    lock_holder,
)

HOLD = """
import sys, time
from bandpo_lab.training.lock import OutputDirLock
lock = OutputDirLock(sys.argv[1])
lock.acquire()
print("locked", flush=True)
time.sleep(120)
"""


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """A live child process holding the lock of ``tmp_path / 'out'``."""
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    yield proc, out
    proc.kill()
    proc.wait()


def test_a_second_run_is_refused_naming_the_directory_and_the_process(
    holder: tuple[subprocess.Popen[str], Path],
) -> None:
    proc, out = holder
    assert lock_holder(out)["pid"] == proc.pid
    pattern = rf"output_dir '{out}' is in use by another bandpo train \(pid {proc.pid}, started .*-c"
    with pytest.raises(OutputDirLockedError, match=pattern):
        check_unlocked(out)
    with pytest.raises(OutputDirLockedError, match=pattern):
        OutputDirLock(out).acquire()


def test_bandpo_train_stops_at_once_when_the_directory_is_in_use(
    holder: tuple[subprocess.Popen[str], Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proc, out = holder

    def no_loading(*args: object, **kwargs: object) -> None:
        pytest.fail("the data were loaded although the output directory is in use")

    monkeypatch.setattr("bandpo_lab.training.run.load_problems", no_loading)
    code = main(["train", "--config", str(CONFIGS / "tiny.yaml"), f"output_dir={out}", "report_to=none"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"bandpo train: error: output_dir '{out}' is in use") and f"pid {proc.pid}" in err


def test_the_lock_of_a_killed_run_does_not_block_a_restart(
    holder: tuple[subprocess.Popen[str], Path],
) -> None:
    proc, out = holder
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert (out / LOCK_FILE).is_file()  # the killed process left its lock file behind
    assert lock_holder(out) is None
    check_unlocked(out)
    with OutputDirLock(out):
        assert json.loads((out / LOCK_FILE).read_text())["pid"] == os.getpid()
        with pytest.raises(OutputDirLockedError, match=rf"pid {os.getpid()}"):
            OutputDirLock(out).acquire()  # another holder (here: a second lock in this process) is refused
    assert not (out / LOCK_FILE).exists()  # released: the file goes


def test_a_stale_lock_file_of_a_dead_pid_does_not_block(tmp_path: Path) -> None:
    (tmp_path / LOCK_FILE).write_text(json.dumps({"pid": 999999999, "host": "elsewhere"}))
    assert lock_holder(tmp_path) is None
    with OutputDirLock(tmp_path):
        assert lock_holder(tmp_path) is not None
    assert lock_holder(tmp_path) is None
