"""Tests for ``bandpo_lab._files``: the atomic JSON writer, the lock of a shared read-modify-write, the tolerant readers."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from bandpo_lab._files import (
    RECIPES,
    REPO_CONFIGS,
    WHEEL_RECIPES,
    expand_path,
    file_lock,
    flock,
    model_folder_problem,
    output_dir_problem,
    output_file_problem,
    read_json_object,
    recipe_name,
    recipe_names,
    resolve_config,
    same_or_inside,
    shared_folder_problem,
    write_json,
)


def test_write_json_replaces_the_file_in_one_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure before the rename leaves the earlier file whole and no temporary file behind."""
    path = tmp_path / "results.json"
    write_json(path, {"a": 1, "path": tmp_path})  # default=str: a Path is written as its text
    assert json.loads(path.read_text()) == {"a": 1, "path": str(tmp_path)}

    def killed(src: str, dst: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        write_json(path, {"a": 2})
    assert read_json_object(path) == {"a": 1, "path": str(tmp_path)}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]


def test_concurrent_writers_of_one_path_each_replace_it_whole(tmp_path: Path) -> None:
    """Two writers of one path: with one shared temporary name they raced (FileNotFoundError when the other had
    renamed it); each now writes its own."""
    path, errors = tmp_path / "plan.json", []

    def writer(k: int) -> None:
        try:
            for i in range(200):
                write_json(path, {"writer": k, "i": i})
        except OSError as err:  # pragma: no cover - the failure this test guards against
            errors.append(err)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and set(read_json_object(path)) == {"writer", "i"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]


@pytest.mark.skipif(os.name != "posix", reason="flock is POSIX's")
def test_flock_has_one_holder_at_a_time_and_closing_drops_it(tmp_path: Path) -> None:
    """Two open files of one path (as two processes have): the second does not get the lock while the first holds
    it, and gets it once the first is closed; ``file_lock`` waits for it."""
    path = tmp_path / "x.lock"
    first, second = os.open(path, os.O_RDWR | os.O_CREAT), os.open(path, os.O_RDWR)
    try:
        assert flock(first, blocking=False) is True
        assert flock(second, blocking=False) is False
        waited = threading.Event()

        def wait_for_it() -> None:
            with file_lock(path):
                waited.set()

        waiter = threading.Thread(target=wait_for_it)
        waiter.start()
        assert not waited.wait(0.3)  # file_lock blocks while `first` holds the lock
        os.close(first)
        waiter.join(timeout=30)
        assert waited.is_set() and flock(second, blocking=False) is True
    finally:
        for fd in (first, second):
            with contextlib.suppress(OSError):  # `first` may be closed already
                os.close(fd)


def _append_calls(path: str, tag: str, n: int, start: Any) -> None:
    start.wait()  # both processes begin together
    for i in range(n):
        with file_lock(Path(path + ".lock")):
            calls = read_json_object(Path(path)).get("calls", [])
            time.sleep(0.002)  # the time a real caller spends between reading and writing
            write_json(Path(path), {"calls": [*calls, f"{tag}{i}"]})


def test_the_lock_keeps_every_read_modify_write_of_two_processes(tmp_path: Path) -> None:
    """Two processes appending to one JSON file under file_lock lose no record (without it, each write could erase
    the other's: two queues of Study 4 lost records of compare_plan.json that way)."""
    path = str(tmp_path / "compare_plan.json")
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    procs = [ctx.Process(target=_append_calls, args=(path, tag, 40, start)) for tag in "ab"]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]
    calls = read_json_object(Path(path))["calls"]
    assert sorted(calls) == sorted(f"{t}{i}" for t in "ab" for i in range(40))


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc, a folder that takes no new entry")
def test_an_output_where_nothing_can_be_created_is_refused_up_front() -> None:
    """``/proc`` exists and is a directory, so the old checks let ``/proc/x`` through and the command failed at its
    first write (a traceback from ``mkdir``, or after minutes of work): the nearest existing folder is now asked
    for a new entry."""
    assert output_dir_problem("/proc/x/run", "output_dir") == (
        "output_dir '/proc/x/run' cannot be written: '/proc' takes no new entry (No such file or directory)"
    )
    assert output_file_problem("/proc/x.json", "--output") == (
        "--output '/proc/x.json' cannot be written: '/proc' takes no new entry (No such file or directory)"
    )


