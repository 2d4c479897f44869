"""Tests for bandpo_lab.eval.models: model-directory checks before anything loads."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bandpo_lab.eval.errors import EvalError
from bandpo_lab.eval.models import check_model_dir, resolve_model_dir


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


@pytest.mark.parametrize(
    ("weights", "problem"),
    [
        (lambda data: data[:-4], r"model.safetensors is truncated \(\d+ bytes, its header describes \d+\)"),
        (
            lambda data: b"oarbage\n",
            r"model.safetensors is not a safetensors file \(8 bytes\): its first 8 bytes give a header length of "
            r"749118580988207471, larger than the file$",
        ),
    ],
    ids=["truncated", "garbage"],
)
def test_eval_of_a_checkpoint_with_truncated_or_garbage_weights_is_refused_before_loading(
    tmp_path: Path, model_dir: Path, weights: Callable[[bytes], bytes], problem: str
) -> None:
    """It was a ``SafetensorError`` traceback from ``from_pretrained``; the check is resume's, headers only."""
    ckpt = tmp_path / "checkpoint-4"
    ckpt.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (ckpt / name).write_bytes((model_dir / name).read_bytes())
    (ckpt / "model.safetensors").write_bytes(weights((model_dir / "model.safetensors").read_bytes()))
    with pytest.raises(
        EvalError, match=rf"^model directory '.*checkpoint-4': its weights cannot be loaded: {problem}"
    ):
        resolve_model_dir(str(ckpt))


def test_resolve_model_dir(tmp_path: Path, model_dir: Path) -> None:
    assert resolve_model_dir(str(model_dir)) == model_dir
    with pytest.raises(EvalError, match=r"model directory '.*nope' does not exist"):
        resolve_model_dir(tmp_path / "nope")
    with pytest.raises(
        EvalError,
        match=r"--model tiny needs a built-in task with its own tiny model among --dataset \(countdown\)$",
    ):
        resolve_model_dir("tiny", [str(tmp_path / "d.jsonl")])
    with pytest.raises(
        EvalError
    ) as err:  # arith has no tiny model (it once raised ValueError from deep inside)
        resolve_model_dir("tiny", ["arith"])
    assert str(err.value) == (
        "--model tiny needs a built-in task with its own tiny model among --dataset (countdown); 'arith' has none "
        "(use a model directory or a built-in model)"
    )


def test_resolve_model_dir_returns_the_expanded_path(
    tmp_path: Path, model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``~`` and ``$VAR`` are expanded where the model is checked, and the path returned is the one checked: the
    run's train_config.yaml is looked up there (an unexpanded ``~/run`` found none and dropped its task options)."""
    monkeypatch.setenv("HOME", str(model_dir.parent))
    monkeypatch.setenv("MODELS", str(model_dir.parent))
    for given in (f"~/{model_dir.name}", f"$MODELS/{model_dir.name}"):
        assert resolve_model_dir(given) == model_dir
        assert check_model_dir(given) == (model_dir, model_dir)


@pytest.mark.parametrize(
    ("device", "message"),
    [
        ("gpu", r"^device must be auto, cpu, cuda or cuda:N, got 'gpu'$"),
        ("mps", r"^device must be auto, cpu, cuda or cuda:N, got 'mps'$"),
        ("cuda:99", r"^device 'cuda:99' is not on this machine \(CUDA devices: \d+\); use cpu or auto$"),
    ],
)
def test_a_device_this_machine_lacks_is_one_line(device: str, message: str) -> None:
    from bandpo_lab.eval.models import check_device

    with pytest.raises(EvalError, match=message):
        check_device(device)


def test_auto_and_cpu_devices() -> None:
    import torch

    from bandpo_lab.eval.models import check_device

    assert check_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    assert check_device("cpu") == "cpu"


def test_eval_refuses_a_bad_device_before_loading(capsys: pytest.CaptureFixture[str]) -> None:
    from bandpo_lab.cli.main import main

    assert main(["eval", "--model", "nowhere", "--device", "gpu"]) == 2
    assert "device must be auto, cpu, cuda or cuda:N, got 'gpu'" in capsys.readouterr().err


def _run_with_attention(tmp_path: Path, model_dir: Path, section: str, value: str | None) -> Path:
    """A copy of ``model_dir`` as a training run's output: its ``train_config.yaml`` sets the attention in
    ``section`` (``model`` or ``model_init_kwargs``), or none."""
    import shutil

    import yaml

    run = tmp_path / "run"
    shutil.copytree(model_dir, run)
    config = {"model": {"path": "tiny", "attn_implementation": None}, "data": {"task": "countdown"}}
    if value is not None:
        config.setdefault(section, {})["attn_implementation"] = value
    (run / "train_config.yaml").write_text(yaml.safe_dump(config))
    return run


@pytest.mark.parametrize("section", ["model", "model_init_kwargs"])
def test_load_model_takes_the_attention_the_run_trained_with(
    tmp_path: Path, model_dir: Path, section: str
) -> None:
    """transformers does not save a model's attention, so a run's saved policy would load with SDPA: ``auto`` (the
    default) reads the run's ``train_config.yaml`` (also from a ``checkpoint-N`` inside it); an explicit name or
    ``None`` (transformers' default) overrides it."""
    import shutil

    from bandpo_lab.eval.models import attention_of_run, load_model

    run = _run_with_attention(tmp_path, model_dir, section, "eager")
    default = load_model(model_dir, device="cpu")[0].config._attn_implementation
    assert default != "eager"  # the premise: without a run config, transformers picks another
    assert attention_of_run(run) == "eager"
    assert load_model(run, device="cpu")[0].config._attn_implementation == "eager"
    checkpoint = run / "checkpoint-2"
    shutil.copytree(model_dir, checkpoint)
    assert load_model(checkpoint, device="cpu")[0].config._attn_implementation == "eager"
    assert load_model(run, device="cpu", attn_implementation="sdpa")[0].config._attn_implementation == "sdpa"
    assert load_model(run, device="cpu", attn_implementation=None)[0].config._attn_implementation == default


def test_load_model_without_a_run_attention_keeps_transformers_default(
    tmp_path: Path, model_dir: Path
) -> None:
    from bandpo_lab.eval.models import attention_of_run, load_model

    run = _run_with_attention(tmp_path, model_dir, "model", None)
    assert attention_of_run(run) is None and attention_of_run(model_dir) is None
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "train_config.yaml").write_text("- a list, not a mapping\n")
    assert attention_of_run(tmp_path / "bad") is None
    loaded = load_model(run, device="cpu")[0].config._attn_implementation
    assert loaded == load_model(model_dir, device="cpu")[0].config._attn_implementation


@pytest.mark.parametrize(
    "value, match",
    [("", "attn_implementation must be 'auto', None or"), ("no-such-attention", "with attn_implementation")],
)
def test_load_model_refuses_a_bad_attention_naming_it(model_dir: Path, value: str, match: str) -> None:
    from bandpo_lab.eval.models import load_model

    with pytest.raises(EvalError, match=match) as err:
        load_model(model_dir, device="cpu", attn_implementation=value)
    assert repr(value) in str(err.value)
