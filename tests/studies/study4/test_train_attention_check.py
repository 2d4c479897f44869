"""studies/study4/train_attention_check.py (Study 4's one-off check of the eager-attention cache copies): its
inputs are refused before any training, it reads a compare config's train section, it compares all but timings."""

from __future__ import annotations

import pytest

from helpers import load_script as _load


def _usage_error(main, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """``main(argv)`` exits 2 through argparse; the last line of stderr (the one after the usage)."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--out", "{tmp}/new"],
            "give the arguments of bandpo train after --, e.g. -- --config configs/smollm2-arith.yaml",
        ),
        (["--out", "{tmp}", "--", "--config", "tiny"], "--out '{tmp}' exists: give a new folder"),
        (
            ["--out", "{tmp}/new", "--compare-config", "{tmp}/none.yaml"],
            "--compare-config '{tmp}/none.yaml' is not a file",
        ),
        (
            ["--out", "{tmp}/new", "--compare-config", "{tmp}/c.yaml"],
            "--compare-config: {tmp}/c.yaml: no train.config",
        ),
    ],
)
def test_train_attention_check_refuses_before_training(
    argv: list[str], message: str, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "c.yaml").write_text("train:\n  overrides: {max_steps: 2}\n")
    main = _load("studies/study4/train_attention_check.py").main
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert _usage_error(main, argv, capsys).endswith(message.replace("{tmp}", str(tmp_path)))


def test_train_attention_check_reads_a_compare_configs_train_section(tmp_path) -> None:
    (tmp_path / "base.yaml").write_text("seed: 0\n")
    (tmp_path / "sub").mkdir()
    config = tmp_path / "sub" / "c.yaml"
    config.write_text(
        "train:\n  config: ../base.yaml\n  overrides:\n    model.precision: bf16\n"
        "    data.task_options: {digits: [1, 2], seed: 0}\n    learning_rate: 1.0e-5\n"
    )
    args = _load("studies/study4/train_attention_check.py").compare_train_args(config)
    assert args == [
        "--config",
        str(tmp_path / "base.yaml"),
        "model.precision=bf16",
        'data.task_options={"digits": [1, 2], "seed": 0}',
        "learning_rate=1e-05",
    ]


def test_train_attention_check_leaves_out_timings_only() -> None:
    is_timing = _load("studies/study4/train_attention_check.py").is_timing
    timings = ["time", "step_time", "train_runtime", "train_samples_per_second", "elapsed_s", "eval_wall_s"]
    compared = [
        "reward_std",
        "frac_reward_zero_std",
        "clip/tail_share",
        "clip/tail_share_up",
        "loss",
        "entropy",
    ]
    assert all(is_timing(k) for k in timings) and not any(is_timing(k) for k in compared)