def test_an_output_that_is_a_link_or_no_regular_file_is_refused(tmp_path: Path) -> None:
    """The atomic write replaces what is at the name: ``--output /dev/null`` (as root) replaced the device by a
    file, and a symbolic link became a file, its target left as it was. Both are refused; nothing is touched."""
    target = tmp_path / "keep" / "real.json"
    target.parent.mkdir()
    target.write_text("{}")
    link = tmp_path / "latest.json"
    link.symlink_to(target)
    assert output_file_problem(link, "--output") == (
        f"--output '{link}' is a symbolic link (to '{target}'): bandpo writes its file in place of what is at that "
        "name, so the link would be lost; give the path it points to, or a new file"
    )
    assert output_file_problem(target, "--output") is None  # the file it points to is a regular file
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for special in (fifo, Path("/dev/null")):
        assert output_file_problem(special, "--output") == (
            f"--output '{special}' is not a regular file (a device, pipe or socket): bandpo writes its file in "
            "place of what is at that name; choose a file path"
        )
    assert link.is_symlink() and fifo.exists() and not fifo.is_file()


def test_output_checks_leave_nothing_behind_and_refuse_an_empty_path(tmp_path: Path) -> None:
    assert output_dir_problem(tmp_path / "a" / "b") is None
    assert output_dir_problem(tmp_path) is None
    assert output_file_problem(tmp_path / "r.json", "--output") is None
    assert list(tmp_path.iterdir()) == []  # the probe folder is removed
    assert output_dir_problem("", "--output-dir") == "--output-dir must be a directory path, got ''"
    assert output_file_problem(" ", "--output") == "--output must be a file path, got ' '"


def test_a_recipe_is_found_by_its_name_and_a_path_that_exists_is_never_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "recipes"
    (folder / "study").mkdir(parents=True)
    for name in ("tiny.yaml", "study/notes.txt"):
        (folder / name).write_text("a: 1\n")
    (folder / "study" / "s4.yaml").write_text("# a comparison\nmethods:\n  - {clip_rule: grpo}\n")
    assert recipe_names(folder) == ["study/s4", "tiny"]
    assert recipe_names(folder, kind="compare") == ["study/s4"] and recipe_names(folder, kind="train") == [
        "tiny"
    ]
    assert recipe_names(tmp_path / "absent") == []
    monkeypatch.chdir(tmp_path)

    for name in ("tiny", "tiny.yaml", Path("tiny")):
        assert resolve_config(name, folder=folder) == (folder / "tiny.yaml", None)
    assert resolve_config("study/s4", folder=folder) == (folder / "study" / "s4.yaml", None)
    assert resolve_config("configs/study/s4.yaml", folder=folder) == (
        folder / "study" / "s4.yaml",
        None,
    )  # the docs'
    for name in (
        "study/notes.txt",
        "study/notes",
        "small",
        "",
        " ",
        "configs",
        ".",
        "./tiny",  # a path relative to here, written as such
        "./tiny.yaml",
        "../recipes/tiny",
        str(tmp_path / "tiny"),
    ):
        assert resolve_config(name, folder=folder) == (Path(name), None), name  # the path, not a recipe
    (tmp_path / "tiny").write_text("mine: 1\n")  # a file of the user's own by that name
    assert resolve_config("tiny", folder=folder) == (
        Path("tiny"),
        folder / "tiny.yaml",
    )  # the recipe it shadows
    assert resolve_config("tiny.yaml", folder=folder) == (folder / "tiny.yaml", None)
    (tmp_path / "tiny").unlink()
    (tmp_path / "tiny.yaml").write_text("mine: 1\n")  # ``tiny`` could mean it: not looked up
    assert resolve_config("tiny", folder=folder) == (Path("tiny.yaml"), folder / "tiny.yaml")


def test_a_recipe_name_drops_the_clone_folder_and_the_suffix() -> None:
    assert [
        recipe_name(n) for n in ("tiny", "tiny.yaml", "configs/tiny.yaml", "study/s4.yaml", "configs")
    ] == [
        "tiny",
        "tiny",
        "tiny",
        "study/s4",
        "configs",
    ]


def test_a_checkout_reads_its_own_configs_folder() -> None:
    """The tests run from a clone (an editable install): no wheel copy, the recipes are configs/ itself."""
    assert not WHEEL_RECIPES.exists() and RECIPES == REPO_CONFIGS
    names = set(recipe_names())
    assert {"tiny", "smollm2-arith", "compare-tiny"} <= names and not [n for n in names if "study" in n]


