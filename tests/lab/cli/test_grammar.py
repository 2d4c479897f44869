"""One CLI grammar (issue "One vocabulary ... and a front page", item 4): every option's default is in its
``--help``; ``-o/--output-dir`` names a directory and ``-o/--output`` a file in every command (train and compare:
the config key ``output_dir=``), the old spellings still work with one line on stderr; every list is written with commas; an unknown flag is reported by the subcommand's
parser; every command whose work is long takes ``--dry-run`` (its checks, then its plan) and ``--no-progress``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from bandpo_lab.cli.main import COMMANDS, build_parser, main
from helpers.cli import exit_status

OUTPUT_FILE, OUTPUT_DIR, OUTPUT_KEY = "--output", "--output-dir", "output_dir="

OUTPUTS: dict[str, str | None] = {
    "bounds": None,
    "plot-bounds": OUTPUT_FILE,
    "eval": OUTPUT_FILE,
    "probe": OUTPUT_DIR,
    "demo": OUTPUT_DIR,
    "train": OUTPUT_KEY,
    "compare": OUTPUT_KEY,
}
"""Each command's output option (``-o`` is its short form; ``None``: it prints only)."""

LONG_WORK = ("train", "eval", "compare", "demo", "probe")
"""The commands whose work takes minutes: each takes ``--dry-run`` and ``--no-progress``."""


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name: action.choices[name] for name in COMMANDS}


def _renderings(default: object) -> list[str]:
    if isinstance(default, (list, tuple)):
        return [" ".join(map(str, default)), ",".join(map(str, default)), str(default)]
    if isinstance(default, float):
        return [str(default), f"{default:g}"]
    return [str(default)]


def test_every_default_is_in_the_help() -> None:
    """Each option with a default (not None, not suppressed, not an on/off flag) shows it in its help text."""
    missing = []
    for name, sub in _subparsers().items():
        formatter = sub._get_formatter()
        for action in sub._actions:
            if action.help == argparse.SUPPRESS or action.nargs == 0:
                continue
            if action.default is None or action.default == argparse.SUPPRESS:
                continue
            text = formatter._expand_help(action) if action.help is not None else ""
            choices = action.choices if action.choices is not None else getattr(action.type, "choices", None)
            if choices is not None and list(action.default) == list(choices):
                ok = "(default: all)" in text  # every choice, listed once
            else:
                ok = any(r in text for r in _renderings(action.default))
            if not ok:
                missing.append(f"bandpo {name} {'/'.join(action.option_strings) or action.dest}: {text!r}")
    assert not missing, "\n".join(missing)


