"""``bandpo`` argument parsing (``cli/main.py``): ``KEY=VALUE`` overrides anywhere on the line, split around flags,
in every command that takes them (train, compare, demo; eval, bounds and the others take none), in their order on
the line; an unknown flag is still an error. The parsing runs in process (``helpers.cli``); what depends on the
process runs ``bandpo`` as a subprocess: the one-line format of its warnings on stderr, and an environment without
the lab's modules.

Each command either prints the resolved config (train's ``--dry-run``) or fails on a bad key placed *after* a
flag, which proves that the override reached the config layer (before: ``unrecognized arguments``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import CONFIGS
from helpers.cli import run_bandpo


def test_train_overrides_on_both_sides_of_a_flag_apply_in_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("trl")
    out = tmp_path / "x"
    from bandpo_lab.config.documents import ConfigWarning

    with pytest.warns(ConfigWarning, match="switches the method from 'band'"):
        status, stdout, stderr = run_bandpo(
            capsys, "train", "--config", CONFIGS / "tiny.yaml", "max_steps=5", "method=cispo", "--dry-run",
            f"output_dir={out}", "max_steps=7",
        )  # fmt: skip
    assert status == 0, stderr[-2000:]
    lines = stdout.splitlines()
    assert "method: cispo" in lines and f"output_dir: {out}" in lines
    assert "max_steps: 7" in lines  # the later override of a key wins, as on an unsplit line
    assert not out.exists()  # a dry run


@pytest.mark.parametrize(
    "command,message",
    [
        (
            ["compare", "--config", CONFIGS / "compare-tiny.yaml", "seeds=[0]", "--report-only", "eval.kk=3"],
            "bandpo compare: error: unknown compare config key 'eval.kk' (from the overrides)",
        ),
        (
            ["demo", "max_steps=2", "--k", "2", "learning_rat=1e-5"],
            "bandpo demo: error: unknown config key 'learning_rat' (from the overrides)",
        ),
    ],
    ids=["compare", "demo"],
)
def test_an_override_after_a_flag_reaches_the_config(
    command: list, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("trl")
    out = tmp_path / "out"
    flag = "--output-dir" if command[0] == "demo" else None
    args = [*command, *([flag, out] if flag else [f"output_dir={out}"])]
    status, _, stderr = run_bandpo(capsys, *args)
    assert status == 2 and message in stderr, stderr[-2000:]
    assert "unrecognized arguments" not in stderr and not out.exists()


@pytest.mark.parametrize(
    "args,extras",
    [
        (["train", "--config", CONFIGS / "tiny.yaml", "a=1", "--bogus", "b=2"], "--bogus b=2"),
        (["bounds", "x=1"], "x=1"),  # a command without overrides
    ],
    ids=["unknown-flag", "no-overrides"],
)
def test_unknown_arguments_are_still_errors(
    args: list, extras: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, stderr = run_bandpo(capsys, *args)
    assert status == 2
    assert stderr.splitlines()[-1] == f"bandpo {args[0]}: error: unrecognized arguments: {extras}"


def test_warnings_of_the_library_and_of_the_lab_are_bandpos_own() -> None:
    """The one-line format takes a category of either package (the lab's ``ConfigWarning``, the library's
    ``TrlConflictWarning``), and leaves another library's warning to the default format."""
    from bandpo.integrations.verl_env import TrlConflictWarning
    from bandpo_lab.cli.main import _one_line_warnings
    from bandpo_lab.config.documents import ConfigWarning

    format_ = _one_line_warnings("train", lambda *args: "default")
    for category in (ConfigWarning, TrlConflictWarning):
        assert format_("m", category, "f.py", 1) == "bandpo train: warning: m\n"
    assert format_("m", DeprecationWarning, "f.py", 1) == "default"


def test_bandpo_warnings_print_as_one_line_naming_the_command(tmp_path: Path) -> None:
    """A ConfigWarning from ``bandpo train`` reaches stderr as one line, without Python's source echo."""
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "bandpo_lab.cli.main", "train", "--config", str(CONFIGS / "tiny.yaml"),
         "--dry-run", f"output_dir={out}", "method=grpo"],
        capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"},
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(
        "bandpo train: warning: method='grpo' (from the overrides) switches the method"
    )


WITHOUT = (
    "import sys\n"
    "for name in sys.argv[1].split(','):\n"
    "    sys.modules[name] = None  # as if not installed: importing it raises ModuleNotFoundError\n"
    "from bandpo_lab.cli.main import main\n"
    "sys.exit(main(sys.argv[2:]))\n"
)
"""``bandpo ARGS`` in an environment without the modules named (comma-separated) in the first argument."""


def _bandpo_without(modules: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-c", WITHOUT, modules, *map(str, args)]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize(
    ("modules", "args"),
    [
        ("yaml", ["train", "--config", "tiny", "--dry-run"]),
        ("yaml", ["eval", "--model", "tiny"]),
        ("trl,transformers", ["train", "--config", "tiny", "--dry-run"]),
    ],
)
def test_a_lab_command_where_only_the_library_is_installed_names_the_lab_extra(
    modules: str, args: list[str]
) -> None:
    """``pip install .`` brings torch alone; ``bandpo train`` there ended in ``ModuleNotFoundError: No module
    named 'yaml'`` (a traceback): the command says in one line which extra to install, exit status 2."""
    proc = _bandpo_without(modules, *args)
    assert proc.returncode == 2, proc.stderr[-2000:]
    missing = proc.stderr.split("(missing: ")[-1].rstrip(")\n")
    assert proc.stderr == (
        f"bandpo: the lab's commands need the lab extra: pip install '.[lab]' in bandpo's clone (missing: {missing})\n"
    )
    assert missing in modules.split(",")
    assert proc.stdout == ""


def test_bandpo_version_and_help_work_where_only_the_library_is_installed() -> None:
    from bandpo import __version__

    # numpy left in: torch warns at import where it is missing, which is torch's own line
    lab = "yaml,scipy,pydantic,tqdm,tokenizers,tensorboard,trl,transformers,accelerate,datasets"
    proc = _bandpo_without(lab, "--version")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, f"bandpo {__version__}\n", "")
    proc = _bandpo_without(lab, "--help")
    assert proc.returncode == 0 and proc.stderr == "" and "bandpo help COMMAND" in proc.stdout


def test_a_missing_module_outside_the_lab_extra_is_not_blamed_on_it() -> None:
    """Only the lab extra's modules are named as its: any other missing module stays Python's own error."""
    code = (
        "import sys\nfrom bandpo_lab.cli import main as m\n"
        "def boom(*a):\n    import no_such_module_xyz\n"
        "m.build_parser = boom\nsys.exit(m.main(['bounds']))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "ModuleNotFoundError: No module named 'no_such_module_xyz'" in proc.stderr
