"""The benchmarks' checks of their inputs (``benchmarks/``): a bad value stops them with one line naming the option,
the value and what is allowed, before any work (no training, no model, no SkyRL), instead of a loop that never
ends or a traceback after minutes. Also the small fixes around them: bf16_backward_check's ratio direction and
step_speed_vs_commit.sh's failed runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO
from helpers import load_script as _load


def _usage_error(main, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """``main(argv)`` exits 2 through argparse; the last line of stderr (the one after the usage)."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


# benchmarks/skyrl_loss.py (parsed and checked before SkyRL is imported: runs without .venv-skyrl)


def test_skyrl_loss_checks_rounds_and_shape_before_skyrl(capsys) -> None:
    bench = _load("benchmarks/skyrl_loss.py")
    for argv, message in (
        (["--rounds", "0"], "--rounds must be an integer >= 1, got 0"),
        (["--shape", "0", "8"], "--shape B must be an integer >= 1, got 0"),
        (["--shape", "4", "-1"], "--shape T must be an integer >= 1, got -1"),
    ):
        assert _usage_error(bench.main, argv, capsys) == f"{Path(sys.argv[0]).name}: error: {message}"


def test_skyrl_loss_writes_to_output_and_keeps_json_as_an_alias(capsys) -> None:
    """The CLI grammar's --output FILE; --json FILE still works and says once what it is now."""
    bench = _load("benchmarks/skyrl_loss.py")
    assert bench.parse_args(["--output", "a.json"]).output == Path("a.json")
    assert bench.parse_args([]).output is None
    assert capsys.readouterr().err == ""
    assert bench.parse_args(["--json", "b.json"]).output == Path("b.json")
    assert capsys.readouterr().err == f"{Path(sys.argv[0]).name}: --json is now --output\n"


# benchmarks/bf16_backward_check.py


def test_bf16_backward_check_refuses_zero_rounds_before_loading_the_model(capsys) -> None:
    check = _load("benchmarks/bf16_backward_check.py")
    assert "transformers" not in vars(check)  # the heavy imports wait for the options
    message = _usage_error(check.main, ["--rounds", "0"], capsys)
    assert message == f"{Path(sys.argv[0]).name}: error: --rounds must be an integer >= 1, got 0"


def test_bf16_backward_check_ratio_is_time_over_float32s() -> None:
    """It printed float32's time / this way's as "Nx float32's"; the project's "x baseline" is time / baseline."""
    check = _load("benchmarks/bf16_backward_check.py")
    assert check.format_time(1.0, 2.0) == "forward + backward 1.00 s (0.50x float32's time)"
    assert "(2.00x float32's time)" in check.format_time(4.0, 2.0)


# benchmarks/step_speed_vs_commit.sh