def test_help_shows_defaults_and_keeps_the_epilog_layout(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["probe", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "--output-dir OUTPUT_DIR" in out and "(default: runs/probe)" in out
    assert "--output OUTPUT" not in out  # the old spelling is hidden
    assert "\nexamples:\n  bandpo probe --model" in out  # the epilog is printed as written


@pytest.mark.parametrize(
    "command,old,new,dest",
    [
        ("probe", "--output", "--output-dir", "output_dir"),
        ("plot-bounds", "--out", "--output", "output"),
    ],
)
def test_old_output_spellings_still_work(
    command: str, old: str, new: str, dest: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from bandpo_lab.cli.main import parse_args

    base = ["--model", "m"] if command == "probe" else []
    parser = build_parser([command])
    args = parse_args(parser, [command, *base, old, "x/y"])
    assert str(getattr(args, dest)) == "x/y"
    assert capsys.readouterr().err == f"bandpo {command}: {old} is now {new}\n"
    args = parse_args(parser, [command, *base, new, "x/z"])
    assert str(getattr(args, dest)) == "x/z" and capsys.readouterr().err == ""
    default = parse_args(parser, [command, *base])
    sub = parser._subparsers._group_actions[0].choices[command]
    assert getattr(default, dest) == sub._option_string_actions[new].default


def test_every_command_names_its_output_one_way() -> None:
    """Each command's output is the one option ``OUTPUTS`` gives it, with ``-o`` as its short
    form: ``-o/--output FILE`` where it writes a file, ``-o/--output-dir DIR`` where it writes a folder, the config
    key ``output_dir=`` for train and compare (no option), none for bounds; the other output spellings
    (``--out``, ``--json``, ``--output`` of a folder) are hidden aliases of it."""
    from bandpo_lab.cli._args import _DeprecatedSpelling
    from bandpo_lab.cli.main import parse_args

    subparsers = _subparsers()
    assert set(OUTPUTS) == set(subparsers)
    for name, sub in subparsers.items():
        output = OUTPUTS[name]
        named = {
            s: a
            for a in sub._actions
            for s in a.option_strings
            if s == "-o" or s.startswith(("--out", "--json"))
        }
        visible = {s for s, a in named.items() if a.help != argparse.SUPPRESS}
        if output is None or output == OUTPUT_KEY:
            assert visible == set(), (name, visible)
        else:
            assert visible == {output, "-o"}, (name, visible)
            assert named["-o"] is named[output]
        for spelling, action in named.items():
            if action.help == argparse.SUPPRESS:
                assert isinstance(action, _DeprecatedSpelling) and action.new == output, (name, spelling)
        if output == OUTPUT_KEY:  # a KEY=VALUE override of the config
            argv = [name, "--config", "c.yaml", "output_dir=runs/x"]
            assert parse_args(build_parser([name]), argv).overrides == ["output_dir=runs/x"]


@pytest.mark.parametrize("command", ["plot-bounds", "eval", "probe", "demo"])
def test_dash_o_names_the_output(command: str) -> None:
    """``bandpo probe -o runs/p`` is ``--output-dir runs/p``, ``bandpo plot-bounds -o b.svg`` ``--output b.svg``."""
    from bandpo_lab.cli.main import parse_args

    base = ["--model", "m"] if command in ("probe", "eval") else []
    dest = OUTPUTS[command].lstrip("-").replace("-", "_")
    args = parse_args(build_parser([command]), [command, *base, "-o", "out/x"])
    assert str(getattr(args, dest)) == "out/x"


def test_plot_bounds_old_out_writes_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "b.png"
    assert main(["plot-bounds", "--out", str(png), "--divergence", "kl"]) == 0
    assert png.is_file()
    assert capsys.readouterr().err == "bandpo plot-bounds: --out is now --output\n"


REPEATED = {("eval", "--dataset"): "a path may hold a comma; repeat --dataset for several"}
"""The list options that are not comma-separated, and why."""


def test_every_list_option_takes_commas() -> None:
    """Every option that takes several values (several words, a list default, an appended value, or "comma" in its
    help) is added by ``add_list_option``: the one type (``CommaList``) and action of ``cli/_args.py``, so that
    ``--divergence kl,tv`` is written as ``--rules grpo,band``, ``--methods grpo,band-kl`` and ``--ks 1,8``."""
    from bandpo_lab.cli._args import CommaList, ListOption

    listed, wrong = [], []
    for name, sub in _subparsers().items():
        for action in sub._actions:
            if not action.option_strings:  # the KEY=VALUE overrides: words, not a list option
                continue
            several = action.nargs in ("+", "*") or (isinstance(action.nargs, int) and action.nargs > 1)
            if not (
                several
                or isinstance(action.default, (list, tuple))
                or isinstance(action, (argparse._AppendAction, ListOption))
                or "comma" in (action.help or "")
            ):
                continue
            flag = max(action.option_strings, key=len)
            if (name, flag) in REPEATED:
                continue
            listed.append(f"{name} {flag}")
            if not (isinstance(action, ListOption) and isinstance(action.type, CommaList)):
                wrong.append(f"bandpo {name} {flag}")
    assert not wrong, "list options not added by add_list_option:\n" + "\n".join(wrong)
    for expected in ("bounds --divergence", "plot-bounds --divergence", "probe --rules", "compare --methods",
                     "eval --ks"):  # fmt: skip
        assert expected in listed


def test_lists_take_commas_and_the_old_spaces_still_read(capsys: pytest.CaptureFixture[str]) -> None:
    """``bounds --divergence kl,tv --p 0.08,0.5`` prints what ``--divergence kl tv --p 0.08 0.5`` printed; the
    space form still reads, with one line on stderr giving the comma form; ``--help`` shows the commas only."""
    assert exit_status(["bounds", "--divergence", "kl,tv", "--p", "0.08,0.5"]) == 0
    commas = capsys.readouterr()
    assert commas.err == "" and [r.split()[0] for r in commas.out.splitlines()[3:7]] == [
        "kl",
        "kl",
        "tv",
        "tv",
    ]
    assert exit_status(["bounds", "--divergence", "kl", "tv", "--p", "0.08", "0.5"]) == 0
    spaces = capsys.readouterr()
    assert spaces.out == commas.out
    assert spaces.err.splitlines() == [
        "bandpo bounds: --divergence takes commas now: --divergence kl,tv",
        "bandpo bounds: --p takes commas now: --p 0.08,0.5",
    ]
    assert exit_status(["bounds", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--divergence NAME[,NAME...]" in out and "0.001,0.01,0.08,0.2" in out and "[NAME ...]" not in out


def test_a_bad_list_item_is_named(capsys: pytest.CaptureFixture[str]) -> None:

    assert exit_status(["bounds", "--divergence", "kl,kll"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "bandpo bounds: error: argument --divergence: unknown divergence 'kll' (did you mean 'kl'?); choose from "
        "kl, reverse_kl, tv, chi2, neyman_chi2, hellinger, js"
    )
    assert exit_status(["bounds", "--p", "0.5,x"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "bandpo bounds: error: argument --p: items must be of type float, comma-separated, got '0.5,x'"
    )


@pytest.mark.parametrize("command", ["probe", "bounds"])
def test_unknown_flag_names_the_subcommand(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([command, *(["--model", "m"] if command == "probe" else []), "--bogus"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == f"bandpo {command}: error: unrecognized arguments: --bogus"
    assert err[0].startswith(f"usage: bandpo {command} ")


@pytest.mark.parametrize("command", ["probe", "eval"])
@pytest.mark.parametrize("text", ["{digits: [1", "[1]"], ids=["bad-yaml", "not-a-mapping"])
def test_task_options_error_is_one_line(command: str, text: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``--task-options`` is YAML in both commands (JSON reads too), with the same one-line error."""
    assert exit_status([command, "--model", "x", "--task-options", text]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"bandpo {command}: error: --task-options must be a YAML mapping like '{{")
    assert f"got {text!r}" in err[0]


def test_task_options_read_json_too() -> None:
    from bandpo_lab.cli._args import yaml_mapping

    assert yaml_mapping("--x", '{"digits": [1, 2]}', "{}") == yaml_mapping("--x", "{digits: [1, 2]}", "{}")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["probe", "--model", "m", "--output-dir", "{file}"],
            "--output-dir '{file}' is a file; it must be a directory",
        ),
        (
            ["probe", "--model", "m", "--output-dir", "{file}/sub"],
            "--output-dir '{file}/sub' is inside '{file}', which is a file",
        ),
    ],
)
def test_output_paths_are_checked_before_the_work(
    tmp_path: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An output path that cannot be written is refused in one line before minutes of work (the probe loads a
    model); nothing is written."""
    file = tmp_path / "a_file"
    file.write_text("x")
    fill = {"tmp": str(tmp_path), "file": str(file)}
    assert exit_status([a.format(**fill) for a in argv]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"bandpo {argv[0]}: error: {message.format(**fill)}"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


@pytest.mark.parametrize("command", ["probe", "eval"])
def test_unknown_task_option_is_named_as_the_command_spells_it(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown key of ``--task-options`` is named ``task_options.KEY`` (not the train config's
    ``data.task_options.KEY``), with the closest valid key, in one line."""
    from helpers.tiny import save_countdown_model_dir

    # probe reads the task before the model; eval checks the model directory first
    model = "smollm2-135m" if command == "probe" else str(save_countdown_model_dir(tmp_path))
    capsys.readouterr()  # saving the model writes a progress bar
    argv = [command, "--model", model, "--dataset", "arith", "--task-options", "{digitz: [1]}"]
    assert exit_status(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"bandpo {command}: error: task_options for task 'arith': unknown config key 'task_options.digitz' (did "
        "you mean 'task_options.digits'?). Keys of task_options: digits, second_digits, operators, nonnegative, "
        "n_train, n_test, seed"
    ]


def test_bandpo_version_and_bandpo_help_work(capsys: pytest.CaptureFixture[str]) -> None:
    """``bandpo --version`` was unknown and ``bandpo help`` refused: the version prints, ``bandpo help`` is
    ``bandpo --help`` and ``bandpo help COMMAND`` that command's ``--help``."""
    from bandpo import __version__

    assert exit_status(["--version"]) == 0
    assert capsys.readouterr().out == f"bandpo {__version__}\n"
    assert exit_status(["--help"]) == 0
    top = capsys.readouterr().out
    assert exit_status(["help"]) == 0
    assert capsys.readouterr().out == top and "bandpo help COMMAND" in top
    assert exit_status(["bounds", "--help"]) == 0
    bounds = capsys.readouterr().out
    assert exit_status(["help", "bounds"]) == 0
    assert capsys.readouterr().out == bounds and bounds.startswith("usage: bandpo bounds ")
    assert exit_status(["help", "bogus"]) == 2
    assert "invalid choice: 'bogus'" in capsys.readouterr().err


def test_every_command_whose_work_is_long_has_dry_run_and_no_progress() -> None:
    """``train``, ``compare`` and ``demo`` had ``--dry-run``, ``eval`` and ``probe`` none: every command of
    ``LONG_WORK`` takes both ``--dry-run`` and ``--no-progress``; the
    others (``bounds``, ``plot-bounds``) print in a second."""
    subparsers = _subparsers()
    assert set(subparsers) - set(LONG_WORK) == {"bounds", "plot-bounds"}
    missing = [
        f"bandpo {name} {flag}"
        for name in LONG_WORK
        for flag in ("--dry-run", "--no-progress")
        if flag not in subparsers[name]._option_string_actions
    ]
    assert not missing, missing


def _fail(what: str) -> Any:
    def fail(*args: Any, **kwargs: Any) -> None:
        pytest.fail(f"a dry run {what}")

    return fail


@pytest.mark.parametrize("command", ["eval", "eval-builtin", "probe"])
def test_dry_run_checks_prints_the_plan_and_does_no_work(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``bandpo eval/probe --dry-run``: the command's checks, then its plan in a few lines (the
    model, the data, the sizes, the outputs), exit 0; no model built, converted or loaded, no work, nothing
    written."""
    from helpers.tiny import save_countdown_model_dir

    model = save_countdown_model_dir(tmp_path / "model")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    capsys.readouterr()
    for target, what in (
        ("bandpo_lab.eval.models.load_model", "loaded a model"),
        ("bandpo_lab.models.builtin_model_dir", "converted a built-in model"),
        ("bandpo_lab.training.tasks.build_task_model", "built the tiny model"),
        ("bandpo_lab.eval.evaluate.evaluate_model_dir", "evaluated"),
    ):
        monkeypatch.setattr(target, _fail(what))
    out = tmp_path / "out"
    argv, expected = {
        "eval": (
            ["eval", "--model", str(model), "--k", "2", "--max-problems", "3", "-o", f"{out}/r.json"],
            [f"model {model}", "dataset countdown/test: 3 problems, verifier countdown", f"results {out}/r.json"],
        ),
        "eval-builtin": (
            ["eval", "--model", "smollm2-135m", "--dataset", "arith", "--save-samples", f"{out}/s.jsonl"],
            ["model the built-in model 'smollm2-135m' (converted and cached on first use)", "up to 16 new tokens",
             "results eval_results.json in the model's folder; samples"],
        ),
        "probe": (
            ["probe", "--model", str(model), "--dataset", "countdown", "--batches", "2", "-o", str(out)],
            [f"model {model}", "2 batch(es) of 4 prompts", f"outputs results.json, results.md, probe.png in {out}/"],
        ),
    }[command]  # fmt: skip
    assert exit_status([*argv, "--dry-run", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    name = argv[0]
    assert printed.startswith(f"bandpo {name}: dry run: the plan ("), printed
    assert len(printed.splitlines()) <= 10
    for text in expected:
        assert text in printed, (text, printed)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing written


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["probe", "--model", "smollm2-135m", "--prompts", "999"],
            "--prompts 999 is more than the 155 problems",
        ),
        (["eval", "--model", "tiny", "--dataset", "countdwon"], "dataset 'countdwon' does not exist"),
        (["eval", "--model", "{tmp}/none"], "model directory '{tmp}/none' does not exist"),
    ],
)
def test_dry_run_makes_the_commands_checks(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dry run refuses what the command refuses before its work, in the same one line, exit 2."""
    assert exit_status([*(a.format(tmp=tmp_path) for a in argv), "--dry-run"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"bandpo {argv[0]}: error: {message.format(tmp=tmp_path)}" in captured.err.splitlines()[-1]


@pytest.mark.parametrize("command", ["probe", "eval"])
def test_task_options_of_nested_aliases_are_refused_in_one_line(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--task-options`` holding a 'billion laughs' ran until killed: its aliases are bounded as an override's
    and a config file's are, in one line naming the flag."""
    import time

    levels = ["&a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    levels += [f"&a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    text = "{x: [" + ", ".join(levels) + "]}"
    started = time.perf_counter()
    assert exit_status([command, "--model", "x", "--task-options", text, "--dry-run"]) == 2
    assert time.perf_counter() - started < 5
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"bandpo {command}: error: --task-options must be a YAML mapping"
    )
    assert err[0].endswith(
        "with the alias *a3 the value's aliases stand for more than 10000 values (nested aliases repeat a value "
        "at every level, a 'billion laughs'); write the values out"
    )
