"""Tests for bandpo_lab.eval.datasets: built-in task splits, local files, the training run's task options."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bandpo_lab.eval.datasets import (
    check_eval_specs,
    load_eval_dataset,
    resolve_eval_datasets,
    task_options_of_run,
)
from bandpo_lab.eval.errors import EvalError
from bandpo_lab.eval.scorers import verifier_names


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_task_dataset() -> None:
    data = load_eval_dataset("countdown")
    assert data.name == "countdown/test" and data.verifier == "countdown" and len(data.problems) == 200
    assert load_eval_dataset("countdown", split="train", max_problems=7).problems[0]["prompt"].endswith("=")
    assert len(load_eval_dataset("countdown", task_options={"n_test": 50}).problems) == 50
    with pytest.raises(EvalError, match=r"split must be one of train, test for task 'countdown', got 'dev'"):
        load_eval_dataset("countdown", split="dev")
    with pytest.raises(EvalError, match=r"task_options for task 'countdown': unknown config key"):
        load_eval_dataset("countdown", task_options={"n_tset": 5})


def test_file_datasets(tmp_path: Path) -> None:
    rows = [{"question": f"q{i}", "meta": {"gt": str(i)}} for i in range(5)]
    path = write_jsonl(tmp_path / "test.jsonl", rows)
    data = load_eval_dataset(str(path), prompt_column="question", answer_column="meta.gt", verifier="boxed")
    assert data.name == "test" and data.verifier == "boxed"
    assert data.problems[3] == {"prompt": "q3", "answer": "3"}
    # a directory: the files of the split
    assert (
        len(load_eval_dataset(str(tmp_path), prompt_column="question", answer_column="meta.gt").problems) == 5
    )
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    pq.write_table(pa.Table.from_pylist([{"prompt": "p", "answer": "1"}]), tmp_path / "x.parquet")
    assert load_eval_dataset(str(tmp_path / "x.parquet")).problems == [{"prompt": "p", "answer": "1"}]


def test_file_dataset_errors(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [{"question": "q", "solution": "1"}])
    with pytest.raises(
        EvalError,
        match=r"prompt_column='prompt' is not a column of .*d.jsonl'; its columns: question, solution",
    ):
        load_eval_dataset(str(path))
    with pytest.raises(
        EvalError, match=r"answer_column='answer' is not a column of .*; its columns: question, solution"
    ):
        load_eval_dataset(str(path), prompt_column="question")
    with pytest.raises(EvalError, match=r"dataset 'nope.jsonl' does not exist"):
        load_eval_dataset("nope.jsonl")
    with pytest.raises(EvalError, match=r"verifier must be one of dapo, boxed.*countdown, got 'exact'"):
        load_eval_dataset(str(path), prompt_column="question", answer_column="solution", verifier="exact")
    write_jsonl(tmp_path / "e.jsonl", [{"prompt": "", "answer": "1"}])
    with pytest.raises(EvalError, match=r"row 0 of .*e.jsonl'.*non-empty string"):
        load_eval_dataset(str(tmp_path / "e.jsonl"))
    # eval's flags and compare's eval keys have no format setting: the message named 'data_format' as a way out
    (tmp_path / "d.txt").write_text("{}\n")
    with pytest.raises(EvalError) as err:
        load_eval_dataset(str(tmp_path / "d.txt"))
    assert str(err.value).endswith(
        "cannot tell its format from the suffix '.txt'; use one of .jsonl, .json, .parquet"
    )
    assert set(verifier_names()) >= {"dapo", "boxed", "countdown"}


def test_task_options_of_run(tmp_path: Path) -> None:
    (tmp_path / "checkpoint-4").mkdir()
    (tmp_path / "train_config.yaml").write_text("data: {task: countdown, task_options: {n_test: 30}}\n")
    assert task_options_of_run(tmp_path / "checkpoint-4", "countdown") == {"n_test": 30}
    assert task_options_of_run(tmp_path, "other") is None
    assert task_options_of_run(tmp_path / "a" / "nowhere", "countdown") is None


def test_home_paths_of_the_run_and_of_dataset_files_are_expanded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``~`` path is a file (no task options passed to it, which was refused) and a ``~`` run directory gives
    its task options."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "train_config.yaml").write_text(
        "data: {task: countdown, task_options: {n_test: 30}}\n"
    )
    write_jsonl(tmp_path / "math.jsonl", [{"prompt": "p", "answer": "1"}])
    assert task_options_of_run("~/run", "countdown") == {"n_test": 30}
    messages: list[str] = []
    data = resolve_eval_datasets(["countdown", "~/math.jsonl"], "~/run", report=messages.append)
    assert [(d.name, len(d.problems)) for d in data] == [("countdown/test", 30), ("math", 1)]
    assert messages == ["countdown: task options of the training run: {'n_test': 30}"]
    given = resolve_eval_datasets(["countdown", "~/math.jsonl"], task_options={"n_test": 20})
    assert [(d.name, len(d.problems)) for d in given] == [("countdown/test", 20), ("math", 1)]


def test_resolve_eval_datasets(tmp_path: Path) -> None:
    """The run's task options reach its task (and are reported), files get none, repeated names get #2."""
    (tmp_path / "train_config.yaml").write_text("data: {task: countdown, task_options: {n_test: 30}}\n")
    path = write_jsonl(tmp_path / "math.jsonl", [{"prompt": "p", "answer": "1"}])
    messages: list[str] = []
    data = resolve_eval_datasets(["countdown", str(path), "countdown"], tmp_path, report=messages.append)
    assert [d.name for d in data] == ["countdown/test", "math", "countdown/test#2"]
    assert [len(d.problems) for d in data] == [30, 1, 30]
    assert messages == ["countdown: task options of the training run: {'n_test': 30}"] * 2
    # given options win over the run's (nothing reported) and are not passed to files
    given = resolve_eval_datasets(
        [str(path), "countdown"], tmp_path, task_options={"n_test": 5}, max_problems=4
    )
    assert [len(d.problems) for d in given] == [1, 4] and len(messages) == 2
    # given options change the run's, the others stay the run's: n_test 5 of the run's 30 (test first)
    fewer = resolve_eval_datasets(["countdown"], tmp_path, task_options={"n_test": 5})[0]
    assert [p["prompt"] for p in fewer.problems] == [p["prompt"] for p in data[0].problems[:5]]
    # options that move the test split onto the run's training problems are refused, naming the overlap
    for options, shared, total in (({"n_test": 300}, 270, 300), ({"seed": 1}, None, 30)):
        with pytest.raises(
            EvalError,
            match=rf"(?s){shared if shared else '[1-9][0-9]*'} of the {total} evaluation "
            r"problems are in the training split of the run \(its task options: \{'n_test': 30\}\)",
        ):
            resolve_eval_datasets(["countdown"], tmp_path, task_options=options)
    assert len(
        resolve_eval_datasets(["countdown"], tmp_path, task_options={"seed": 1}, split="train")[0].problems
    )
    assert len(resolve_eval_datasets(["countdown"])[0].problems) == 200  # no model: the task's defaults
    with pytest.raises(EvalError, match=r"split must be one of train, test for task 'countdown', got 'dev'"):
        resolve_eval_datasets(["countdown"], tmp_path, split="dev")