def test_a_path_naming_an_unset_variable_is_refused_with_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """A shell reads an unset ``$VAR`` as empty and ``os.path.expandvars`` keeps it as written (a folder named
    ``$VAR``): :func:`expand_path` refuses it in the caller's error, naming the setting and the variable."""
    monkeypatch.delenv("BANDPO_UNSET_VAR", raising=False)
    monkeypatch.setenv("BANDPO_SET_VAR", "there")
    assert expand_path("a/$BANDPO_SET_VAR/${BANDPO_SET_VAR}") == Path("a/there/there")
    assert expand_path("price-5$") == Path("price-5$")  # no variable name: kept, as a shell keeps it

    class CallersError(ValueError):
        pass

    with pytest.raises(
        CallersError, match=r"^--model 'x/\$\{BANDPO_UNSET_VAR\}' names the environment variable "
    ):
        expand_path("x/${BANDPO_UNSET_VAR}", "--model", CallersError)
    with pytest.raises(ValueError, match=r"^path .* \$BANDPO_UNSET_VAR, which is not set: set it \(export "):
        expand_path("$BANDPO_SET_VAR/$BANDPO_UNSET_VAR")


def test_same_or_inside_reads_paths_as_typed_and_resolved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "m").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "m")
    assert same_or_inside("~/m", tmp_path / "m") and same_or_inside(tmp_path / "link/x/y", "~/m")
    assert same_or_inside(tmp_path / "m/../m/new", "$HOME/link")  # nothing of it exists yet
    assert not same_or_inside(tmp_path / "m2", tmp_path / "m") and not same_or_inside(
        tmp_path, tmp_path / "m"
    )


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002], ids=oct)
def test_write_json_gives_the_mode_of_a_plain_write(tmp_path: Path, umask: int) -> None:
    """``mkstemp`` made every atomically written file private (0600) beside the 0644 of a run's other files; the
    writer now creates its file as ``open(path, "w")`` does, the umask applied, both for a new file and a replaced
    one."""
    old = os.umask(umask)
    try:
        (tmp_path / "plain.txt").write_text("x")
        write_json(tmp_path / "results.json", {"a": 1})
        write_json(tmp_path / "results.json", {"a": 2})
    finally:
        os.umask(old)
    mode = (tmp_path / "plain.txt").stat().st_mode & 0o777
    assert mode == 0o666 & ~umask
    assert (tmp_path / "results.json").stat().st_mode & 0o777 == mode
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain.txt", "results.json"]


def test_the_working_or_home_directory_holding_files_is_no_output_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, work = tmp_path / "home", tmp_path / "home" / "a" / "work"
    work.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    assert shared_folder_problem(".", "--output-dir", "probe") is None  # empty
    (work / "notes.md").write_text("mine")
    assert shared_folder_problem(".", "--output-dir", "probe") == (
        f"--output-dir '.' is the working directory ('{work}'), which holds other files: bandpo probe would write its "
        "own among them; choose a new or empty folder for it"
    )
    assert shared_folder_problem(str(home / "a"), "output_dir", "compare") == (
        f"output_dir '{home / 'a'}' is above the working directory, which holds other files: bandpo compare would "
        "write its own among them; choose a new or empty folder for it"
    )
    assert shared_folder_problem(str(home), "output_dir", "compare").startswith(
        f"output_dir '{home}' is the home directory,"
    )
    assert shared_folder_problem("out", "output_dir", "compare") is None  # a folder of its own, inside


def test_a_model_folder_takes_no_file_of_a_command(tmp_path: Path) -> None:
    """The folder a command writes into may not hold a model, nor lie inside the command's own model folder."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"weights")
    assert model_folder_problem(model, "output_dir", "compare") == (
        f"output_dir '{model}' is the model folder '{model}': bandpo compare writes no file among a model's; write it "
        "elsewhere"
    )
    assert model_folder_problem(model / "f.png", "--output", "plot-bounds", is_file=True) == (
        f"--output '{model / 'f.png'}' is inside the model folder '{model}': bandpo plot-bounds writes no file among a "
        "model's; write it elsewhere"
    )
    assert model_folder_problem(model / "sub", "--output-dir", "probe", model=model) is not None
    assert (
        model_folder_problem(model / "sub", "--output-dir", "probe") is None
    )  # another model's: a new folder
    assert model_folder_problem(tmp_path / "f.png", "--output", "plot-bounds", is_file=True) is None
