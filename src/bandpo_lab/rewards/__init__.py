"""Rule-based rewards for math data, a registry of reward names, and a failure-tolerant wrapper.

Verifiers score one completion against one ground truth and return a :class:`VerifyResult` (``correct``, and
the normalised extracted ``answer``, ``None`` when nothing could be parsed: the eval's maj@k and
``n_unparsed`` read it):

* ``"dapo"`` (:func:`verify_dapo`): the DAPO / BandPO recipe (docs/method.md#recipe). The answer is the rest of the
  line after the *last* ``Answer:`` in the completion (case-insensitive, e.g. ``Final Answer: $42$``);
  answer and ground truth are normalised by :func:`normalize_answer` and compared by exact string match.
* ``"boxed"`` (:func:`verify_boxed`): the content of the last ``\\boxed{...}``. With the ``math-verify``
  package installed (extra ``bandpo[math]``) it is compared symbolically (``math_verify.parse``/``verify``);
  without it, by the normalised exact match of ``"dapo"``. :func:`math_verify_available` says which.

Reward functions follow TRL's signature ``fn(prompts, completions, **kwargs) -> list[float | None]``: one value
per completion; dataset columns arrive as keyword lists (the ground truth by default in ``answer``);
completions are strings or chat message lists ``[{"role": "assistant", "content": ...}]``.
``REWARDS`` maps names to them (``get_reward_func("dapo", incorrect_reward=0.0)``); another task adds its own
with :func:`register_reward`. :func:`safe_reward_func` wraps any of them so that a completion whose scoring
raises gets a fixed failure reward instead of ending the run, and counts those failures.

Modules: :mod:`bandpo_lab.rewards.answers` (completion text, answer extraction and normalisation),
:mod:`bandpo_lab.rewards.verifiers` (``dapo``, ``boxed``), :mod:`bandpo_lab.rewards.functions` (:class:`VerifierReward`),
:mod:`bandpo_lab.rewards.registry` (``REWARDS``, ``VERIFIERS`` and their functions), :mod:`bandpo_lab.rewards.safe`
(:func:`safe_reward_func`). The package namespace is the public API: import from ``bandpo_lab.rewards``.
"""

from __future__ import annotations

from bandpo_lab.rewards.answers import completion_text, extract_answer, last_boxed, normalize_answer
from bandpo_lab.rewards.functions import RewardFunc, VerifierReward
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
    Verifier,
    VerifyResult,
    math_verify_available,
    verify_boxed,
    verify_dapo,
)

__all__ = [
    "REWARDS",
    "VERIFIERS",
    "RewardFunc",
    "SafeRewardFunc",
    "Verifier",
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
