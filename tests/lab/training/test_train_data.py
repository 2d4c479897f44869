"""Tests for ``bandpo_lab.training.data``: JSONL / JSON / parquet files, custom and nested columns, directory splits,
the missing-column errors, and prompt formatting with and without a chat template."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("datasets")

from bandpo_lab.tasks.tiny_model import build_tokenizer
from bandpo_lab.training.config import ConfigError, DataConfig
from bandpo_lab.training.data import build_prompt_dataset, load_problems, read_records, resolve_data_files

ROWS = [
    {"question": "What is 1+1?", "solution": 2, "source": "a"},
    {"question": "What is 2+3?", "solution": "5", "source": "b"},
    {"question": "What is 3*3?", "solution": "9", "source": "c"},
]
CHAT_TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "\n")
    return path


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def data_config(path: Any, **kwargs: Any) -> DataConfig:
    return DataConfig(path=str(path) if isinstance(path, Path) else path, **kwargs)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "json"])
def test_custom_columns(tmp_path: Path, fmt: str) -> None:
    rows = [{**r, "solution": str(r["solution"])} for r in ROWS] if fmt == "parquet" else ROWS
    if fmt == "jsonl":
        path = write_jsonl(tmp_path / "train.jsonl", rows)
    elif fmt == "parquet":
        path = write_parquet(tmp_path / "train.parquet", rows)
    else:
        path = tmp_path / "train.json"
        path.write_text(json.dumps(rows))
    cfg = data_config(path, prompt_column="question", answer_column="solution", keep_columns=["source"])
    problems = load_problems(cfg, need_answer=True)
    assert problems == [
        {"prompt": "What is 1+1?", "answer": "2", "source": "a"},  # numbers become strings
        {"prompt": "What is 2+3?", "answer": "5", "source": "b"},
        {"prompt": "What is 3*3?", "answer": "9", "source": "c"},
    ]
    assert load_problems(data_config(path, prompt_column="question", max_samples=2), need_answer=False) == [
        {"prompt": "What is 1+1?"},
        {"prompt": "What is 2+3?"},
    ]


@pytest.mark.parametrize("max_samples", [None, 3, 2])
def test_answers_mixing_strings_and_lists_become_lists_with_or_without_max_samples(
    max_samples: int | None, tmp_path: Path
) -> None:
    """One list answer makes every answer a list (Arrow refuses a column of strings and lists); with
    data.max_samples the early stop skipped that and building the dataset raised ArrowTypeError."""
    rows = [
        {"prompt": "q1", "answer": "1"},
        {"prompt": "q2", "answer": ["2", "two"]},
        {"prompt": "q3", "answer": "3"},
    ]
    cfg = data_config(write_jsonl(tmp_path / "mixed.jsonl", rows), max_samples=max_samples)
    problems = load_problems(cfg, need_answer=True)
    expected = [["1"], ["2", "two"], ["3"]][: max_samples or 3]
    assert [p["answer"] for p in problems] == expected
    assert build_prompt_dataset(problems, cfg, build_tokenizer())["answer"] == expected


def test_verl_parquet_with_messages_and_nested_answer(tmp_path: Path) -> None:
    rows = [
        {
            "prompt": [{"role": "user", "content": "Solve 1+1. Answer: $Answer"}],
            "reward_model": {"ground_truth": "2", "style": "rule"},
            "data_source": "math_dapo",
        }
    ]
    path = write_parquet(tmp_path / "dapo.parquet", rows)
    cfg = data_config(path, answer_column="reward_model.ground_truth", system_prompt="Be brief.")
    problems = load_problems(cfg, need_answer=True)
    assert problems == [
        {"prompt": [{"role": "user", "content": "Solve 1+1. Answer: $Answer"}], "answer": "2"}
    ]

    tokenizer = build_tokenizer()
    with pytest.raises(ConfigError, match=r"holds chat messages but the tokenizer has no chat template"):
        build_prompt_dataset(problems, cfg, tokenizer)
    tokenizer.chat_template = CHAT_TEMPLATE
    dataset = build_prompt_dataset(problems, cfg, tokenizer)
    assert dataset[0]["prompt"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Solve 1+1. Answer: $Answer"},
    ]


def test_missing_columns_name_the_columns_there(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", ROWS)
    with pytest.raises(
        ConfigError,
        match=r"data.prompt_column='prompt' is not a column of data.path '.*d.jsonl'; its columns: question, "
        r"solution, source",
    ):
        load_problems(data_config(path), need_answer=False)
    with pytest.raises(
        ConfigError, match=r"data.answer_column='answer' is not a column.*question, solution, source"
    ):
        load_problems(data_config(path, prompt_column="question"), need_answer=True)
    with pytest.raises(ConfigError, match=r"data.keep_columns='level' is not a column"):
        load_problems(data_config(path, prompt_column="question", keep_columns=["level"]), need_answer=False)
    nested = write_jsonl(tmp_path / "n.jsonl", [{"q": "x", "meta": {"gt": "1"}}])
    with pytest.raises(ConfigError, match=r"its columns: q, meta \(with keys gt\)"):
        load_problems(data_config(nested, prompt_column="q", answer_column="meta.answer"), need_answer=True)
    # The reward reads a column the data does not provide.
    with pytest.raises(
        ConfigError, match=r"the reward reads the dataset column 'solution'.*data.answer_column"
    ):
        load_problems(
            data_config(path, prompt_column="question"), need_answer=False, answer_columns=["solution"]
        )


def test_numeric_answers_are_written_out_and_scored_as_eval_scores_them(tmp_path: Path) -> None:
    """str() gave '1e-05' and '1e+16', which no reply matches: the correct reply scored -1 in training while bandpo
    eval's verifier marked it correct."""
    from bandpo_lab.eval.scorers import get_scorer
    from bandpo_lab.rewards.verifiers import verify_dapo

    rows = [
        {"prompt": "tiny=", "answer": 1e-05},
        {"prompt": "big=", "answer": 1e16},
        {"prompt": "int=", "answer": 7},
        {"prompt": "list=", "answer": [0.5, "1/2"]},
    ]
    problems = load_problems(data_config(write_jsonl(tmp_path / "sci.jsonl", rows)), need_answer=True)
    assert [p["answer"] for p in problems] == [
        ["0.00001"],
        ["10000000000000000"],
        ["7"],
        ["0.5", "1/2"],
    ]  # one list answer makes every answer a list
    score, _ = get_scorer("dapo")
    for row, problem, reply in zip(
        rows, problems, ["Answer: 0.00001", "Answer: 10000000000000000", "Answer: 7", "Answer: 1/2"]
    ):
        assert verify_dapo(reply, problem["answer"]).correct  # training's reward
        assert score("", reply, row["answer"])[0]  # eval's


