"""How a real-model RL step computes on a CPU: the ``precision`` setting (``auto``, ``float32``, ``bf16``) of
``model.precision``, ``--precision`` and ``eval.precision``. What each computes in (``bf16``: sampling under
bfloat16 autocast, bfloat16 backward products, all else float32), where, and why: docs/smollm2.md, "Precision and
speed"."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PRECISIONS = ("auto", "float32", "bf16")
"""Valid ``precision`` values (module docstring)."""

NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16")
"""CPU flags (``/proc/cpuinfo``) of native bfloat16 matrix instructions."""

BF16_MIN_PARAMS = 20_000_000
"""``auto`` keeps float32 below this many parameters (a small model's step gains nothing, docs/smollm2.md)."""

GPU_REASON = "GPU: the framework's own mixed precision"
"""The reason of a GPU run's precision when the caller does not say what its framework computes."""

_CPUINFO = Path("/proc/cpuinfo")


def check_precision(value: object, name: str = "precision") -> str:
    """``value`` if it is one of :data:`PRECISIONS`; else ``ValueError`` naming ``name``, the value and the valid
    values (``bfloat16`` is read as ``bf16``)."""
    if value == "bfloat16":
        return "bf16"
    if not isinstance(value, str) or value not in PRECISIONS:
        raise ValueError(f"{name} must be one of {', '.join(PRECISIONS)}, got {value!r}")
    return value


def cpu_bf16_flags(cpuinfo: str | None = None) -> tuple[str, ...]:
    """The native bfloat16 flags (:data:`NATIVE_BF16_FLAGS`) that every core of this CPU reports, from
    ``/proc/cpuinfo`` (or the given text): a process may run on any core, so a flag only some cores list does not
    count; empty where there are none or the file cannot be read (not Linux)."""
    if cpuinfo is None:
        try:
            cpuinfo = _CPUINFO.read_text()
        except OSError:
            return ()
    cores = [set(line.partition(":")[2].split()) for line in cpuinfo.splitlines() if line.startswith("flags")]
    return tuple(f for f in NATIVE_BF16_FLAGS if cores and all(f in flags for flags in cores))


@dataclass(frozen=True)
class Precision:
    """A resolved precision: what the config ``requested`` (one of :data:`PRECISIONS`), the ``name`` of what runs
    (``float32`` or ``bf16`` on a CPU; ``framework`` on a GPU, its own mixed precision) and the ``reason``, one line
    (the CPU flags found, or the GPU)."""

    requested: str
    name: str
    reason: str

    @property
    def bf16(self) -> bool:
        """Whether sampling and the backward pass use bfloat16."""
        return self.name == "bf16"

    def describe(self) -> str:
        """``bf16 (auto: this CPU has amx_bf16, avx512_bf16)``."""
        return f"{self.name} ({self.reason})"

    def record(self) -> dict[str, Any]:
        """For ``run_info.json``."""
        return {"requested": self.requested, "name": self.name, "reason": self.reason}

    @contextlib.contextmanager
    def sampling(self) -> Iterator[None]:
        """Around ``generate``: bfloat16 autocast for ``bf16``, nothing otherwise."""
        if not self.bf16:
            yield
            return
        import torch

        with torch.autocast("cpu", dtype=torch.bfloat16):
            yield

    @contextlib.contextmanager
    def backward(self) -> Iterator[None]:
        """Around a training step (forward, backward and any recomputation of activation checkpointing), for
        ``bf16``: the linear layers' backward products in bfloat16 (:mod:`bandpo_lab.bf16_backward`), the other
        float32 products with bfloat16 inputs; forward passes under :meth:`exact` and checkpointing's
        recomputation (:meth:`_exact_recomputation`) keep float32 products, so the gradient does not change."""
        if not self.bf16:
            yield
            return
        from bandpo_lab.bf16_backward import bf16_backward_linears

        with matmul_precision("bf16"), bf16_backward_linears(), self._exact_recomputation():
            yield

    @contextlib.contextmanager
    def _exact_recomputation(self) -> Iterator[None]:
        """Within the block, a module's forward that records a graph while the autograd engine runs a backward
        pass (activation checkpointing's recomputation, reentrant or not) runs under :meth:`exact`, with its
        submodules, so it saves the activations the forward saved (docs/smollm2.md, "The backward in bfloat16
        products"). The backward's own products and a custom ``backward`` (no grad) keep the block's setting."""
        import torch
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

        # one entry per module forward begun inside a recomputation; the outermost holds the exact() block
        entered: list[contextlib.ExitStack | None] = []

        def before(module: Any, args: Any) -> None:
            if entered:
                entered.append(None)
            elif torch.is_grad_enabled() and torch._C._current_graph_task_id() != -1:
                stack = contextlib.ExitStack()
                stack.enter_context(self.exact())
                entered.append(stack)

        def after(module: Any, args: Any, output: Any) -> None:
            if entered and (stack := entered.pop()) is not None:
                stack.close()

        handles = [
            register_module_forward_pre_hook(before),
            register_module_forward_hook(after, always_call=True),
        ]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()
            while entered:
                if (stack := entered.pop()) is not None:
                    stack.close()

    @contextlib.contextmanager
    def exact(self) -> Iterator[None]:
        """Around the forward passes whose log-probs form the ratio: float32 matrix products (inside
        :meth:`backward` too)."""
        with matmul_precision("ieee" if self.bf16 else None):
            yield


def onednn_matmul_setting() -> Any | None:
    """``torch.backends.mkldnn.matmul`` where this PyTorch has its ``fp32_precision`` (``"ieee"`` or ``"bf16"``: the
    precision of oneDNN's float32 matrix products), else ``None``."""
    import torch

    setting = getattr(getattr(torch.backends, "mkldnn", None), "matmul", None)
    return setting if hasattr(setting, "fp32_precision") else None


@contextlib.contextmanager
def matmul_precision(value: str | None) -> Iterator[None]:
    """Set oneDNN's float32 matmul precision (``ieee`` or ``bf16``) for the block; ``None`` leaves it."""
    setting = onednn_matmul_setting()
    if value is None or setting is None:
        yield
        return
    before = setting.fp32_precision
    setting.fp32_precision = value
    try:
        yield
    finally:
        setting.fp32_precision = before


def resolve_precision(
    requested: str,
    *,
    on_gpu: bool = False,
    n_params: int | None = None,
    cpuinfo: str | None = None,
    gpu_reason: str | None = None,
) -> Precision:
    """What ``requested`` (one of :data:`PRECISIONS`) runs as here.

    ``auto``: ``bf16`` where the CPU reports :data:`NATIVE_BF16_FLAGS` and the model has at least
    :data:`BF16_MIN_PARAMS` parameters (``n_params``; ``None``: unknown, counts as large), else ``float32``. On a
    GPU: ``framework``, for the reason ``gpu_reason`` (what the framework computes), else :data:`GPU_REASON`.

    Raises:
        ValueError: ``requested`` is not one of :data:`PRECISIONS`, or is ``bf16`` on a CPU without native bf16
            (the line of :func:`bf16_problem`).
    """
    requested = check_precision(requested)
    if on_gpu:
        return Precision(requested, "framework", f"GPU: {gpu_reason}" if gpu_reason else GPU_REASON)
    flags = cpu_bf16_flags(cpuinfo)
    has = (
        f"this CPU has {', '.join(flags)}"
        if flags
        else "this CPU has no native bf16 (no amx_bf16, avx512_bf16)"
    )
    if requested == "auto":
        if flags and n_params is not None and n_params < BF16_MIN_PARAMS:
            return Precision(
                requested,
                "float32",
                f"auto: {has}, but the model has {n_params / 1e6:.1f}M parameters (bf16 pays from "
                f"{BF16_MIN_PARAMS / 1e6:.0f}M)",
            )
        return Precision(requested, "bf16" if flags else "float32", f"auto: {has}")
    problem = bf16_problem(requested, "precision", cpuinfo=cpuinfo)
    if problem is not None:
        raise ValueError(problem)
    return Precision(requested, requested, f"asked for; {has}")


def bf16_problem(
    requested: object,
    name: str = "precision",
    *,
    at: str | None = None,
    on_gpu: bool = False,
    cpuinfo: str | None = None,
) -> str | None:
    """The one line that refuses ``requested`` = ``bf16`` (or ``bfloat16``) on a CPU without native bfloat16
    instructions (:data:`NATIVE_BF16_FLAGS` in ``cpuinfo``, by default ``/proc/cpuinfo``), naming the setting
    ``name`` and where it was set (``at``: ``in configs/my.yaml:12``, ...); ``None`` for any other value, on a GPU
    (``on_gpu``) or on a CPU with them."""
    if requested not in ("bf16", "bfloat16") or on_gpu or cpu_bf16_flags(cpuinfo):
        return None
    where = f" ({at})" if at else ""
    return (
        f"{name}={requested!r}{where} is not supported on this CPU (no avx512_bf16/amx_bf16 instructions); "
        "use float32 or auto"
    )


def precision_for(
    requested: str, model: Any, on_gpu: bool | None = None, gpu_reason: str | None = None
) -> Precision:
    """:func:`resolve_precision` for ``model`` (a ``torch.nn.Module``): its parameter count, and ``on_gpu`` from
    the device of its parameters unless given."""
    params = list(model.parameters())
    if on_gpu is None:
        on_gpu = bool(params) and params[0].device.type != "cpu"
    n_params = sum(p.numel() for p in params)
    return resolve_precision(requested, on_gpu=on_gpu, n_params=n_params, gpu_reason=gpu_reason)


def weight_dtypes(model: Any) -> list[str]:
    """The dtypes of ``model``'s floating-point parameters, sorted (``["float32"]``)."""
    return sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters() if p.is_floating_point()})


