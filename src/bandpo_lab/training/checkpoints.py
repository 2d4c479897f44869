"""Which ``checkpoint-<step>`` directories of a run can be resumed from (docs/trl.md, "Troubleshooting runs"),
from headers and listings only: a ``.safetensors`` file as long as its header says, a ``torch.save`` zip archive
with its central directory (written last), a ``trainer_state.json`` that parses.
"""

from __future__ import annotations

import json
import re
import shutil
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from bandpo_lab.training.layout import CHECKPOINT_PATTERN, CHECKPOINT_STATE, TRAINER_STATE

SAFETENSORS_MAX_HEADER = 100_000_000
"""The largest header length the safetensors library reads (its ``MAX_HEADER_SIZE``, in bytes)."""

_TORCH_STATE = re.compile(r"(optimizer|scheduler|scaler)\.pt|rng_state.*\.pth")
"""The ``torch.save`` archives of :data:`~bandpo_lab.training.layout.CHECKPOINT_STATE` (``scaler.pt``: fp16 mixed
precision's), each checked for its zip directory."""


def checkpoint_dirs(output_dir: str | Path) -> list[Path]:
    """The ``checkpoint-<step>`` directories of ``output_dir``, oldest (lowest step) first."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return []
    found = [p for p in output_dir.iterdir() if CHECKPOINT_PATTERN.match(p.name) and p.is_dir()]
    return sorted(found, key=lambda p: int(CHECKPOINT_PATTERN.match(p.name).group(1)))  # type: ignore[union-attr]


def safetensors_problem(path: Path) -> str | None:
    """``None`` if ``path`` is a whole ``.safetensors`` file (8-byte header length, JSON header, data: exactly
    ``8 + header length + largest end offset`` bytes); otherwise what is wrong with it (truncated, or no
    safetensors file at all)."""
    if not path.is_file():
        return f"{path.name} is missing"
    size = path.stat().st_size
    with path.open("rb") as f:
        prefix = f.read(8)
        if len(prefix) < 8:
            return f"{path.name} is truncated ({size} bytes)"
        header_len = int.from_bytes(prefix, "little")
        first = f.read(1)
        if header_len > SAFETENSORS_MAX_HEADER or first not in (b"", b"{"):
            if header_len > SAFETENSORS_MAX_HEADER or 8 + header_len > size:
                larger = "larger than the file" if 8 + header_len > size else "beyond safetensors' limit"
                why = f"its first 8 bytes give a header length of {header_len}, {larger}"
            else:
                why = f"its header starts with {first!r}, not with the '{{' of a JSON object"
            return f"{path.name} is not a safetensors file ({size} bytes): {why}"
        if 8 + header_len > size:
            return f"{path.name} is truncated ({size} bytes, its header alone needs {8 + header_len})"
        f.seek(8)
        try:
            header = json.loads(f.read(header_len))
            end = max(
                (int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0
            )
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            return f"{path.name} has an unreadable header"
    expected = 8 + header_len + end
    if size != expected:
        return f"{path.name} is truncated ({size} bytes, its header describes {expected})"
    return None


def _torch_file_problem(path: Path) -> str | None:
    """``None`` if the ``torch.save`` archive ``path`` is whole (its zip central directory, written last, reads)."""
    try:
        with zipfile.ZipFile(path):
            return None
    except (OSError, zipfile.BadZipFile):
        return f"{path.name} is truncated or unreadable"


def weights_problem(checkpoint: Path) -> str | None:
    """``None`` if the model weights in the folder ``checkpoint`` (a checkpoint, a saved model) are whole, every
    shard an index names included; otherwise the first file missing, truncated or not of its format."""
    for name, check in (
        ("model.safetensors.index.json", safetensors_problem),
        ("pytorch_model.bin.index.json", _torch_file_problem),
    ):
        index = checkpoint / name
        if not index.is_file():
            continue
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (ValueError, KeyError, TypeError, AttributeError):
            return f"{index.name} is unreadable"
        for shard in shards:
            problem = check(checkpoint / shard) if (checkpoint / shard).is_file() else f"{shard} is missing"
            if problem:
                return problem
        return None
    for name in ("model.safetensors", "adapter_model.safetensors"):
        if (checkpoint / name).exists():
            return safetensors_problem(checkpoint / name)
    for name in ("pytorch_model.bin", "adapter_model.bin"):
        if (checkpoint / name).exists():
            return _torch_file_problem(checkpoint / name)
    if _sharded_state(checkpoint):
        return None
    return "no model weights (model.safetensors)"


NO_TRAINING_STATE = "saved without training state"
"""Why a finished save (``save_only_model=true``) cannot be resumed: no optimizer or scheduler state."""


def _sharded_state(checkpoint: Path) -> bool:
    """FSDP (``pytorch_model_fsdp_*``) or DeepSpeed (``global_step*``) state directories: not inspected."""
    return any(
        p.is_dir() for p in (*checkpoint.glob("pytorch_model_fsdp_*"), *checkpoint.glob("global_step*"))
    )


def _inspect(checkpoint: Path) -> tuple[str | None, int | None]:
    """``(problem, global_step)``: ``None`` if ``checkpoint`` can be resumed from, else the first thing missing or
    unreadable in it; and the step ``trainer_state.json`` records."""
    state = checkpoint / TRAINER_STATE
    if not state.is_file():
        return f"no {TRAINER_STATE} (written last: the save did not finish)", None
    try:
        step = json.loads(state.read_text())["global_step"]
        if not isinstance(step, int):
            raise TypeError(step)
    except (ValueError, KeyError, TypeError):
        return f"{TRAINER_STATE} is truncated or unreadable", None
    problem = weights_problem(checkpoint)
    if problem:
        return problem, step
    sharded = _sharded_state(checkpoint)
    for name in ("optimizer", "scheduler"):
        if not (checkpoint / f"{name}.pt").exists() and not (
            sharded or (checkpoint / f"{name}.bin").exists()
        ):
            return f"{NO_TRAINING_STATE} ({name}.pt: no {name} state)", step
    for path in sorted(p for p in checkpoint.iterdir() if _TORCH_STATE.fullmatch(p.name)):
        problem = _torch_file_problem(path)
        if problem:
            return problem, step
    return None, step


@dataclass
class CheckpointScan:
    """The checkpoints of one ``output_dir``: the newest complete one (``latest``, at ``step``), the newer
    incomplete ones (``skipped``, newest first, with what is wrong), and whether there is any (``any_found``)."""

    latest: Path | None = None
    step: int | None = None
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    any_found: bool = False

    @property
    def only_model_saves(self) -> bool:
        """No complete checkpoint, and at least one saved with ``save_only_model=true``: nothing to resume."""
        return self.latest is None and any(why.startswith(NO_TRAINING_STATE) for _, why in self.skipped)

    def describe_skipped(self) -> str:
        """``checkpoint-8 (no trainer_state.json ...), ...``: the incomplete checkpoints, for a message."""
        return ", ".join(f"{path.name} ({why})" for path, why in self.skipped)


def scan_checkpoints(output_dir: str | Path) -> CheckpointScan:
    """The newest complete checkpoint in ``output_dir`` and the incomplete ones newer than it."""
    dirs = checkpoint_dirs(output_dir)
    scan = CheckpointScan(any_found=bool(dirs))
    for path in reversed(dirs):
        try:
            problem, step = _inspect(path)
        except OSError as err:  # e.g. no permission: not resumable either
            problem, step = f"unreadable ({err.strerror or err})", None
        if problem is None:
            scan.latest, scan.step = path, step
            break
        scan.skipped.append((path, problem))
    return scan


def copy_model_files(checkpoint: Path, output_dir: Path) -> None:
    """Copy what ``Trainer.save_model`` writes (no optimizer, scheduler, RNG or trainer state) from ``checkpoint``
    to ``output_dir``."""
    for path in checkpoint.iterdir():
        if path.is_file() and not CHECKPOINT_STATE.match(path.name):
            shutil.copy2(path, output_dir / path.name)