@pytest.mark.parametrize(
    ("answer", "shown"),
    [
        (float("nan"), "got nan"),
        ({"x": 1}, "got {'x': 1}"),
        ("", "'' is empty after normalisation"),
        (True, "got True"),
        ([], "got []"),
    ],
)
def test_answers_eval_cannot_score_are_refused_naming_file_row_and_value(
    tmp_path: Path, answer: Any, shown: str
) -> None:
    """NaN scored +1 for the reply 'Answer: nan' and a mapping never matched; bandpo eval refuses both."""
    path = write_jsonl(
        tmp_path / "d.jsonl", [{"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": answer}]
    )
    with pytest.raises(ConfigError) as info:
        load_problems(data_config(path), need_answer=True)
    message = str(info.value)
    assert message.startswith(f"row 1 of data.path {str(path)!r}: data.answer_column 'answer': ")
    assert shown in message and "bandpo eval" in message


def test_bad_rows(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "d.jsonl", [{"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": None}]
    )
    with pytest.raises(
        ConfigError, match=r"row 1 of data.path .* has no ground truth in data.answer_column 'answer'"
    ):
        load_problems(data_config(path), need_answer=True)
    assert load_problems(data_config(path), need_answer=False) == [
        {"prompt": "a", "answer": "1"},
        {"prompt": "b"},
    ]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a"}\n{"prompt": \n')
    with pytest.raises(ConfigError, match=r"line 2 is not valid JSON"):
        read_records(bad)
    weird = tmp_path / "x.csv"
    weird.write_text("prompt\na\n")
    with pytest.raises(ConfigError, match=r"cannot tell its format from the suffix '.csv'"):
        read_records(weird)
    nums = write_jsonl(tmp_path / "nums.jsonl", [{"prompt": 3, "answer": "1"}])
    with pytest.raises(ConfigError, match=r"must hold a string or a list of chat messages"):
        load_problems(data_config(nums), need_answer=False)


