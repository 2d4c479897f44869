"""bandpo.integrations.skyrl without SkyRL, so in every environment: its translation of SkyRL's config into a
``ClipMethod`` with its one table, ``SKYRL_NAMES`` (a plain namespace stands for SkyRL's ``trainer.algorithm``), the
loss names, and the one-line error of the SkyRL-facing names on Python 3.11; the configs SkyRL builds itself are
tested in test_skyrl.py and test_skyrl_section.py (``make test-skyrl``)."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

import bandpo
import bandpo.integrations.skyrl as bskyrl
from bandpo.losses.clip_rules import make_clip_rule
from bandpo.losses.method import METHOD_NAMES
from bandpo.losses.schedule import RadiusSchedule, rule_at_radius
from helpers import REPO


def test_skyrl_names_translate_the_section_into_a_clip_method() -> None:
    """SKYRL_NAMES, SkyRL's one table (no SkyRL needed): a setting applies to the rules that have the parameter,
    ``relax=true`` is SkyRL's interval, ``rule_kwargs`` replaces, ``cap=None`` is no cap for Band and DCPO's 10,
    the trainer's ``step_delta`` moves the radius, and an error names the setting in SkyRL's spelling."""
    assert all(k.startswith("trainer.algorithm.") for k in bskyrl.SKYRL_NAMES if k != "total_training_steps")
    assert set(bskyrl.SKYRL_NAMES.values()) - set(METHOD_NAMES) <= {
        "divergence", "delta", "cap", "relax", "method", "eps_low", "eps_high", "clip_divergence_low",
        "clip_divergence_high",
    }  # fmt: skip
    alg = SimpleNamespace(
        eps_clip_low=0.1,
        eps_clip_high=0.3,
        bandpo={"delta": 0.1, "cap": None, "relax": True, "delta_schedule": "linear", "delta_end": 0.02},
    )
    method = bskyrl.clip_method_for("band", alg, total_steps=10)
    assert method.clip_rule == make_clip_rule("band", delta=0.1, cap=None, relax=(0.1, 0.3))
    assert method.schedule == RadiusSchedule("linear", 0.1, 0.02, total_steps=10)
    assert bskyrl.schedule_for("band", alg, 10) == method.schedule
    no_cap = SimpleNamespace(eps_clip_low=0.1, eps_clip_high=0.3, bandpo={"cap": None, "relax": True})
    assert bskyrl.clip_rule_for("dcpo", no_cap) == make_clip_rule("dcpo", eps_low=0.1, eps_high=0.3)  # cap 10
    assert bskyrl.clip_rule_for("grpo", SimpleNamespace()) == make_clip_rule("grpo")
    kwargs = SimpleNamespace(bandpo={"rule_kwargs": {"clip_divergence_low": 0.02, "truncation_c": 5.0}})
    assert bskyrl.clip_rule_for("dppo_kl", kwargs) == make_clip_rule(
        "dppo_kl", clip_divergence_low=0.02, truncation_c=5.0
    )
    # SkyRL's own dppo.delta_low / delta_high are the DPPO rules' thresholds (an object or a mapping), ignored by
    # the other rules; rule_kwargs still replaces them
    dppo = SimpleNamespace(delta_low=0.01, delta_high=0.03, dppo_type="binary_tv")
    assert bskyrl.clip_rule_for("dppo_kl", SimpleNamespace(dppo=dppo)) == make_clip_rule(
        "dppo_kl", clip_divergence_low=0.01, clip_divergence_high=0.03
    )
    assert bskyrl.clip_rule_for("grpo", SimpleNamespace(dppo=dppo)) == make_clip_rule("grpo")
    both = SimpleNamespace(dppo={"delta_low": 0.3}, bandpo={"rule_kwargs": {"clip_divergence_low": 0.02}})
    assert bskyrl.clip_rule_for("dppo_tv", both) == make_clip_rule("dppo_tv", clip_divergence_low=0.02)
    step = SimpleNamespace(bandpo={**alg.bandpo, "relax": False, "step_delta": 0.05})
    assert bskyrl.clip_rule_for("band", step) == rule_at_radius(
        make_clip_rule("band", delta=0.1, cap=None), 0.05
    )
    with pytest.raises(ValueError, match=r"^invalid trainer\.algorithm\.bandpo config \(clip rule 'band'\): "
                       r"trainer\.algorithm\.bandpo\.delta_end must be a finite number > 0, got -1"):  # fmt: skip
        bskyrl.clip_method_for("band", SimpleNamespace(bandpo={"delta_schedule": "cosine", "delta_end": -1}))


@pytest.mark.parametrize(
    ("rule", "alg", "message"),
    [
        (
            "band",
            {"bandpo": {"delta": -1}},
            r"\): trainer\.algorithm\.bandpo\.delta must be a finite number > 0",
        ),
        (
            "grpo",
            {"eps_clip_low": 1.5},
            r"\): trainer\.algorithm\.eps_clip_low must be a finite number in \[0\.0, 1\.0\]",
        ),
        (
            "dppo_tv",
            {"dppo": {"delta_high": 0.0}},
            r"\): trainer\.algorithm\.dppo\.delta_high must be a finite number > 0, got 0\.0$",
        ),
        (
            "dppo_tv",
            {"bandpo": {"rule_kwargs": {"truncation_c": 1.0}}},
            r"\): trainer\.algorithm\.bandpo\.rule_kwargs\['truncation_c'\] must be a finite number > 1, got 1\.0$",
        ),
    ],
)
def test_rule_parameter_errors_name_skyrls_setting(rule: str, alg: dict, message: str) -> None:
    """A rule parameter's error names SkyRL's key it came from, not the rule's parameter (``eps_low``)."""
    with pytest.raises(ValueError, match=message):
        bskyrl.clip_method_for(rule, SimpleNamespace(**alg))


