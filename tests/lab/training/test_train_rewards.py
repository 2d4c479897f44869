"""Tests for bandpo_lab.training.rewards: rewards by name or import path, several with weights, a verifier returning a
bool, and every misuse refused at config time (``prepare``, before any model loads) in one line."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("trl")

from bandpo_lab.training.config import ConfigError, load_train_config
from bandpo_lab.training.rewards import build_rewards, check_rewards_on
from helpers import CONFIGS

TINY = CONFIGS / "tiny.yaml"

USER_MODULE = """
def score(prompts, completions, **kwargs):
    return [float(len(c) % 2) for c in completions]

def right_or_wrong(completion, ground_truth):
    return completion.strip() == str(ground_truth)

def one_value(prompts, completions, **kwargs):
    return [1.0]

def text_value(prompts, completions, **kwargs):
    return ["high" for _ in completions]

def one_string(prompts, completions, **kwargs):
    return "1.00"

def needs_column(prompts, completions, level, **kwargs):
    return [1.0 for _ in completions]

def prompt_ends_with_the_puzzle(prompts, completions, **kwargs):
    if not all(p.endswith("=") for p in prompts):
        raise ValueError(f"no puzzle at the end of {prompts[0]!r}")
    return [1.0 for _ in completions]

class Holder:
    @staticmethod
    def nested(prompts, completions, **kwargs):
        return [0.0 for _ in completions]

NOT_CALLABLE = 3
"""


@pytest.fixture
def user_rewards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "my_rewards_mod.py").write_text(textwrap.dedent(USER_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_rewards_mod"
    sys.modules.pop("my_rewards_mod", None)


def _config(*overrides: str):
    return load_train_config(TINY, list(overrides))


def _problem() -> dict:
    return {"prompt": "3,7,2:23=", "answer": "3*7+2"}


def test_import_path_reward_function(user_rewards: str) -> None:
    (reward,) = build_rewards(_config(f"reward.name={user_rewards}:score"))
    assert reward.__name__ == "score"
    assert reward(prompts=["p"] * 2, completions=["a", "ab"]) == [1.0, 0.0]
    (nested,) = build_rewards(_config(f"reward.name={user_rewards}:Holder.nested"))
    assert nested.__name__ == "nested"


def test_import_path_verifier_returning_a_bool(user_rewards: str) -> None:
    (reward,) = build_rewards(_config(f"reward.name={user_rewards}:right_or_wrong"))
    out = reward(prompts=["p"] * 2, completions=["5", "6"], answer=["5", "5"])
    assert out == [1.0, -1.0]  # VerifierReward's +1 / -1; a bool is never "unparsed"
    (zero_one,) = build_rewards(
        _config(f"reward.name={user_rewards}:right_or_wrong", "reward.options.incorrect_reward=0")
    )
    assert zero_one(prompts=["p"], completions=["6"], answer=["5"]) == [0.0]


def test_registered_verifier_returning_a_bool_works_in_training_reward() -> None:
    from bandpo_lab.rewards import REWARDS, VERIFIERS, register_verifier

    try:
        reward = register_verifier("test_bool_verifier", lambda c, gt: c == gt)
        assert reward(prompts=["p"] * 2, completions=["x", "y"], answer=["x", "x"]) == [1.0, -1.0]
    finally:
        REWARDS.unregister("test_bool_verifier")
        VERIFIERS.unregister("test_bool_verifier")


def test_several_rewards_with_weights_and_options(user_rewards: str) -> None:
    config = _config(
        f"reward.name=[countdown, '{user_rewards}:score']",
        "reward_weights=[1.0, 0.5]",
        f"reward.options={{'{user_rewards}:score': {{}}}}",
    )
    rewards = build_rewards(config, [1.0, 0.5])
    assert [r.__name__ for r in rewards] == ["countdown", "score"]
    with pytest.raises(ConfigError, match=r"reward_weights=\[1.0\] has 1 weight\(s\) for 2 reward\(s\)"):
        build_rewards(config, [1.0])
    with pytest.raises(ConfigError, match=r"'dapo'.* is not among reward.name"):
        build_rewards(_config("reward.name=[countdown, last_number]", "reward.options={dapo: {}}"))


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("no_such_module_xyz:score", r"cannot import module 'no_such_module_xyz'"),
        ("{mod}:missing", r"has no attribute 'missing' \(it has: .*score"),
        ("{mod}:NOT_CALLABLE", r"is a int, not a function"),
        ("{mod}:", r"must look like 'my_pkg.rewards:score'"),
        ("nonexistent_reward", r"unknown reward 'nonexistent_reward'"),
    ],
)
def test_bad_reward_names_are_one_line(user_rewards: str, name: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as err:
        build_rewards(_config(f"reward.name={name.format(mod=user_rewards)}"))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("attr", "match"),
    [
        ("one_value", r"must return 2 rewards, got 1 values"),
        ("text_value", r"returned 'high'; rewards must be finite or None"),
        (
            "one_string",
            r"^reward 'one_string' returned a str, must return a list of floats \(one per completion\) \(a trial",
        ),
        ("needs_column", r"missing 1 required keyword-only argument: 'level'|required positional argument"),
    ],
)
def test_a_reward_that_does_not_return_one_number_per_completion_fails_the_trial(
    user_rewards: str, attr: str, match: str
) -> None:
    rewards = build_rewards(_config(f"reward.name={user_rewards}:{attr}"))
    with pytest.raises(ConfigError, match=match):
        check_rewards_on(rewards, _problem())


def test_a_reward_failing_on_some_completions_passes_the_trial(user_rewards: str) -> None:
    from bandpo_lab.rewards import REWARDS

    rewards = build_rewards(_config("reward.name=countdown"))
    check_rewards_on(rewards, _problem())  # the empty completion scores 0, the answer 1: no error
    assert "countdown" in REWARDS


def test_prepare_refuses_a_bad_reward_before_any_model_loads(user_rewards: str, tmp_path: Path) -> None:
    from bandpo_lab.training.run import prepare

    config = _config(f"reward.name={user_rewards}:one_value", f"output_dir={tmp_path / 'out'}")
    with pytest.raises(ConfigError, match="must return 2 rewards"):
        prepare(config)


def test_prepare_tries_the_rewards_on_the_formatted_prompt(user_rewards: str, tmp_path: Path) -> None:
    """The trial call used the unformatted prompt, so a reward that cannot read the prompt a
    ``data.prompt_template`` makes passed ``--dry-run`` and crashed training at step 1; the countdown reward
    reads such a prompt."""
    from bandpo_lab.training.run import prepare

    template = "data.prompt_template={prompt} Solve it."
    out = f"output_dir={tmp_path / 'out'}"
    prepare(_config(f"reward.name={user_rewards}:prompt_ends_with_the_puzzle", out))  # the task's prompt
    with pytest.raises(
        ConfigError, match=r"failed on a trial call .*no puzzle at the end of '.*= Solve it\.'"
    ):
        prepare(_config(f"reward.name={user_rewards}:prompt_ends_with_the_puzzle", template, out))
    prepare(_config("reward.name=countdown", template, out))
