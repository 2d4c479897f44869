"""How a real-model RL step runs on a CPU: the ``precision`` setting and its contexts (:mod:`.precision`), TRL's
fused LM head on the scored positions only (:mod:`.fused_head`), glibc's allocator kept from returning freed
memory during training (:mod:`.allocator`), the CPU thread count a command takes (:mod:`.threads`), and the seed
range of runs, evaluations and the probe (:mod:`.seeds`). Their public names are importable from here.
"""

from bandpo_lab.runtime.allocator import freed_memory_kept, freed_memory_returned
from bandpo_lab.runtime.fused_head import completion_tokens_only
from bandpo_lab.runtime.precision import (
    BF16_MIN_PARAMS,
    FLOAT32,
    GPU_REASON,
    PRECISIONS,
    Precision,
    bf16_problem,
    check_precision,
    cpu_bf16_flags,
    cuda_tf32,
    matmul_precision,
    onednn_matmul_setting,
    precision_for,
    resolve_precision,
    weight_dtypes,
    weights_note,
)
from bandpo_lab.runtime.seeds import SEED_MAX, SEED_RANGE, check_seed, is_seed
from bandpo_lab.runtime.threads import THREADS_PER_CPU, check_threads

__all__ = [
    "BF16_MIN_PARAMS",
    "FLOAT32",
    "GPU_REASON",
    "PRECISIONS",
    "SEED_MAX",
    "SEED_RANGE",
    "THREADS_PER_CPU",
    "Precision",
    "bf16_problem",
    "check_precision",
    "check_seed",
    "check_threads",
    "completion_tokens_only",
    "cpu_bf16_flags",
    "cuda_tf32",
    "freed_memory_kept",
    "freed_memory_returned",
    "is_seed",
    "matmul_precision",
    "onednn_matmul_setting",
    "precision_for",
    "resolve_precision",
    "weight_dtypes",
    "weights_note",
]