def _step_speed(
    tmp_path: Path, *args: str, mode: str = "side-by-side", old_package: str = "bandpo"
) -> subprocess.CompletedProcess:
    """The script in a scratch checkout: a ``.venv/bin/bandpo`` whose ``new`` run writes a metrics.jsonl, the real
    Python, a stale ``old/metrics.jsonl`` left by an earlier comparison, and an old tree whose own command
    (``src/<old_package>/cli/main.py``) writes the module and arguments it ran with to ``ran.txt`` and fails."""
    bin_ = tmp_path / ".venv" / "bin"
    bin_.mkdir(parents=True)
    (bin_ / "python").symlink_to(sys.executable)
    fake = bin_ / "bandpo"
    fake.write_text(
        "#!/usr/bin/env bash\n"
        'for a in "$@"; do case $a in output_dir=*) out=${a#output_dir=} ;; esac; done\n'
        'mkdir -p "$out"\n'
        'for s in 1 2 3 4; do echo "{\\"step\\": $s, \\"step_time\\": 2.0}"; done > "$out/metrics.jsonl"\n'
    )
    fake.chmod(0o755)
    stale = tmp_path / "out" / "old"
    stale.mkdir(parents=True)
    (stale / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "step_time": 1.0}) + "\n" for s in range(4))
    )
    cli = tmp_path / "old-tree" / "src" / old_package / "cli"
    cli.mkdir(parents=True)
    for init in (cli.parent / "__init__.py", cli / "__init__.py"):
        init.write_text("")
    (cli / "main.py").write_text(
        "import sys\n\n\ndef main():\n"
        "    open('ran.txt', 'w').write(' '.join([__name__, *sys.argv[1:]]))\n"
        "    return 3\n"
    )
    env = {**os.environ, "OUT": "out", "OLD_TREE": str(tmp_path / "old-tree"), "MODE": mode}
    return subprocess.run(
        ["bash", str(REPO / "benchmarks" / "step_speed_vs_commit.sh"), *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )


@pytest.mark.parametrize("mode", ["side-by-side", "sequential"])
def test_step_speed_stops_when_a_run_fails(tmp_path, mode: str) -> None:
    """Side by side, `old & new & wait` returned 0 whatever the runs did, so a failed run went on to the table,
    here with the stale metrics of an earlier comparison."""
    out = _step_speed(tmp_path, "abc123", "4", mode=mode)
    assert out.returncode == 1, out.stdout
    assert "new / old" not in out.stdout
    assert "step_speed_vs_commit.sh: the old run failed (exit 3); see out/old.log" in out.stderr


@pytest.mark.parametrize("old_package", ["bandpo", "bandpo_lab"])
def test_step_speed_runs_the_old_trees_own_command(tmp_path, old_package: str) -> None:
    """The old run called this checkout's ``bandpo`` script, which imports ``bandpo_lab.cli.main``: a tree from
    before the lab moved has no ``bandpo_lab``, so its ``bandpo`` ran under this checkout's lab and failed to import
    (the default commit 5aee1b2). It runs the tree's own entry point: ``bandpo_lab.cli.main`` where the tree has the
    lab, else ``bandpo.cli.main``."""
    _step_speed(tmp_path, "abc123", "4", mode="sequential", old_package=old_package)
    ran = (tmp_path / "old-tree" / "ran.txt").read_text().split()
    assert ran[0] == f"{old_package}.cli.main"
    assert ran[1:4] == ["train", "--config", "configs/smollm2-arith.yaml"]
    assert f"output_dir={tmp_path}/out/old" in ran


@pytest.mark.parametrize("steps", ["2", "0", "x"])
def test_step_speed_needs_steps_after_the_warm_up(tmp_path, steps: str) -> None:
    """The mean is over steps 3..STEPS: STEPS <= 2 divided by zero after both trainings."""
    out = _step_speed(tmp_path, "abc123", steps)
    assert out.returncode == 2 and out.stdout == "" and not (tmp_path / "out" / "new").exists()
    assert out.stderr == (
        f"step_speed_vs_commit.sh: STEPS must be an integer >= 3 (the mean is over steps 3..STEPS), got '{steps}'\n"
    )


# benchmarks/bf16_ratio_noise.py


def test_ratio_noise_restores_the_float32_product_setting() -> None:
    """Each precision's products are set for its passes only: the setting before (PyTorch's "none") comes back,
    also after an error, so the updates and the float64 reference run with the default products."""
    import torch

    noise = _load("benchmarks/bf16_ratio_noise.py")
    setting = torch.backends.mkldnn.matmul
    before = setting.fp32_precision
    with noise.fp32_products("cpu", "bf16"):
        assert setting.fp32_precision == "bf16"
    assert setting.fp32_precision == before
    with pytest.raises(RuntimeError, match="inside"), noise.fp32_products("cpu", "bf16"):
        raise RuntimeError("inside")
    assert setting.fp32_precision == before
    assert set(noise.MODES) == {"cpu", "cuda"} and "tf32" in noise.MODES["cuda"]
    # each mode's products: the named ones set, the others IEEE float32 (autocast decides their bfloat16)
    assert noise.PRODUCTS == {"bf16_inputs": "bf16", "tf32": "tf32"}
    assert set(noise.PRODUCTS) <= set(noise.MODES["cpu"]) | set(noise.MODES["cuda"])
    assert "bf16_inputs" not in noise.MODES["cuda"] and "tf32" not in noise.MODES["cpu"]
    cuda = torch.backends.cuda.matmul  # settable without a GPU
    before_cuda = cuda.fp32_precision
    with noise.fp32_products("cuda", "tf32"):
        assert cuda.fp32_precision == "tf32"
    assert cuda.fp32_precision == before_cuda


def test_ratio_noise_refuses_cuda_without_a_gpu(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks/bf16_ratio_noise.py"), "--device", "cuda"],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "BANDPO_CACHE_DIR": str(tmp_path)},  # never a conversion
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].endswith("error: --device cuda: no CUDA device here")
