"""``accelerate launch`` with two CPU processes (torchrun launcher, gloo backend), as the data-parallel tests
run it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for the launcher's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def accelerate_launch(
    target: list[str], timeout: float, num_processes: int = 2
) -> subprocess.CompletedProcess[str]:
    """Run ``accelerate launch ... <target>`` on ``num_processes`` CPU processes and wait for it.

    Args:
        target: what follows the launcher's options: a script and its arguments, or ``["-m", module, *args]``.
        timeout: seconds before ``subprocess.TimeoutExpired`` is raised.
        num_processes: data-parallel processes, all on this machine's CPU.

    Returns:
        The completed process, stdout and stderr captured as text (not checked: the caller asserts).
    """
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.accelerate_cli",
        "launch",
        "--multi_gpu",  # the torchrun launcher; ACCELERATE_USE_CPU + use_cpu make it multi-CPU with gloo
        "--num_processes",
        str(num_processes),
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        str(free_port()),
        *target,
    ]
    env = {
        **os.environ,
        "ACCELERATE_USE_CPU": "true",
        "CUDA_VISIBLE_DEVICES": "",
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "WANDB_DISABLED": "true",
    }
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
