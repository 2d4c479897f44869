"""``bandpo eval`` through subprocess, as a user runs it, on a tiny randomly initialized model (no warm start)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def bandpo(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run(
        [sys.executable, "-m", "bandpo_lab.cli.main", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from helpers.tiny import save_countdown_model_dir

    return save_countdown_model_dir(tmp_path_factory.mktemp("tiny"))


def test_eval_countdown_json_is_consistent(model_dir: Path, tmp_path: Path) -> None:
    out_json, samples = tmp_path / "res.json", tmp_path / "samples.jsonl"
    out = bandpo(
        "eval", "--model", str(model_dir), "--dataset", "countdown", "--max-problems", "20", "--k", "8",
        "--ks", "1,2,k", "--output", str(out_json), "--save-samples", str(samples), "--no-progress",
        "--attn-implementation", "eager",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    res = json.loads(out_json.read_text())
    assert res["settings"]["attn_implementation"] == "eager"  # a bare folder would load with SDPA
    m = res["overall"]
    assert res["settings"]["k"] == 8 and res["settings"]["ks"] == [1, 2, 8]
    assert m["n_problems"] == 20 and m["n_samples"] == 160
    assert m["pass@1"] == pytest.approx(m["mean@8"], abs=1e-12)
    assert m["pass@1"] <= m["pass@2"] <= m["pass@8"]
    assert m["best@8"] <= m["pass@8"] + 1e-12 and 0.0 <= m["maj@8"] <= 1.0
    assert res["datasets"]["countdown/test"]["mean@8"] == m["mean@8"]  # one dataset: overall is the dataset
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    assert len(rows) == 20 and all(len(r["completions"]) == 8 for r in rows)
    accuracy = sum(sum(r["correct"]) / 8 for r in rows) / 20
    assert accuracy == pytest.approx(m["mean@8"], abs=1e-12)
    assert m["n_unparsed"] == sum(a is None for r in rows for a in r["answers"])
    assert "countdown/test" in out.stdout and "mean@8" in out.stdout and f"results: {out_json}" in out.stdout
    resolved = res["settings"]["precision_resolved"]  # printed as recorded: the tiny model stays float32
    assert resolved["name"] == "float32"
    assert f"precision float32 ({resolved['reason']})" in out.stdout.splitlines()


def test_eval_file_with_unparsable_answers(model_dir: Path, tmp_path: Path) -> None:
    data = tmp_path / "math.jsonl"
    rows = [
        {"q": "1,2,3:6=", "sol": "6"},
        {"q": "1,2,3:5=", "sol": ""},
        {"q": "2,2,2:8=", "sol": "\\boxed{}"},
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = bandpo(
        "eval", "--model", str(model_dir), "--dataset", str(data), "--dataset", "countdown", "--max-problems", "3",
        "--prompt-column", "q", "--answer-column", "sol", "--verifier", "dapo", "--k", "2", "--no-progress",
        "--output", str(tmp_path / "r.json"),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    res = json.loads((tmp_path / "r.json").read_text())
    math_ = res["datasets"]["math"]
    assert math_["n_unparsed_ground_truth"] == 2 and math_["n_problems"] == 1
    assert math_["n_unparsed"] == 2  # a random model never writes "Answer:"
    assert math_["mean@2"] == 0.0
    assert res["overall"]["n_problems"] == 1 + 3 and res["overall"]["n_unparsed_ground_truth"] == 2
    assert "2 of 3 problems left out" in out.stderr and "overall" in out.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "{tmp}/nope"], "model directory '{tmp}/nope' does not exist"),
        (["--model", "{tmp}"], "model directory '{tmp}' is not a model: config.json is missing"),
        (
            ["--model", "{model}", "--k", "8", "--ks", "1,16"],
            "--ks entry 16 is larger than k=8, the number of samples",
        ),
        (["--model", "{model}", "--dataset", "{tmp}/d.jsonl"], "answer_column='answer' is not a column of"),
        # output paths are checked before the evaluation, which writes only at its end
        (
            ["--model", "{model}", "--output", "{tmp}"],
            "--output '{tmp}' is a directory; it must be a file path",
        ),
        (
            ["--model", "{model}", "--output", "{tmp}/d.jsonl/r.json"],
            "--output '{tmp}/d.jsonl/r.json' is inside '{tmp}/d.jsonl', which is a file; its folder must be a",
        ),
        (
            ["--model", "{model}", "--output", "{tmp}/r.json", "--save-samples", "{tmp}/d.jsonl/s.jsonl"],
            "--save-samples '{tmp}/d.jsonl/s.jsonl' is inside '{tmp}/d.jsonl', which is a file",
        ),
    ],
)
def test_eval_errors_name_the_problem(
    model_dir: Path, tmp_path: Path, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """In process (the command line itself runs as a subprocess in the tests above): one line, status 2."""
    from bandpo_lab.cli.main import main

    (tmp_path / "d.jsonl").write_text(json.dumps({"prompt": "p", "solution": "1"}) + "\n")
    fill = {"tmp": str(tmp_path), "model": str(model_dir)}
    assert main(["eval", *[a.format(**fill) for a in args], "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bandpo eval: error: " + message.format(**fill)) and err.count("\n") == 1, err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-problems", "0"], "--max-problems must be an integer >= 1, got 0"),
        # the sampling settings name their flag (they named the field: 'batch_size must be ...')
        (["--batch-size", "0"], "--batch-size must be an integer >= 1, got 0"),
        (["--k", "0"], "--k must be an integer >= 1, got 0"),
        (["--ks", "0"], "--ks entries must be integers >= 1, got 0 in '0'"),
        (["--n-bootstrap", "-1"], "--n-bootstrap must be an integer >= 1, got -1"),
        (["--temperature", "-1"], "--temperature must be a finite number >= 0 (0: greedy), got -1.0"),
        (["--split", "val"], "split must be one of train, test for task 'countdown', got 'val'"),
        (["--dataset", "countdwon"], "dataset 'countdwon' does not exist"),
        (
            ["--dataset", "countdown", "--dataset", "{tmp}/nope.jsonl"],
            "dataset '{tmp}/nope.jsonl' does not exist",
        ),
        # task options apply to built-in tasks only: with files alone they were silently ignored
        (
            ["--dataset", "{tmp}/d.jsonl", "--task-options", "{{n_test: 5}}"],
            "--task-options '{{n_test: 5}}' applies to a built-in task (countdown, arith), and no --dataset is "
            "one: '{tmp}/d.jsonl' (files take no task options)",
        ),
        # the task checks its options (an unknown key or a bad value was a traceback from the warm start)
        (
            ["--task-options", "{{bogus_key: 3}}"],
            "task_options for task 'countdown': unknown config key 'task_options.bogus_key'",
        ),
        (
            ["--task-options", "{{n_test: -5}}"],
            "task_options for task 'countdown': n_test must be an integer >= 1",
        ),
        # flags and files named on the command line (checked after the warm start before)
        (["--threads", "0"], "--threads must be an integer in [1, "),
        # torch.set_num_threads(100000) crashed the process (a segmentation fault), on a dry run too
        (["--threads", "100000"], "--threads must be an integer in [1, "),
        # the seed a training run takes: torch.manual_seed overflowed once the model had loaded
        (
            ["--seed", "99999999999999999999"],
            "--seed must be an integer in [0, 4294967295] (numpy's seed range), got 99999999999999999999",
        ),
        (["--output", "{tmp}"], "--output '{tmp}' is a directory; it must be a file path"),
        (["--save-samples", "{tmp}"], "--save-samples '{tmp}' is a directory; it must be a file path"),
        (["--output", ""], "--output must be a file path, got ''"),
        # the atomic write would replace the device by a file (as root)
        (["--output", "/dev/null"], "--output '/dev/null' is not a regular file (a device, pipe or socket)"),
        # the prompt template and the attention (each failed only once the model had loaded)
        (
            ["--prompt-template", "Q: {{question}}"],
            "--prompt-template must be a format string whose only field",
        ),
        (["--prompt-template", "Solve it."], "--prompt-template must contain {{prompt}}, got 'Solve it.'"),
        (
            ["--attn-implementation", "no-such"],
            "--attn-implementation='no-such' is not an attention implementation transformers knows: one of eager, ",
        ),
    ],
)
def test_eval_dataset_flags_are_checked_before_the_model(
    args: list[str],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The flags that need no model (datasets, task options, threads, the files it writes) are refused before
    ``--model tiny`` is warm-started (minutes), not after; in process, with a ``resolve_model_dir`` that fails the
    test if it is reached."""
    from bandpo_lab.cli.main import main

    def resolve_model_dir(*args: Any, **kwargs: Any) -> None:
        pytest.fail("the model was resolved before the dataset flags were checked")

    monkeypatch.setattr("bandpo_lab.eval.models.resolve_model_dir", resolve_model_dir)
    (tmp_path / "d.jsonl").write_text(json.dumps({"prompt": "p", "answer": "1"}) + "\n")
    fill = {"tmp": str(tmp_path)}
    assert main(["eval", "--model", "tiny", *[a.format(**fill) for a in args], "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"bandpo eval: error: {message.format(**fill)}") and err.count("\n") == 1


def test_threads_are_bounded_by_the_cpus_and_a_dry_run_sets_none(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--threads 100000 --dry-run`` printed the plan, then torch.set_num_threads segfaulted (rc 139): the count
    is bounded (the message says by what) and a dry run sets no threads."""
    import torch

    from bandpo_lab.cli.main import main
    from bandpo_lab.runtime import THREADS_PER_CPU

    def set_num_threads(n: int) -> None:
        pytest.fail(f"torch.set_num_threads({n}) on a dry run")

    monkeypatch.setattr(torch, "set_num_threads", set_num_threads)
    cpus = os.cpu_count() or 1
    base = [
        "eval",
        "--model",
        str(model_dir),
        "--k",
        "2",
        "--max-problems",
        "2",
        "--dry-run",
        "--no-progress",
    ]
    assert main([*base, "--threads", "100000"]) == 2
    assert capsys.readouterr().err == (
        f"bandpo eval: error: --threads must be an integer in [1, {THREADS_PER_CPU * cpus}] ({THREADS_PER_CPU} per "
        f"CPU core; this machine has {cpus}), got 100000\n"
    )
    assert main([*base, "--threads", str(THREADS_PER_CPU * cpus)]) == 0
    assert "dry run: the plan" in capsys.readouterr().out


@pytest.mark.parametrize("answer", [float("nan"), "", {"x": 1}], ids=["nan", "empty", "mapping"])
@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]], ids=["run", "dry-run"])
def test_a_dataset_with_no_scorable_ground_truth_is_refused_before_any_model(
    answer: Any,
    dry_run: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """It passed the dry run; the run built or loaded the model, sampled, then failed "no problem could be
    scored". Refused in one line naming the dataset, the first ground truth and the flags to check; ``--model
    tiny`` is never built (nor a built-in model converted)."""
    from bandpo_lab.cli.main import main
    from bandpo_lab.eval import models

    real = models.resolve_model_dir

    def resolve_model_dir(
        model: Any, datasets: Any = (), task_options: Any = None, build: bool = True
    ) -> Any:
        if build:
            pytest.fail("the model was built before the datasets were checked")
        return real(model, datasets, task_options, build)

    monkeypatch.setattr(models, "resolve_model_dir", resolve_model_dir)
    monkeypatch.setattr(
        "bandpo_lab.eval.evaluate.evaluate_model_dir", lambda *a, **k: pytest.fail("the model was loaded")
    )
    data = tmp_path / "bad.jsonl"
    data.write_text(json.dumps({"prompt": "1+1=", "answer": answer}) + "\n")
    args = ["eval", "--model", "tiny", "--dataset", "countdown", "--dataset", str(data), *dry_run]
    assert main([*args, "--max-problems", "2", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"bandpo eval: error: --dataset {str(data)!r}: the dapo verifier can score none of its 1 problems (problem "
        f"0: the ground truth {answer!r}: "
    )
    assert (
        err.endswith("check --answer-column (now 'answer') and --verifier (now dapo)\n")
        and err.count("\n") == 1
    )


def _refused_before_the_model(
    args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> str:
    """``bandpo eval`` with ``args`` in process: status 2 and one line on stderr, and the model never resolved."""
    from bandpo_lab.cli.main import main

    def resolve_model_dir(*args: Any, **kwargs: Any) -> None:
        pytest.fail("the model was resolved before the output files were checked")

    monkeypatch.setattr("bandpo_lab.eval.models.resolve_model_dir", resolve_model_dir)
    assert main(["eval", *args, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bandpo eval: error: ") and err.count("\n") == 1, err
    return err.removeprefix("bandpo eval: error: ").rstrip("\n")


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]], ids=["run", "dry-run"])
def test_vllm_missing_is_refused_before_the_model_and_by_the_dry_run(
    dry_run: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--vllm`` without vLLM passed ``--dry-run`` and was refused only when the backend was built (after the
    model folder and datasets were read); it is one line before any of that."""
    import sys

    from bandpo_lab.eval.backends import VLLM_MISSING

    monkeypatch.setitem(sys.modules, "vllm", None)  # not installed, wherever the tests run
    assert (
        _refused_before_the_model(["--model", "tiny", "--vllm", *dry_run], monkeypatch, capsys)
        == VLLM_MISSING
    )


def test_save_samples_onto_the_models_weights_is_refused(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--save-samples <model>/model.safetensors`` wrote the samples JSONL over the weights."""
    weights = model_dir / "model.safetensors"
    before = weights.read_bytes()
    message = _refused_before_the_model(
        ["--model", str(model_dir), "--output", str(tmp_path / "r.json"), "--save-samples", str(weights)],
        monkeypatch,
        capsys,
    )
    assert message == (
        f"--save-samples '{weights}' is inside the model folder '{model_dir}': bandpo eval writes no file among a "
        "model's but its default results file eval_results.json; write it elsewhere"
    )
    assert weights.read_bytes() == before


def test_output_onto_the_models_config_json_is_refused(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--output <model>/config.json`` replaced the model's config with the results; another model's folder is
    refused as well (and a dataset file is not replaced)."""
    other = tmp_path / "other"
    other.mkdir()
    for name in ("config.json", "model.safetensors"):
        (other / name).write_text("{}")
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"prompt": "p", "answer": "1"}) + "\n")
    for output, why in (
        (model_dir / "config.json", f"is inside the model folder '{model_dir}'"),
        (other / "r.json", f"is inside the model folder '{other}'"),
        (data, "exists and is not an earlier bandpo eval output"),
    ):
        message = _refused_before_the_model(
            ["--model", str(model_dir), "--output", str(output)], monkeypatch, capsys
        )
        assert message.startswith(f"--output '{output}' {why}"), message
    assert json.loads((model_dir / "config.json").read_text())["model_type"]
    assert data.read_text() == json.dumps({"prompt": "p", "answer": "1"}) + "\n"


def test_output_and_save_samples_to_one_file_is_refused(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--output same.json --save-samples same.json``: the samples replaced the results."""
    same = tmp_path / "same.json"
    message = _refused_before_the_model(
        ["--model", str(model_dir), "--output", str(same), "--save-samples", f"{tmp_path}/./same.json"],
        monkeypatch,
        capsys,
    )
    assert message == (
        f"--save-samples '{tmp_path}/./same.json' and --output '{same}' are the same file: each output needs a file "
        "of its own"
    )


def test_output_paths_with_a_tilde_or_a_variable_are_written_where_they_were_checked(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--output=~/r.json`` (a shell expands no ``~`` after ``=``) and ``--save-samples '$OUT/s.jsonl'``: the checks
    read ``$HOME/r.json`` and ``$OUT/s.jsonl``, the writer wrote ``./~/r.json`` and ``./$OUT/s.jsonl``, replacing
    a file there that no check had looked at. Both are written where they were checked; in process."""
    from bandpo_lab.cli.main import main

    home, work = tmp_path / "home", tmp_path / "work"
    (work / "~").mkdir(parents=True)
    (work / "~" / "r.json").write_text("a user's file")
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("OUT", str(home))
    monkeypatch.chdir(work)
    argv = ["eval", "--model", str(model_dir), "--dataset", "countdown", "--max-problems", "2", "--k", "2"]
    assert (
        main([*argv, "--ks", "1", "--no-progress", "--output=~/r.json", "--save-samples=$OUT/s.jsonl"]) == 0
    )
    assert json.loads((home / "r.json").read_text())["overall"]["n_problems"] == 2
    assert len((home / "s.jsonl").read_text().splitlines()) == 2
    assert (work / "~" / "r.json").read_text() == "a user's file"
    assert sorted(p.name for p in work.rglob("*")) == ["r.json", "~"]
    assert f"results: {home / 'r.json'}" in capsys.readouterr().out


def test_eval_with_a_verifier_that_parses_no_answer_warns(model_dir: Path, tmp_path: Path) -> None:
    """``--dataset countdown --verifier dapo`` reported 0% with every answer unparsed and no word: one warning line
    with the counts and the hint to check --verifier."""
    out = bandpo(
        "eval", "--model", str(model_dir), "--dataset", "countdown", "--verifier", "dapo", "--max-problems", "2",
        "--k", "2", "--no-progress", "--output", str(tmp_path / "r.json"),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    warnings = [line for line in out.stderr.splitlines() if line.startswith("warning: ")]
    assert warnings == [
        "warning: countdown/test: the dapo verifier found no answer in 4 of 4 samples (n_unparsed), which all "
        "score as wrong: check --verifier (dapo, boxed, last_number, countdown; default: a built-in task's own, "
        "dapo for files)"
    ]


def test_eval_no_progress_shows_no_bar_at_all(model_dir: Path, tmp_path: Path) -> None:
    """``bandpo eval --no-progress`` still drew transformers' bar as the model loaded ("Loading weights: 100%|...");
    now no bar at all, and without the flag the sampling bar is there."""
    argv = [
        "eval",
        "--model",
        str(model_dir),
        "--max-problems",
        "2",
        "--k",
        "2",
        "--output",
        str(tmp_path / "r.json"),
    ]
    quiet = bandpo(*argv, "--no-progress")
    assert quiet.returncode == 0, quiet.stderr
    assert "Loading weights" not in quiet.stderr and "%|" not in quiet.stderr, quiet.stderr
    loud = bandpo(*argv)
    assert loud.returncode == 0 and "eval: 100%|" in loud.stderr, loud.stderr


def test_the_unparsed_warning_takes_a_share_above_nine_tenths() -> None:
    from bandpo_lab.cli.evaluate import unparsed_warnings

    def results(unparsed: int) -> dict[str, Any]:
        return {"datasets": {"d": {"n_samples": 100, "n_unparsed": unparsed, "verifier": "boxed"}}}

    assert unparsed_warnings(results(90)) == []
    assert len(unparsed_warnings(results(91))) == 1
    assert unparsed_warnings({"datasets": {"d": {"n_samples": 0, "n_unparsed": 0, "verifier": "dapo"}}}) == []


def test_eval_on_arith_without_max_new_tokens_samples_the_tasks_answer_length(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``bandpo eval --dataset arith`` sampled up to the model's 1,024 new tokens (the task gave no answer length):
    a built-in task's own length is the default (arith: 16), --max-new-tokens still wins, and files or a task
    without a length keep the model's. (The settings the evaluation receives; the tiny model has no chat template
    to sample arith with.)"""
    from bandpo_lab.cli.main import main
    from bandpo_lab.eval.datasets import EvalDataset, task_answer_length
    from bandpo_lab.eval.errors import EvalError
    from bandpo_lab.training.tasks import ARITH_ANSWER_TOKENS

    assert ARITH_ANSWER_TOKENS == 16

    def dataset(task: str | None) -> EvalDataset:
        return EvalDataset(name=str(task), source="", verifier="dapo", problems=[], task=task)

    assert task_answer_length([dataset("arith")]) == 16
    assert task_answer_length([dataset("arith"), dataset("countdown")]) is None
    assert task_answer_length([dataset("arith"), dataset(None)]) is None
    received = []

    def evaluate(model: Any, datasets: Any, settings: Any, **kwargs: Any) -> None:
        received.append(settings.max_new_tokens)
        raise EvalError("stop here")

    monkeypatch.setattr("bandpo_lab.eval.evaluate.evaluate_model_dir", evaluate)
    for extra in ([], ["--max-new-tokens", "3"]):
        argv = ["eval", "--model", str(model_dir), "--dataset", "arith", "--max-problems", "2", *extra]
        assert main([*argv, "--output", str(model_dir.parent / "r.json")]) == 2
    assert received == [16, 3] and capsys.readouterr().err.count("stop here") == 2
    assert "arith: 16" in bandpo("eval", "--help").stdout


def test_eval_of_a_run_whose_train_config_is_not_utf8_says_so_in_one_line(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run's own ``train_config.yaml`` (its task options, its attention) is read as UTF-8 like every other
    file of the user's: one saved in Latin-1 was a UnicodeDecodeError traceback."""
    import shutil

    from bandpo_lab.cli.main import main

    run = tmp_path / "run"
    shutil.copytree(model_dir, run)
    (run / "train_config.yaml").write_bytes(b"data:\n  task: countdown\n  system_prompt: caf\xe9\n")
    assert main(["eval", "--model", str(run), "--k", "1", "--max-problems", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"bandpo eval: error: the training run's config {str(run / 'train_config.yaml')!r} is not UTF-8 text: byte "
        "0xe9 at byte offset 44 (line 3: invalid continuation byte); save the file as UTF-8\n"
    )
    assert not (run / "eval_results.json").exists()
