"""How a real-model RL step computes on a CPU: the precision setting.

``precision`` (``model.precision`` in a training config, also as an override of ``bandpo demo``; ``--precision`` on
``eval`` and ``probe``; ``eval.precision`` in a compare config):

``float32``
    Every matrix product in float32.
``bf16``
    Sampling (``generate``) under bfloat16 autocast, and the matrix products of the *backward* pass in bfloat16
    (the linear layers': bfloat16 products of bfloat16 copies saved by the forward, :mod:`bandpo_lab.bf16_backward`;
    the others: bfloat16 inputs, float32 accumulation and outputs, oneDNN's ``fp32_precision = "bf16"``). The forward
    passes that give the log-probabilities of the ratio (old and new policy) stay float32, and so do the master
    weights, the optimizer, the loss and its bounds. It needs a CPU with native bfloat16 matrix instructions
    (``avx512_bf16`` or ``amx_bf16``): elsewhere it is refused in one line before a model loads
    (:func:`bf16_problem`; PyTorch's reference kernel there computes bfloat16 products at 1 GFLOP/s against 89 for
    float32 on an AVX2 core, docs/smollm2.md).
``auto``
    ``bf16`` where the CPU has native bfloat16 matrix instructions (``amx_bf16`` or ``avx512_bf16``), ``float32``
    elsewhere.

Why the forward stays float32 (measured on SmolLM2-135M, ``docs/smollm2.md``): in bfloat16 the weights and
activations carry 8 significant bits, while one optimizer update moves a weight by about 1e-4 of its value. After
an update, part of the rounded values flip by a whole bfloat16 step, so the bf16 policy's log-probabilities move by
0.1-0.2 (standard deviation) beyond what the update moves them in float64: a ratio that differs from the exact one
by 10-20 %, enough to push tokens across a 0.2 clip boundary that the update did not push. That is clipping made by
rounding, and it would decide a study of clipping. The log-probs of the ratio are therefore computed in float32;
the backward pass only shapes the gradient (a 0.3 % relative error per product, far below the sampling noise of
the gradient), and sampling from a bf16 copy of the policy is the usual rollout-engine mismatch (the ratio is
taken between float32 log-probs of the sampled tokens, exactly 1 on the first update of a round).

On a GPU the frameworks' own mixed precision applies (TRL's ``bf16``), and ``precision`` changes nothing; TRL's
``bf16: true`` autocasts the ratio's forward passes too, which moves tokens across clip boundaries (measured on an
H200: docs/smollm2.md, "On a GPU"), so the run's precision line says which of TRL's flags are on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "BF16_MIN_PARAMS",
    "FLOAT32",
    "GPU_REASON",
    "NATIVE_BF16_FLAGS",
    "PRECISIONS",
    "Precision",
    "bf16_problem",
    "check_precision",
    "cpu_bf16_flags",
    "cuda_tf32",
    "matmul_precision",
    "onednn_matmul_setting",
    "precision_for",
    "resolve_precision",
    "weight_dtypes",
    "weights_note",
]

PRECISIONS = ("auto", "float32", "bf16")
"""Valid ``precision`` values (module docstring)."""

NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16")
"""CPU flags (``/proc/cpuinfo``) of native bfloat16 matrix instructions."""

BF16_MIN_PARAMS = 20_000_000
"""``auto`` keeps float32 below this many parameters: a small model's step is not made of large matrix
products, and bfloat16 autocast only adds casts to it (the 0.9M-parameter task model, measured in
``docs/smollm2.md``)."""

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
    """The native bfloat16 flags (:data:`NATIVE_BF16_FLAGS`) this CPU reports, from ``/proc/cpuinfo`` (or the
    given text); empty where there are none or the file cannot be read (not Linux)."""
    if cpuinfo is None:
        try:
            cpuinfo = _CPUINFO.read_text()
        except OSError:
            return ()
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
            break
    return tuple(f for f in NATIVE_BF16_FLAGS if f in flags)


@dataclass(frozen=True)
class Precision:
    """A resolved precision.

    Attributes:
        requested: what the config asked for (one of :data:`PRECISIONS`).
        name: what runs: ``float32`` or ``bf16`` on a CPU; ``framework`` on a GPU (its own mixed precision).
        reason: one line saying why (the CPU flags found, or the GPU).
    """

    requested: str
    name: str
    reason: str

    @property
    def bf16(self) -> bool:
        """Whether sampling and the backward pass use bfloat16 (module docstring)."""
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
        ``bf16``: the linear layers of a forward that records a graph save bfloat16 copies of their inputs and
        weights and run their backward products in bfloat16 (:mod:`bandpo_lab.bf16_backward`; their forward is
        float32), and the other float32 products take bfloat16 inputs (float32 accumulation and output); the
        forward passes inside it go back to float32 products under :meth:`exact`. Activation checkpointing's
        recomputation runs inside the backward pass, and under :meth:`exact` too (:meth:`_exact_recomputation`),
        as the forward it repeats did: it saves the same tensors, so checkpointing leaves the gradient unchanged."""
        if not self.bf16:
            yield
            return
        from bandpo_lab.bf16_backward import bf16_backward_linears

        with matmul_precision("bf16"), bf16_backward_linears(), self._exact_recomputation():
            yield

    @contextlib.contextmanager
    def _exact_recomputation(self) -> Iterator[None]:
        """Within the block, a module's forward that records a graph while the autograd engine runs a backward
        pass (activation checkpointing's recomputation, reentrant or not: ``torch.utils.checkpoint``, which
        transformers' ``gradient_checkpointing`` calls on each decoder layer) runs under :meth:`exact`, with its
        submodules. Without it the recomputation ran under the backward's ``fp32_precision = "bf16"``: on a CPU
        where oneDNN applies that setting (AMX), its float32 products took bfloat16 inputs, so the activations it
        saved for the backward products (a layer's input, ``tanh``'s output) were not the forward's, and the
        gradients differed from those without checkpointing by more than the rounding of the bfloat16 products.
        The backward's own products run in the engine, not in a module's forward, so they keep the block's
        setting; a custom ``backward`` runs without grad, so it is not taken for a recomputation."""
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
    :data:`BF16_MIN_PARAMS` parameters (``n_params``; ``None``: unknown, counts as large), else ``float32``.
    ``bf16`` on a CPU without the flags is refused (:func:`bf16_problem`). On a GPU: ``framework``, for the reason ``gpu_reason`` when given (what the
    framework's own settings compute: :func:`bandpo_lab.training.run.gpu_precision_reason`), else :data:`GPU_REASON`.

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
    (``on_gpu``: the framework's own mixed precision applies) or on a CPU with them. Training's preflight, ``eval``
    and ``probe`` call it before a model loads; ``auto`` picks float32 on such a CPU instead.
    """
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
    """Whether float32 matrix products on CUDA use TF32 now, by PyTorch's settings (``fp32_precision`` of
    ``torch.backends.cuda.matmul``, else the global one, else the older ``allow_tf32`` flag: what
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
    """One line for a run whose weights are not float32 (``model.dtype: bfloat16``, say): every forward then
    computes in their dtype, so the log-probs that form the ratio are not float32, whatever ``precision`` (on a
    CPU) or TRL's ``bf16`` (on a GPU) says; ``None`` for float32 weights."""
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