def test_directory_splits(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "ds" / "train.jsonl", ROWS[:2])
    write_parquet(tmp_path / "hf" / "data" / "train-00000-of-00002.parquet", [{"prompt": "p0"}])
    write_parquet(tmp_path / "hf" / "data" / "train-00001-of-00002.parquet", [{"prompt": "p1"}])
    write_parquet(tmp_path / "hf" / "data" / "test-00000-of-00001.parquet", [{"prompt": "t0"}])
    assert resolve_data_files(data_config(tmp_path / "ds")) == [tmp_path / "ds" / "train.jsonl"]
    problems = load_problems(data_config(tmp_path / "hf"), need_answer=False)
    assert [p["prompt"] for p in problems] == ["p0", "p1"]
    assert load_problems(data_config(tmp_path / "hf", split="test"), need_answer=False) == [{"prompt": "t0"}]
    with pytest.raises(
        ConfigError, match=r"has no file for data.split='validation'.*data files there: .*train"
    ):
        resolve_data_files(data_config(tmp_path / "hf", split="validation"))
    # Several files are concatenated in order.
    both = data_config([str(tmp_path / "ds" / "train.jsonl"), str(tmp_path / "hf")], prompt_column="prompt")
    with pytest.raises(ConfigError, match=r"'prompt' is not a column of data.path .*train.jsonl"):
        load_problems(both, need_answer=False)


@pytest.mark.parametrize("chat", [False, True])
def test_prompt_formatting(chat: bool) -> None:
    tokenizer = build_tokenizer()
    if chat:
        tokenizer.chat_template = CHAT_TEMPLATE
    cfg = DataConfig(path="unused.jsonl", prompt_template="Q: {prompt}\nA:", system_prompt="Think.")
    dataset = build_prompt_dataset([{"prompt": "1+1", "answer": "2"}], cfg, tokenizer)
    expected: Any = (
        [{"role": "system", "content": "Think."}, {"role": "user", "content": "Q: 1+1\nA:"}]
        if chat
        else "Think.\n\nQ: 1+1\nA:"
    )
    assert dataset[0] == {"prompt": expected, "answer": "2"}
    never = DataConfig(path="unused.jsonl", chat_template="never")
    assert build_prompt_dataset([{"prompt": "x"}], never, tokenizer)[0]["prompt"] == "x"


def test_chat_template_always_needs_one() -> None:
    with pytest.raises(
        ConfigError, match=r"data.chat_template='always' but the tokenizer has no chat template"
    ):
        build_prompt_dataset(
            [{"prompt": "x"}], DataConfig(path="u.jsonl", chat_template="always"), build_tokenizer()
        )


def test_countdown_task_split() -> None:
    problems = load_problems(
        DataConfig(task="countdown", task_options={"n_train": 20, "n_test": 5}), need_answer=True
    )
    assert len(problems) == 20 and set(problems[0]) == {"prompt", "answer"}
    test = load_problems(
        DataConfig(task="countdown", split="test", task_options={"n_test": 5}), need_answer=False
    )
    assert len(test) == 5 and not {p["prompt"] for p in test} & {p["prompt"] for p in problems}


def test_a_jsonl_dataset_with_a_byte_that_is_not_utf8_is_refused_naming_the_file_and_the_offset(
    tmp_path: Path,
) -> None:
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"prompt": "a", "answer": "1"}\n{"prompt": "b\xff", "answer": "2"}\n')
    with pytest.raises(ConfigError) as err:
        load_problems(data_config(path), need_answer=True)
    assert str(err.value) == (
        f"data.path {str(path)!r} is not UTF-8 text: byte 0xff at byte offset 44 (line 2: invalid start byte); "
        "save the file as UTF-8"
    )


def test_a_kept_column_of_mixed_types_is_one_line_naming_it(tmp_path: Path) -> None:
    """``"id": 1`` in one row and ``"id": "b"`` in another ended in pyarrow's ArrowInvalid traceback; ints and floats
    together (which pyarrow promotes) and nulls stay accepted."""
    path = tmp_path / "mixed.jsonl"
    rows = [{"prompt": "1+1=", "answer": "2", "id": 1}, {"prompt": "2+2=", "answer": "4", "id": "b"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = data_config(path, keep_columns=["id"])
    problems = load_problems(cfg, need_answer=True)
    match = (
        r"^data: column 'id' holds values of different types \(int in row 0, str in row 1\); a column must hold "
        r"one type in every row \(or null\)"
    )
    with pytest.raises(ConfigError, match=match):
        build_prompt_dataset(problems, cfg, build_tokenizer())
    problems[1]["id"] = 2.5
    problems.append({"prompt": "3+3=", "answer": "6", "id": None})
    assert build_prompt_dataset(problems, cfg, build_tokenizer())["id"] == [1.0, 2.5, None]
