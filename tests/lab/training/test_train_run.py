"""In-process tests of ``bandpo_lab.training.run.train``: local files, a reward that raises on some completions
(the run goes on and counts the failures), the saved outputs; ``overwrite`` discarding an earlier run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from helpers import CONFIGS
from helpers.tiny import SMALL_RUN

pytest.importorskip("trl")

from bandpo_lab.rewards import REWARDS, register_reward
from bandpo_lab.tasks.countdown import CountdownConfig, make_splits
from bandpo_lab.training.callbacks import read_metrics
from bandpo_lab.training.config import load_train_config
from bandpo_lab.training.layout import (
    CONFIG_FILE,
    MODEL_CARD_FILE,
    RUN_INFO_FILE,
    is_model_card,
    written_by_training,
)
from bandpo_lab.training.run import train

TINY = CONFIGS / "tiny.yaml"


def flaky_reward(prompts: list[Any], completions: list[str], **kwargs: Any) -> list[float]:
    """Raises on completions of odd length; otherwise 1 if the completion has a '+', else 0."""
    out = []
    for completion in completions:
        if len(completion) % 2:
            raise RuntimeError(f"cannot score {completion!r}")
        out.append(float("+" in completion))
    return out


if "test_flaky" not in REWARDS:
    register_reward("test_flaky", flaky_reward)


def test_train_from_files_survives_a_failing_reward(
    tmp_path: Path, warm_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import bandpo_lab.decode

    sampled: list[int] = []  # rows of each sampling call: TRL's generate runs bandpo_lab.decode.sample
    real_sample = bandpo_lab.decode.sample

    def counting_sample(model: Any, input_ids: Any, *args: Any, **kwargs: Any) -> Any:
        sampled.append(input_ids.shape[0])
        return real_sample(model, input_ids, *args, **kwargs)

    monkeypatch.setattr(bandpo_lab.decode, "sample", counting_sample)
    train_rows, _ = make_splits(CountdownConfig(n_train=40, n_test=5))
    data = tmp_path / "puzzles.jsonl"
    data.write_text("".join(json.dumps({"q": r["prompt"], "gt": r["answer"]}) + "\n" for r in train_rows))
    config_file = tmp_path / "run.yaml"
    config_file.write_text(
        f"model: {{path: {warm_model_dir}}}\n"
        f"data: {{path: {data}, prompt_column: q, answer_column: gt}}\n"
        "reward: {name: test_flaky, failure_reward: -1.0}\n"
        f"output_dir: {tmp_path / 'out'}\n"
        "max_completion_length: 8\n"
        "activation_checkpointing: false\n"
    )
    config = load_train_config(config_file, [*SMALL_RUN, "max_steps=2", "report_to=none"])
    out = train(config)

    assert out == tmp_path / "out"
    rows = [r for r in read_metrics(out) if "loss" in r]
    assert [r["step"] for r in rows] == [1, 2]
    first = rows[0]  # the generation round's metrics are logged with its first optimizer step
    assert first["rewards/test_flaky/failures"] > 0, "no completion failed: the test reward is too lenient"
    assert 0 < first["rewards/test_flaky/failure_frac"] < 1
    # 16 completions per generation round: per_device_train_batch_size 8 x steps_per_generation 2
    assert first["rewards/test_flaky/failure_frac"] == pytest.approx(
        first["rewards/test_flaky/failures"] / 16
    )
    assert all(k in first for k in ("clip/frac", "band/hi_mean", "policy/entropy"))
    assert sampled == [16]  # one generation round of 16 completions, by the shared-prefill sampler
    assert (out / "config.json").is_file() and (out / "checkpoint-2").is_dir()
    # every entry the run wrote is one the layout names a training run's (compare --redo lists the others as a user's)
    assert [p.name for p in out.iterdir() if not written_by_training(p)] == []
    assert is_model_card(out / MODEL_CARD_FILE)  # TRL's, written with checkpoint-2
    assert load_train_config(out / CONFIG_FILE).to_dict() == config.to_dict()  # the config as run
    info = json.loads((out / RUN_INFO_FILE).read_text())
    assert info["model_path"] == str(warm_model_dir) and info["n_prompts"] == 40
    assert set(info["provenance"]) >= {"bandpo", "commit", "dirty", "torch", "transformers", "trl", "python"}
    assert info["provenance_earlier"] == []


def test_run_info_keeps_the_code_of_earlier_calls_when_resumed(tmp_path: Path) -> None:
    """No model is loaded: ``run_info.json`` as ``train`` writes it before training (a fake checkpoint to resume)."""
    from train_helpers import fake_checkpoint

    from bandpo_lab.provenance import provenance
    from bandpo_lab.training import run

    out = tmp_path / "out"
    base = [f"output_dir={out}", "report_to=none", "max_steps=8"]
    out.mkdir()
    (out / CONFIG_FILE).write_text(load_train_config(TINY, base).to_yaml())
    first = {"bandpo": "0.0.9", "commit": "a" * 40, "dirty": False, "torch": "2.0"}
    (out / RUN_INFO_FILE).write_text(json.dumps({"started": "earlier", "provenance": first}))
    fresh = run.prepare(load_train_config(TINY, base))
    run._write_run_files(fresh, "model", 1, out)  # a fresh run: no history
    assert json.loads((out / RUN_INFO_FILE).read_text())["provenance_earlier"] == []

    computed = {"requested": "auto", "name": "bf16", "reason": "auto: this CPU has amx_bf16"}
    (out / RUN_INFO_FILE).write_text(
        json.dumps({"started": "earlier", "provenance": first, "precision": computed})
    )
    fake_checkpoint(out, 4)
    resumed = run.prepare(load_train_config(TINY, base), resume=True)
    assert resumed.resume_from == out / "checkpoint-4"
    run._write_run_files(resumed, "model", 1, out)
    info = json.loads((out / RUN_INFO_FILE).read_text())
    now = provenance()
    assert {k: info["provenance"][k] for k in ("bandpo", "commit", "torch")} == {
        k: now[k] for k in ("bandpo", "commit", "torch")
    }
    # the earlier call's precision goes with its code: a run resumed on another machine kind shows it
    assert info["provenance_earlier"] == [{"started": "earlier", **first, "precision": computed}]
    run._write_run_files(resumed, "model", 1, out)  # resumed again: the history grows, oldest first
    again = json.loads((out / RUN_INFO_FILE).read_text())
    assert again["provenance_earlier"] == [
        {"started": "earlier", **first, "precision": computed},
        {"started": info["started"], **info["provenance"]},
    ]


def test_overwrite_discards_the_earlier_run_with_its_tensorboard_folders(
    tmp_path: Path, warm_model_dir: Path
) -> None:
    from train_helpers import fake_run_info

    out = tmp_path / "out"
    old_board = out / "runs" / "Jan01_00-00-00_oldhost"
    old_board.mkdir(parents=True)
    (old_board / "events.out.tfevents.1.oldhost.0").write_bytes(b"old curves")
    (out / "runs" / "notes.txt").write_text("not TensorBoard's: kept")
    (out / MODEL_CARD_FILE).write_text("# my notes on this run\n")  # not TRL's model card: kept
    (out / "checkpoint-9").mkdir()
    (out / "metrics.jsonl").write_text(json.dumps({"step": 9, "loss": 1.0}) + "\n")
    fake_run_info(out)
    overrides = [f"output_dir={out}", f"model.path={warm_model_dir}", "activation_checkpointing=false"]
    config = load_train_config(TINY, [*overrides, *SMALL_RUN, "max_steps=1", "report_to=tensorboard"])

    train(config, overwrite=True)

    assert not old_board.exists() and (out / "runs" / "notes.txt").is_file()
    assert len(list((out / "runs").glob("*/events.out.tfevents.*"))) == 1  # this run's curves only
    assert not (out / "checkpoint-9").exists()
    assert [r["step"] for r in read_metrics(out) if "loss" in r] == [1]
    assert (out / "checkpoint-1").is_dir()  # saved with TRL's model card, but for the user's README.md
    assert (out / MODEL_CARD_FILE).read_text() == "# my notes on this run\n"


def test_overwrite_keeps_a_users_checkpoint_best_folder(tmp_path: Path) -> None:
    """``--overwrite`` removed every ``checkpoint-*`` folder: a user's ``checkpoint-best/`` and
    ``checkpoint-notes/`` went with the run's own. Only ``checkpoint-<step>`` (transformers' names) and the run's
    files (training/layout.py) go; in process, without training."""
    from bandpo_lab.training.run import _discard_earlier_run

    out = tmp_path / "out"
    for name in ("checkpoint-4", "checkpoint-12", "checkpoint-best", "checkpoint-notes"):
        (out / name).mkdir(parents=True)
        (out / name / "model.safetensors").write_bytes(b"weights")
    (out / "checkpoint-7.tar").write_bytes(b"a user's archive")
    (out / "metrics.jsonl").write_text(json.dumps({"step": 12}) + "\n")
    (out / RUN_INFO_FILE).write_text("{}")
    (out / "notes.txt").write_text("mine")

    _discard_earlier_run(out)

    assert sorted(p.name for p in out.iterdir()) == [
        "checkpoint-7.tar",
        "checkpoint-best",
        "checkpoint-notes",
        "notes.txt",
    ]
    assert (out / "checkpoint-best" / "model.safetensors").read_bytes() == b"weights"


def test_overwrite_follows_no_symbolic_link_out_of_the_run(tmp_path: Path) -> None:
    """``--overwrite`` with ``runs`` linked to a TensorBoard folder shared by many runs deleted every other run's
    event folders there, then stopped with a traceback (``rmdir`` of the link); a ``checkpoint-<step>`` linked to a
    folder on another disk stopped it half-way. Links are left, with what they point to; in process."""
    from bandpo_lab.training.run import _discard_earlier_run

    shared, moved, out = tmp_path / "tensorboard", tmp_path / "moved-checkpoint", tmp_path / "out"
    for folder in (shared / "other-run", moved, out / "checkpoint-4"):
        folder.mkdir(parents=True)
    (shared / "other-run" / "events.out.tfevents.1.host.0").write_bytes(b"another run's curves")
    (moved / "model.safetensors").write_bytes(b"weights")
    (out / "runs").symlink_to(shared)
    (out / "checkpoint-9").symlink_to(moved)
    (out / RUN_INFO_FILE).write_text("{}")

    _discard_earlier_run(out)

    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-9", "runs"]
    assert (shared / "other-run" / "events.out.tfevents.1.host.0").read_bytes() == b"another run's curves"
    assert (moved / "model.safetensors").read_bytes() == b"weights"
