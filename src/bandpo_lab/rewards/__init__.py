"""Rule-based rewards for math data, a registry of reward names, and a failure-tolerant wrapper.

Verifiers score one completion against one ground truth and return a :class:`VerifyResult` (``correct``, and the
normalised extracted ``answer``, ``None`` when nothing could be parsed): ``dapo`` (:func:`verify_dapo`, the last
``Answer:`` line, docs/method.md#recipe), ``boxed`` (:func:`verify_boxed`, the last ``\\boxed{...}``, symbolic with
``math-verify``) and ``last_number``. Reward functions follow TRL's signature ``fn(prompts, completions, **kwargs)
-> list[float | None]``; :data:`REWARDS` maps names to them (:func:`get_reward_func`, :func:`register_reward`), and
:func:`safe_reward_func` gives a completion whose scoring raises a fixed failure reward instead of ending the run.
The package namespace is the public API: import from ``bandpo_lab.rewards``.
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