# ---- without SkyRL (every environment) -------------------------------------------------------------------------


def test_every_rule_skyrl_can_run_has_a_loss_name() -> None:
    names = bskyrl.policy_loss_names()
    assert names[bskyrl.LOSS_NAME] == "band"
    expected = {rule for rule in bandpo.CLIP_RULES.names() if not bandpo.CLIP_RULES.get(rule).needs_entropy}
    assert set(names.values()) == expected
    assert all(name == "bandpo" or name == "bandpo_" + rule for name, rule in names.items())
    assert "adaptive_band" in bandpo.CLIP_RULES  # the one rule SkyRL cannot run (no entropy in its loss call)
    assert "bandpo_adaptive_band" not in names


def test_unknown_loss_note_lists_bandpo_names_only_when_meant() -> None:
    note = bskyrl.unknown_loss_note("dcpo")
    assert note is not None and "did you mean 'bandpo_dcpo'?" in note and "bandpo_dppo_kl" in note
    assert "did you mean 'bandpo'?" in (bskyrl.unknown_loss_note("band") or "")
    assert "did you mean 'bandpo'?" in (bskyrl.unknown_loss_note("BandPO") or "")
    assert bskyrl.unknown_loss_note("regularr") is None
    assert bskyrl.unknown_loss_note("my_custom_loss") is None


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="the Python 3.11 message; SkyRL imports on 3.12")
def test_skyrl_facing_names_raise_one_line_on_python_311() -> None:
    """Each SkyRL-facing name, imported in a fresh interpreter (one for all of them: a ``from ... import NAME``
    fails before it binds anything, so the names do not see each other), raises the one-line error."""
    code = (
        "import importlib, sys\n"
        f"for name in {list(bskyrl.SKYRL_API)!r}:\n"
        "    try:\n"
        "        exec(f'from bandpo.integrations.skyrl import {name}')\n"
        "    except Exception as err:\n"
        "        print(name, type(err).__module__ + '.' + type(err).__name__, str(err).replace(chr(10), '|'))\n"
        "    else:\n"
        "        print(name, 'imported')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    lines = out.stdout.strip().splitlines()
    assert [line.split(" ", 1)[0] for line in lines] == list(bskyrl.SKYRL_API)
    for line in lines:
        name, kind, message = line.split(" ", 2)
        assert kind == "bandpo.integrations.skyrl.SkyRLUnavailableError", line
        assert "|" not in message and "needs Python >= 3.12" in message and "make test-skyrl" in message, line
    for name in bskyrl.SKYRL_API:
        with pytest.raises(bskyrl.SkyRLUnavailableError, match=r"^[^\n]*make test-skyrl[^\n]*$"):
            getattr(bskyrl, name)


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="the Python 3.11 message; SkyRL imports on 3.12")
def test_the_loss_called_without_skyrl_raises_one_line() -> None:
    """SkyRLPolicyLoss builds without SkyRL, but its call needs SkyRL's reduction: one line saying so, not a
    ModuleNotFoundError from inside the call."""
    import torch

    loss = bskyrl.SkyRLPolicyLoss("bandpo", "band")
    zeros = torch.zeros(2, 3)
    with pytest.raises(
        bskyrl.SkyRLUnavailableError, match=r"^[^\n]*needs Python >= 3.12[^\n]*make test-skyrl"
    ):
        loss(zeros, zeros, zeros, SimpleNamespace())


def test_import_bandpo_does_not_import_skyrl() -> None:
    code = "import bandpo, bandpo.integrations.skyrl, sys; print('skyrl' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "False"
