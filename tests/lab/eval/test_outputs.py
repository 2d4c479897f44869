"""Where ``bandpo eval`` may write (:mod:`bandpo_lab.eval.outputs`): on plain files, no model loaded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bandpo_lab.eval.outputs import is_eval_output, outputs_problem


def _model(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    return folder


def test_a_rerun_replaces_its_own_earlier_outputs_and_an_empty_file(tmp_path: Path) -> None:
    results, samples, empty = tmp_path / "r.json", tmp_path / "s.jsonl", tmp_path / "e.json"
    results.write_text(json.dumps({"model": "m", "settings": {}, "datasets": {}, "overall": {}}, indent=2))
    row = {
        "dataset": "d",
        "index": 0,
        "prompt": "p",
        "completions": ["x"],
        "correct": [False],
        "answers": [None],
    }
    samples.write_text(json.dumps(row) + "\n")
    empty.touch()
    assert is_eval_output(results) and is_eval_output(samples) and not is_eval_output(empty)
    assert outputs_problem({"--output": results, "--save-samples": samples}, None) is None
    assert outputs_problem({"--output": empty, "--save-samples": None}, None) is None


def test_eval_writes_into_a_model_folder_only_its_default_results_file(tmp_path: Path) -> None:
    model = _model(tmp_path / "run")
    assert not is_eval_output(model / "model.safetensors")
    assert outputs_problem({"--output": model / "eval_results.json"}, model) is None
    for flag, path in (
        ("--save-samples", model / "eval_results.json"),
        ("--output", model / "results.json"),
        ("--output", model / "sub" / "eval_results.json"),  # inside the model evaluated, at any depth
    ):
        assert outputs_problem({flag: path}, model) == (
            f"{flag} '{path}' is inside the model folder '{model}': bandpo eval writes no file among a model's but "
            "its default results file eval_results.json; write it elsewhere"
        )


def test_eval_replaces_no_file_that_is_not_its_own(tmp_path: Path) -> None:
    notes = tmp_path / "notes.json"
    notes.write_text('{"model": "my notes"}')
    assert outputs_problem({"--save-samples": notes}, None) == (
        f"--save-samples '{notes}' exists and is not an earlier bandpo eval output: bandpo eval replaces only an "
        "empty file or its own results JSON / samples JSONL; choose a new file"
    )


@pytest.mark.parametrize("flag", ["--output", "--save-samples"])
@pytest.mark.parametrize("written", ["~/samplesdir", "$BANDPO_TEST_OUT/samplesdir"])
def test_a_home_or_variable_path_is_checked_as_the_file_written(
    flag: str, written: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``~/samplesdir`` (a directory there) passed the check, made on the raw text, and the write failed after all
    the sampling with IsADirectoryError."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("BANDPO_TEST_OUT", str(tmp_path))
    (tmp_path / "samplesdir").mkdir()
    problem = outputs_problem({flag: written}, None)
    assert problem is not None and problem.startswith(f"{flag} '{tmp_path / 'samplesdir'}' is a directory"), (
        problem
    )


def test_the_default_results_file_of_another_model_is_refused(tmp_path: Path) -> None:
    """``--model model_a --output model_b/eval_results.json`` replaced model_b's own results with model_a's: the
    default file is written only into the evaluated model's own folder (and, the model not known yet, into none)."""
    model_a, model_b = _model(tmp_path / "model_a"), _model(tmp_path / "model_b")
    checkpoint = _model(model_a / "checkpoint-2" / "m")
    target = model_b / "eval_results.json"
    for evaluated, shown in ((model_a, f" '{model_a}'"), (None, "")):
        assert outputs_problem({"--output": target}, evaluated) == (
            f"--output '{target}' is eval_results.json in the model folder '{model_b}', not in the folder of the "
            f"model evaluated (--model{shown}): bandpo eval writes eval_results.json only into the evaluated model's "
            "own folder; write it elsewhere"
        )
    # a model inside the evaluated one's folder is another model too; the evaluated one's own file, wherever named
    assert outputs_problem({"--output": checkpoint / "eval_results.json"}, model_a) is not None
    assert outputs_problem({"--output": tmp_path / "." / "model_b" / "eval_results.json"}, model_b) is None