def test_check_eval_specs_reads_no_data(tmp_path: Path) -> None:
    """The checks a command makes before it loads a model: tasks and their splits, files that exist; the tasks
    are returned (``[]``: files only, which take no task options)."""
    (tmp_path / "d.jsonl").write_text("not JSON: the check does not read it\n")
    assert check_eval_specs(["countdown", str(tmp_path / "d.jsonl"), "arith"]) == ["countdown", "arith"]
    assert check_eval_specs([str(tmp_path / "d.jsonl")]) == []
    assert check_eval_specs(["countdown"], split="train") == ["countdown"]
    with pytest.raises(EvalError, match="split must be one of train, test for task 'countdown', got 'val'"):
        check_eval_specs(["countdown"], split="val")
    with pytest.raises(EvalError, match="dataset 'countdwon' does not exist"):
        check_eval_specs(["countdown", "countdwon"])
    with pytest.raises(EvalError, match="dataset must be a task name"):
        check_eval_specs([" "])


def test_an_eval_dataset_with_a_byte_that_is_not_utf8_is_refused_naming_the_file_and_the_offset(
    tmp_path: Path,
) -> None:
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"prompt": "\xe9t\xe9", "answer": "1"}\n')
    with pytest.raises(EvalError) as err:
        load_eval_dataset(str(path))
    assert str(err.value) == (
        f"dataset {str(path)!r} is not UTF-8 text: byte 0xe9 at byte offset 12 (line 1: invalid continuation "
        "byte); save the file as UTF-8"
    )


def test_an_eval_prompt_template_without_prompt_or_with_another_field_is_refused_before_the_data() -> None:
    with pytest.raises(EvalError, match=r"^prompt_template must contain \{prompt\}, got 'Solve it.'$"):
        load_eval_dataset("countdown", prompt_template="Solve it.")
    with pytest.raises(
        EvalError, match=r"^prompt_template must be a format string whose only field is \{prompt\}"
    ):
        load_eval_dataset("nope.jsonl", prompt_template="Q: {question}")  # before the missing file


def test_unscorable_reason_names_the_first_ground_truth_and_stops_at_a_scorable_one() -> None:
    """``bandpo eval`` refuses a dataset with this reason before any model loads (it sampled, then scored nothing)."""
    from bandpo_lab.eval.datasets import EvalDataset, unscorable_reason

    def dataset(answers: list[Any], verifier: str = "dapo") -> EvalDataset:
        problems = [{"prompt": "1,2,3:6=", "answer": a} for a in answers]
        return EvalDataset(name="d", source="d.jsonl", verifier=verifier, problems=problems)

    assert (
        unscorable_reason(dataset([float("nan"), "", "6"])) is None
    )  # one is enough: the others are left out
    assert (
        unscorable_reason(dataset([None], verifier="countdown")) is None
    )  # a task verifier reads the prompt
    reason = unscorable_reason(dataset([{"x": 1}, None]))
    assert reason is not None and reason.startswith(
        "the dapo verifier can score none of its 2 problems (problem 0: the ground truth {'x': 1}: ground_truth must "
        "be a string, a finite number or a non-empty list of them"
    )
