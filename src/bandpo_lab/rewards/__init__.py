"""Rule-based rewards for math data: verifiers (``dapo``, ``boxed``, ``last_number``), the registry of reward names
(:data:`REWARDS`) and a failure-tolerant wrapper (:func:`safe_reward_func`); docs/trl.md, "Rewards and answer
checking". The package namespace is the public API: import from ``bandpo_lab.rewards``.
"""

from __future__ import annotations

from bandpo_lab.rewards.answers import completion_text, extract_answer, last_boxed, normalize_answer
from bandpo_lab.rewards.functions import VerifierReward
from bandpo_lab.rewards.registry import (
    REWARDS,
    VERIFIERS,
    boxed_reward,
    dapo_reward,
    get_reward_func,
    get_verifier,
    register_reward,
    register_verifier,
    reward_names,
)
from bandpo_lab.rewards.safe import SafeRewardFunc, safe_reward_func
from bandpo_lab.rewards.verifiers import (
    VerifyResult,
    math_verify_available,
    verify_boxed,
    verify_dapo,
)

__all__ = [
    "REWARDS",
    "VERIFIERS",
    "SafeRewardFunc",
    "VerifierReward",
    "VerifyResult",
    "boxed_reward",
    "completion_text",
    "dapo_reward",
    "extract_answer",
    "get_reward_func",
    "get_verifier",
    "last_boxed",
    "math_verify_available",
    "normalize_answer",
    "register_reward",
    "register_verifier",
    "reward_names",
    "safe_reward_func",
    "verify_boxed",
    "verify_dapo",
]
