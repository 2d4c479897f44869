"""``bandpo probe``'s command line (``cli/probe.py``) up to the work: errors name the flags the user typed, the
task options it hands on, and the checks made before minutes of sampling (matplotlib for the figure). The probe
itself is tested in tests/lab/experiments/test_llm_probe.py."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import pytest

from bandpo_lab.cli.main import main


def _error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one stderr line of ``bandpo probe ARGV``, which must exit with status 2."""
    with pytest.raises(SystemExit) as exc:
        main(["probe", "--model", "x", *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.removesuffix("\n")


FLAG_ERRORS = [  # (argv, the error's start)
    (["--lr", "0"], "--lr must be a finite number > 0, got 0.0"),
    (["--group-size", "1"], "--group-size must be an integer >= 2, got 1"),
    (["--batches", "0"], "--batches must be an integer >= 1, got 0"),
    (["--updates", "1"], "--updates must be an integer >= 2, got 1"),
    (["--prompts", "0"], "--prompts must be an integer >= 1, got 0"),
    (["--max-new-tokens", "0"], "--max-new-tokens must be an integer >= 1, got 0"),
    (["--temperature", "-1"], "--temperature must be a finite number > 0, got -1.0"),
    (["--seed", "-1"], "--seed must be an integer in [0, 4294967295] (numpy's seed range), got -1"),
    # as training's seed: a larger one passed the dry run
    (
        ["--seed", "99999999999999999999"],
        "--seed must be an integer in [0, 4294967295] (numpy's seed range), got 99999999999999999999",
    ),
    (
        ["--seed", "4294967295", "--batches", "3"],
        "--seed must be at most 4294967293 with batches 3 (batch b is seeded seed + b, in numpy's seed range",
    ),
    (["--precision", "fp8"], "--precision must be one of auto, float32, bf16, got 'fp8'"),
    (["--rules", ","], "--rules must name at least one clip rule, got ','"),
    (["--rules", "grpo,bandd"], "--rules: unknown clip rule 'bandd' (did you mean 'band'?); valid names: "),
    # results are keyed by rule: the second ran again and replaced the first's
    (["--rules", "grpo,band,grpo"], "--rules must name each clip rule once, got grpo, band, grpo"),
]


@pytest.mark.parametrize(("argv", "message"), FLAG_ERRORS, ids=[" ".join(argv) for argv, _ in FLAG_ERRORS])
def test_probe_errors_name_the_flags(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad value is reported under the flag the user typed (``--lr``), not ``ProbeConfig``'s field
    (``learning_rate``), as ``--precision`` already was; nothing is written."""
    err = _error([*argv, "--output-dir", str(tmp_path / "out")], capsys)
    assert err.startswith(f"bandpo probe: error: {message}"), err
    assert not (tmp_path / "out").exists()


@pytest.fixture
def probe_options(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The ``options`` each ``bandpo probe`` call hands to the work (``_run``, replaced: nothing is sampled)."""
    seen: list[Any] = []

    def fake_run(args: argparse.Namespace, config: Any, options: Any) -> int:
        seen.append(options)
        return 0

    monkeypatch.setattr("bandpo_lab.cli.probe._run", fake_run)
    return seen


@pytest.mark.parametrize(
    ("argv", "options"),
    [
        ([], {"digits": [1], "n_train": 155, "n_test": 100}),  # arith, the one-digit set
        (["--task-options", '{"digits": [1, 2]}'], {"digits": [1, 2]}),  # JSON
        (["--task-options", "{digits: [1, 2]}"], {"digits": [1, 2]}),  # YAML
        (["--dataset", "countdown"], None),  # only arith has a default
    ],
    ids=["arith-default", "json", "yaml", "other-task"],
)
def test_probe_task_options_are_yaml_and_arith_defaults_to_one_digit(
    argv: list[str], options: Any, probe_options: list[Any], tmp_path: Path
) -> None:
    """``--task-options`` reads YAML (and so JSON) as ``bandpo eval`` does; without it the arith task is the
    one-digit set, where most groups carry signal (``ARITH_DEFAULT``), and other tasks get their own defaults."""
    assert main(["probe", "--model", "x", *argv, "--no-figures", "--output-dir", str(tmp_path / "out")]) == 0
    assert probe_options == [options]


def test_probe_arith_default_is_a_valid_task_config() -> None:
    import yaml

    from bandpo_lab.cli.probe import ARITH_DEFAULT
    from bandpo_lab.tasks.arith import ArithConfig

    default = ArithConfig(**yaml.safe_load(ARITH_DEFAULT))
    assert default.digits == [1] and default.n_train + default.n_test <= 255


def test_probe_checks_matplotlib_before_the_work(
    monkeypatch: pytest.MonkeyPatch,
    probe_options: list[Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Without matplotlib (the ``plots`` extra) the probe stops before sampling, not after minutes of work with
    its table unprinted; ``--no-figures`` needs no matplotlib."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    out = str(tmp_path / "out")
    err = _error(["--output-dir", out], capsys)
    assert err.startswith("bandpo probe: error: figures need matplotlib, which is not installed: ")
    assert err.endswith("; or pass --no-figures") and probe_options == []
    assert main(["probe", "--model", "x", "--no-figures", "--output-dir", out]) == 0
    assert len(probe_options) == 1


def test_probe_more_prompts_than_problems_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found when the task is read, before any model loads."""
    argv = ["--task-options", "{digits: [1], n_train: 3, n_test: 2}", "--prompts", "5", "--no-figures"]
    err = _error([*argv, "--output-dir", str(tmp_path / "out")], capsys)
    assert err == "bandpo probe: error: --prompts 5 is more than the 3 problems of arith/train"


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]], ids=["run", "dry-run"])
def test_probe_a_bad_attention_is_one_line_before_the_work(
    dry_run: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--attn-implementation`` reaches the model's loading (as ``bandpo eval``'s): a name transformers does not
    know was refused only once the model had loaded, and passed ``--dry-run``; it is one line naming the flag
    before any model loads (as eval's), and nothing is written."""
    from helpers.tiny import save_countdown_model_dir

    model = save_countdown_model_dir(tmp_path / "model")
    capsys.readouterr()
    argv = ["probe", "--model", str(model), "--dataset", "countdown", "--prompts", "2", "--no-figures",
            "--attn-implementation", "no-such", "--output-dir", str(tmp_path / "out"), *dry_run]  # fmt: skip
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "bandpo probe: error: --attn-implementation='no-such' is not an attention implementation transformers "
        "knows"
    ), err
    assert err.count("\n") == 1 and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("files", "taken"),
    [
        ({"results.json": '{"k": 8, "methods": []}', "results.md": "# report"}, "results.json, results.md"),
        ({"probe.png": "a user's figure"}, "probe.png"),
        (
            {"results.json": '{"config": {}, "batches": [], "summary": {}, "model_dir": "m"}'},
            None,
        ),  # a probe's
        ({"notes.md": "mine"}, None),  # the probe writes no file of that name
    ],
    ids=["a-comparison-report", "a-user-figure", "an-earlier-probe", "other-files"],
)
def test_probe_replaces_only_its_own_results(
    files: dict[str, str],
    taken: str | None,
    probe_options: list[Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--output-dir`` naming a folder with results.json / results.md / probe.png that the probe did not write (a
    comparison's report/, a user's folder) had them replaced; that is refused in one line before any work."""
    out = tmp_path / "out"
    out.mkdir()
    for name, text in files.items():
        (out / name).write_text(text)
    argv = ["--no-figures", "--output-dir", str(out)]
    if taken is None:
        assert main(["probe", "--model", "x", *argv]) == 0 and len(probe_options) == 1
    else:
        assert _error(argv, capsys) == (
            f"bandpo probe: error: --output-dir {str(out)!r} holds {taken}, not an earlier bandpo probe's results: "
            "the probe replaces only its own; choose another --output-dir"
        )
        assert probe_options == []
    assert {p.name: p.read_text() for p in out.iterdir()} == files


def test_probe_output_dir_reads_variables_as_eval_does(
    probe_options: list[Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--output-dir '$OUT/p'`` was taken literally (a folder named ``$OUT`` in the working directory); now
    expanded like eval's and train's paths, and an unset variable is one line."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OUT", str(tmp_path / "elsewhere"))
    seen: list[str] = []
    monkeypatch.setattr(
        "bandpo_lab.cli.probe._run", lambda args, config, options: seen.append(args.output_dir) or 0
    )
    assert main(["probe", "--model", "x", "--no-figures", "--output-dir", "$OUT/p"]) == 0
    assert seen == [str(tmp_path / "elsewhere" / "p")]
    monkeypatch.delenv("OUT")
    err = _error(["--output-dir", "$OUT/p"], capsys)
    assert err.startswith(
        "bandpo probe: error: --output-dir '$OUT/p' names the environment variable $OUT, which is"
    )


@pytest.mark.parametrize("where", ["the-model-folder", "inside-it", "another-models-folder"])
def test_probe_writes_no_file_among_a_models(
    where: str, probe_options: list[Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--output-dir`` the probed model's folder (or a folder inside it, or another model's) was accepted; refused
    in one line as ``bandpo eval`` refuses its outputs there."""
    model = tmp_path / "mymodel"
    other = tmp_path / "other"
    for folder in (model, other):
        folder.mkdir()
        (folder / "config.json").write_text("{}")
        (folder / "model.safetensors").write_bytes(b"weights")
    out = {"the-model-folder": model, "inside-it": model / "probe", "another-models-folder": other}[where]
    with pytest.raises(SystemExit) as exc:
        main(["probe", "--model", str(model), "--no-figures", "--output-dir", str(out)])
    assert exc.value.code == 2 and probe_options == []
    folder = other if where == "another-models-folder" else model
    how = "is inside" if where == "inside-it" else "is"
    assert capsys.readouterr().err == (
        f"bandpo probe: error: --output-dir {str(out)!r} {how} the model folder {str(folder)!r}: bandpo probe "
        "writes no file among a model's; write it elsewhere\n"
    )
    assert sorted(p.name for p in model.iterdir()) == ["config.json", "model.safetensors"]


@pytest.mark.parametrize("where", ["~", ".", "..", "the home directory by name"])
def test_probe_writes_no_file_among_the_users_in_the_working_or_home_directory(
    where: str,
    probe_options: list[Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--output-dir ~`` or ``.`` was accepted, the probe's results.json, results.md and probe.png written among the
    user's files there (``bandpo train`` refuses such a folder): refused in one line; empty, or an earlier probe's
    results, it is taken."""
    home, work = tmp_path / "home", tmp_path / "home" / "work"
    work.mkdir(parents=True)
    (work / "notes.md").write_text("mine")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    out = {"~": "~", ".": ".", "..": "..", "the home directory by name": str(home)}[where]
    target = home if where != "." else work
    what = "the working directory" if where == "." else "the home directory"
    shown = f"{out!r} is {what} ({str(target)!r})" if out in (".", "..") else f"{str(target)!r} is {what}"
    assert _error(["--no-figures", "--output-dir", out], capsys) == (
        f"bandpo probe: error: --output-dir {shown}, which holds other files: bandpo probe would write its own among "
        "them; choose a new or empty folder for it"
    )
    assert probe_options == []
    (target / "results.json").write_text('{"config": {}, "batches": [], "summary": {}, "model_dir": "m"}')
    assert main(["probe", "--model", "x", "--no-figures", "--output-dir", out]) == 0  # an earlier probe's
    assert len(probe_options) == 1