def cuda_tf32() -> bool | None:
    """Whether float32 matrix products on CUDA use TF32 now, by PyTorch's settings (what
    ``torch.set_float32_matmul_precision`` and TRL's ``tf32`` set); ``None`` where they cannot be read."""
    import torch

    try:
        setting = torch.backends.cuda.matmul.fp32_precision
        if setting == "none":
            setting = getattr(torch.backends, "fp32_precision", "none")
        if setting == "none":
            return bool(torch.backends.cuda.matmul.allow_tf32)
        return setting == "tf32"
    except (AttributeError, RuntimeError):  # an older torch, or the two APIs mixed
        return None


def weights_note(precision: Precision, model: Any) -> str | None:
    """One line for a run whose weights are not float32 (``model.dtype: bfloat16``, say): the log-probs that form
    the ratio are then not float32, whatever ``precision`` or TRL's ``bf16`` says; ``None`` for float32 weights."""
    dtypes = weight_dtypes(model)
    if not dtypes or dtypes == ["float32"]:
        return None
    keeps = (
        "model.dtype float32 with bf16 and fp16 false keeps them float32"
        if precision.name == "framework"
        else "precision keeps them float32 with model.dtype float32"
    )
    return (
        f"the weights are {', '.join(dtypes)}: the log-probs of the ratio are computed in that dtype, "
        f"not float32 ({keeps})"
    )


FLOAT32 = Precision("float32", "float32", "default")
"""Plain float32 (what a trainer computes in before a precision is resolved)."""
