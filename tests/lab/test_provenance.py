"""Tests for ``bandpo_lab.provenance``: the commit and dirty flag of real (temporary) git checkouts, ``unknown`` outside
one or without git, and the versions of the installed distributions."""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
from pathlib import Path

import pytest

import bandpo
from bandpo_lab import provenance as prov

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A git repository with a committed package directory ``pkg/`` and an ignored ``venv/``."""
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "mod.py").write_text("x = 1\n")
    (repo / ".gitignore").write_text("venv/\n")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "first")
    return repo


@needs_git
def test_a_clean_checkout_gives_its_commit_and_not_dirty(checkout: Path) -> None:
    head = git(checkout, "rev-parse", "HEAD")
    assert len(head) == 40
    assert prov.git_state(checkout / "pkg") == {"commit": head, "dirty": False}
    (checkout / "venv").mkdir()
    (checkout / "venv" / "junk.py").write_text("ignored\n")  # ignored files do not make it dirty
    assert prov.git_state(checkout / "pkg")["dirty"] is False


@needs_git
def test_modified_and_untracked_files_make_it_dirty(checkout: Path) -> None:
    (checkout / "pkg" / "mod.py").write_text("x = 2\n")
    state = prov.git_state(checkout / "pkg")
    assert state["dirty"] is True and state["dirty_count"] == 1 and state["dirty_files"] == ["pkg/mod.py"]
    (checkout / "notes.txt").write_text("new\n")
    state = prov.git_state(checkout / "pkg")
    assert state["dirty_count"] == 2 and "notes.txt" in state["dirty_files"]
    for i in range(prov.MAX_DIRTY_FILES + 5):
        (checkout / f"new{i}.txt").write_text("x\n")
    state = prov.git_state(checkout / "pkg")
    assert (
        state["dirty_count"] == prov.MAX_DIRTY_FILES + 7 and len(state["dirty_files"]) == prov.MAX_DIRTY_FILES
    )
    git(checkout, "add", ".")
    git(checkout, "commit", "-q", "-m", "second")
    assert prov.git_state(checkout / "pkg") == {"commit": git(checkout, "rev-parse", "HEAD"), "dirty": False}


@needs_git
def test_no_checkout_or_an_untracked_copy_is_unknown(checkout: Path, tmp_path: Path) -> None:
    outside = tmp_path / "plain"
    outside.mkdir()
    assert prov.git_state(outside) == {"commit": "unknown", "dirty": "unknown"}
    # an installed copy inside an ignored virtual environment of some other checkout is not that checkout's code
    installed = checkout / "venv" / "site-packages" / "pkg"
    installed.mkdir(parents=True)
    (installed / "mod.py").write_text("x = 1\n")
    assert prov.git_state(installed) == {"commit": "unknown", "dirty": "unknown"}


def test_without_git_the_state_is_unknown(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no git on the PATH
    assert prov.git_state() == {"commit": "unknown", "dirty": "unknown"}


@needs_git
def test_provenance_of_this_checkout() -> None:
    """bandpo's tests run from its checkout (or from an installed copy: then commit and dirty are unknown)."""
    record = prov.provenance()
    assert record["bandpo"] == bandpo.__version__  # the distribution's metadata agrees with the package
    src = Path(bandpo.__file__).resolve().parent
    tracked = subprocess.run(["git", "-C", str(src), "ls-files", "--", "."], capture_output=True, text=True)
    if tracked.returncode or not tracked.stdout.strip():
        assert (record["commit"], record["dirty"]) == ("unknown", "unknown")
    else:
        assert record["commit"] == git(src, "rev-parse", "HEAD")
        assert isinstance(record["dirty"], bool)
    for name in ("torch", "transformers", "trl"):
        assert name in record
    import torch

    assert record["torch"] == importlib.metadata.version("torch") and torch.__version__.startswith(
        record["torch"].split("+")[0]
    )


def test_extra_packages_and_missing_ones() -> None:
    record = prov.provenance(["no-such-distribution-xyz", "torch"])
    assert record["no-such-distribution-xyz"] == prov.NOT_INSTALLED
    assert list(record).count("torch") == 1
    assert prov.package_version("no-such-distribution-xyz") == "not installed"


@needs_git
def test_code_changed_sees_edits_between_two_dirty_records(checkout: Path) -> None:
    """Two records of a dirty checkout differ when its uncommitted code changed between them (the same files
    dirty, other contents), and agree when nothing changed."""
    clean = prov.git_state(checkout / "pkg")
    (checkout / "pkg" / "mod.py").write_text("x = 2\n")
    first = prov.git_state(checkout / "pkg")
    assert prov.code_changed(clean, first) is True
    assert prov.code_changed(first, prov.git_state(checkout / "pkg")) is False
    (checkout / "pkg" / "mod.py").write_text("x = 3\n")
    second = prov.git_state(checkout / "pkg")
    assert second["dirty_files"] == first["dirty_files"]
    assert prov.code_changed(first, second) is True
    (checkout / "new.py").write_text("a\n")
    third = prov.git_state(checkout / "pkg")
    (checkout / "new.py").write_text("b\n")  # an untracked file's contents count too
    assert prov.code_changed(third, prov.git_state(checkout / "pkg")) is True
    # an untracked directory: git status lists only "newpkg/"
    (checkout / "newpkg" / "sub").mkdir(parents=True)
    (checkout / "newpkg" / "sub" / "mod.py").write_text("y = 1\n")
    fourth = prov.git_state(checkout / "pkg")
    assert "newpkg/" in fourth["dirty_files"]
    (checkout / "newpkg" / "sub" / "mod.py").write_text("y = 2\n")  # its files' contents count too
    assert prov.code_changed(fourth, prov.git_state(checkout / "pkg")) is True
    (checkout / "venv").mkdir()  # ignored files do not count
    (checkout / "venv" / "lib.py").write_text("z\n")
    fifth = prov.git_state(checkout / "pkg")
    (checkout / "venv" / "lib.py").write_text("zz\n")
    assert prov.code_changed(fifth, prov.git_state(checkout / "pkg")) is False
    assert prov.code_changed({"commit": "unknown"}, third) == "unknown"
