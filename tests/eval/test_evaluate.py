"""Tests for bandpo.eval.evaluate: datasets, model-directory checks, settings, and the metrics of an evaluation
(with a scripted sampler, so the numbers are known, and with a tiny random model)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bandpo.eval.evaluate import (
    EvalDataset,
    EvalError,
    EvalSettings,
    check_model_dir,
    evaluate_model,
    format_table,
    load_eval_dataset,
    parse_ks,
    task_options_of_run,
    verifier_names,
)
from bandpo.eval.metrics import pass_at_k


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from bandpo.tasks.tiny_model import build_tokenizer

    return build_tokenizer()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer: Any) -> Path:
    """A randomly initialized tiny character-level Qwen2 with its tokenizer."""
    from bandpo.tasks.tiny_model import WarmStartConfig, build_model

    path = tmp_path_factory.mktemp("model")
    model = build_model(
        tokenizer, WarmStartConfig(n_layers=1, hidden_size=16, n_heads=2, intermediate_size=32)
    )
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


class ScriptedSampler:
    """Returns ``k`` fixed completions per prompt: ``script[prompt]``, recording the calls."""

    def __init__(self, script: dict[str, list[str]]) -> None:
        self.script = script
        self.calls: list[tuple[list[str], bool, int | None]] = []

    def __call__(self, prompts: list[str], add_special_tokens: bool, seed: int | None) -> Any:
        from bandpo.eval.evaluate import _Chunk

        self.calls.append((prompts, add_special_tokens, seed))
        completions = [self.script[p] for p in prompts]
        lengths = [[len(c) + 1 for c in cs] for cs in completions]
        return _Chunk(
            completions, lengths, [[True] * len(cs) for cs in completions], 0.5, sum(map(sum, lengths))
        )


# ---------------------------------------------------------------------------------------------- datasets
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
    assert set(verifier_names()) >= {"dapo", "boxed", "countdown"}


def test_task_options_of_run(tmp_path: Path) -> None:
    (tmp_path / "checkpoint-4").mkdir()
    (tmp_path / "train_config.yaml").write_text("data: {task: countdown, task_options: {n_test: 30}}\n")
    assert task_options_of_run(tmp_path / "checkpoint-4", "countdown") == {"n_test": 30}
    assert task_options_of_run(tmp_path, "other") is None
    assert task_options_of_run(tmp_path / "a" / "nowhere", "countdown") is None


# ------------------------------------------------------------------------------------------ model directory
def test_check_model_dir_errors(tmp_path: Path, model_dir: Path) -> None:
    assert check_model_dir(model_dir) == (model_dir, model_dir)
    with pytest.raises(EvalError, match=r"model directory '.*missing' does not exist"):
        check_model_dir(tmp_path / "missing")
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(EvalError, match=r"is a file; expected a model directory"):
        check_model_dir(tmp_path / "file.txt")
    run = tmp_path / "run"
    (run / "checkpoint-2").mkdir(parents=True)
    (run / "checkpoint-10").mkdir()
    (run / "metrics.jsonl").write_text("")
    with pytest.raises(
        EvalError,
        match=r"is not a model: config.json is missing; it holds training checkpoints: .*checkpoint-10'",
    ):
        check_model_dir(run)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("")
    with pytest.raises(EvalError, match=r"config.json is missing; it holds: notes.txt"):
        check_model_dir(empty)
    (empty / "config.json").write_text("{")
    with pytest.raises(EvalError, match=r"config.json is not valid JSON"):
        check_model_dir(empty)
    (empty / "config.json").write_text("{}")
    with pytest.raises(EvalError, match=r"has config.json but no weights \(looked for model.safetensors"):
        check_model_dir(empty)
    # a checkpoint without tokenizer files uses the run directory's
    ckpt = tmp_path / "run2" / "checkpoint-1"
    ckpt.mkdir(parents=True)
    for name in ("config.json", "model.safetensors"):
        (ckpt / name).write_bytes((model_dir / name).read_bytes())
    with pytest.raises(EvalError, match=r"has no tokenizer \(looked for tokenizer.json"):
        check_model_dir(ckpt)
    (ckpt.parent / "tokenizer.json").write_bytes((model_dir / "tokenizer.json").read_bytes())
    assert check_model_dir(ckpt) == (ckpt, ckpt.parent)


# ------------------------------------------------------------------------------------------------ settings
def test_settings_and_ks() -> None:
    assert parse_ks(None, 32) == (1, 4, 32) and parse_ks(None, 2) == (1, 2)
    assert parse_ks("1, 8,k", 16) == (1, 8, 16)
    with pytest.raises(
        EvalError, match=r"ks entry 64 is larger than k=32, the number of samples per problem"
    ):
        parse_ks("1,64", 32)
    with pytest.raises(EvalError, match=r"ks entries must be integers >= 1 \(or 'k'\), got 'x'"):
        parse_ks("1,x", 8)
    with pytest.raises(EvalError, match=r"ks entries must be integers >= 1, got 0"):
        parse_ks([0], 8)
    with pytest.raises(EvalError, match=r"k must be an integer >= 1, got 0"):
        EvalSettings(k=0)
    with pytest.raises(EvalError, match=r"temperature must be a finite number >= 0"):
        EvalSettings(temperature=-1.0)
    with pytest.raises(EvalError, match=r"backend must be one of transformers, vllm, got 'tgi'"):
        EvalSettings(backend="tgi")
    assert EvalSettings(k=8, ks=[1, 2]).ks == (1, 2)


# -------------------------------------------------------------------------------------- scripted evaluation
def test_metrics_of_a_scripted_evaluation(tmp_path: Path, tokenizer: Any) -> None:
    """Known completions -> known numbers; unparsable ground truths are counted and left out, not a crash."""
    rows = [
        {"prompt": "a", "answer": "1"},  # 2 of 4 right, one sample unparsed
        {"prompt": "b", "answer": "2"},  # 0 of 4
        {"prompt": "c", "answer": "$ $"},  # ground truth empty after normalisation
        {"prompt": "d"},  # no ground truth at all
        {"prompt": "e", "answer": "5"},  # 4 of 4
    ]
    data = load_eval_dataset(str(write_jsonl(tmp_path / "math.jsonl", rows)), verifier="dapo")
    script = {
        "a": ["Answer: 1", "Answer: 3", "no answer here", "Answer: 1"],
        "b": ["Answer: 3", "Answer: 3", "Answer: 4", "Answer: 3"],
        "e": ["Answer: 5"] * 4,
    }
    sampler = ScriptedSampler(script)
    out = evaluate_model(
        None,
        tokenizer,
        [data],
        EvalSettings(k=4, ks=(1, 2, 4), batch_size=2, progress=False),
        sampler=sampler,
        keep_samples=True,
    )
    m = out["datasets"]["math"]
    assert m["n_problems"] == 3 and m["n_unparsed_ground_truth"] == 2 and m["n_samples"] == 12
    assert m["n_unparsed"] == 1
    assert m["mean@4"] == pytest.approx((0.5 + 0.0 + 1.0) / 3)
    assert m["pass@1"] == pytest.approx(m["mean@4"])
    assert m["pass@2"] == pytest.approx((pass_at_k(4, 2, 2) + 0 + 1) / 3)
    assert m["pass@4"] == pytest.approx(2 / 3)
    assert m["best@4"] <= m["pass@4"]
    assert m["maj@4"] == pytest.approx(2 / 3)  # a: "1" twice beats "3" once; b: wrong; e: right
    assert m["entropy"] == 0.5 and m["truncated_frac"] == 0.0
    assert out["overall"]["mean@4"] == m["mean@4"]
    # the prompts went out in batches of 2 with distinct seeds, unparsable ground truths never sampled
    assert [c[0] for c in sampler.calls] == [["a", "b"], ["e"]]
    assert [c[2] for c in sampler.calls] == [0, 1]
    assert [s["index"] for s in out["samples"]] == [0, 1, 4]
    assert out["samples"][0]["correct"] == [True, False, False, True]
    table = format_table(out)
    assert table.splitlines()[2].split()[:3] == ["math", "3", "50.0"]  # mean@4 in percent


def test_overall_pools_datasets(tmp_path: Path, tokenizer: Any) -> None:
    a = EvalDataset("a", "x", "dapo", [{"prompt": "p1", "answer": "1"}])
    b = EvalDataset("b", "y", "dapo", [{"prompt": "p2", "answer": "2"}, {"prompt": "p3", "answer": "3"}])
    sampler = ScriptedSampler({"p1": ["Answer: 1", "Answer: 1"], "p2": ["Answer: 2", "x"], "p3": ["x", "x"]})
    out = evaluate_model(None, tokenizer, [a, b], EvalSettings(k=2, progress=False), sampler=sampler)
    assert out["datasets"]["a"]["mean@2"] == 1.0 and out["datasets"]["b"]["mean@2"] == 0.25
    assert out["overall"]["mean@2"] == pytest.approx((1.0 + 0.5 + 0.0) / 3)  # problems weigh equally
    assert out["overall"]["n_problems"] == 3
    table = format_table(out)
    assert table.splitlines()[-2].startswith("overall")
    with pytest.raises(EvalError, match=r"dataset names must be distinct"):
        evaluate_model(None, tokenizer, [a, a], EvalSettings(k=2, progress=False), sampler=sampler)


def test_all_ground_truths_unparsable_is_not_a_crash(tmp_path: Path, tokenizer: Any) -> None:
    data = load_eval_dataset(str(write_jsonl(tmp_path / "bad.jsonl", [{"prompt": "a", "answer": ""}])))
    out = evaluate_model(
        None, tokenizer, [data], EvalSettings(k=2, progress=False), sampler=ScriptedSampler({})
    )
    assert out["overall"]["n_problems"] == 0 and out["overall"]["n_unparsed_ground_truth"] == 1
    assert "mean@2" not in out["overall"]


# ----------------------------------------------------------------------------------------- a tiny real model
def test_tiny_model_on_countdown(model_dir: Path) -> None:
    from bandpo.eval.evaluate import evaluate_model_dir

    data = load_eval_dataset("countdown", max_problems=12)
    settings = EvalSettings(k=4, ks=(1, 4), batch_size=5, max_new_tokens=6, progress=False)
    out = evaluate_model_dir(model_dir, [data], settings)
    m = out["overall"]
    assert m["n_problems"] == 12 and m["n_samples"] == 48
    assert m["pass@1"] == pytest.approx(m["mean@4"])
    assert 0.0 <= m["best@4"] <= m["pass@4"] + 1e-12
    assert m["entropy"] > 0 and 1 <= m["mean_length"] <= 6
    assert out["settings"]["max_new_tokens"] == 6 and out["model"] == str(model_dir)
    again = evaluate_model_dir(model_dir, [data], settings)
    assert again["overall"] == m  # seeded
