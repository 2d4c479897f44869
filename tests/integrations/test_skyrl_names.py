"""bandpo.integrations.skyrl's translation of SkyRL's config into a ``ClipMethod`` with its one table, ``SKYRL_NAMES``:
SkyRL-free (a plain namespace stands for SkyRL's ``trainer.algorithm``), so it runs in every environment; the
configs SkyRL builds itself are tested in tests/integrations/test_skyrl.py (``make test-skyrl``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import bandpo.integrations.skyrl as bskyrl
from bandpo.losses.clip_rules import make_clip_rule
from bandpo.losses.method import METHOD_NAMES
from bandpo.losses.schedule import RadiusSchedule, rule_at_radius


def test_skyrl_names_translate_the_section_into_a_clip_method() -> None:
    """SKYRL_NAMES, SkyRL's one table (no SkyRL needed): a setting applies to the rules that have the parameter,
    ``relax=true`` is SkyRL's interval, ``rule_kwargs`` replaces, ``cap=None`` is no cap for Band and DCPO's 10,
    the trainer's ``step_delta`` moves the radius, and an error names the setting in SkyRL's spelling."""
    assert all(k.startswith("trainer.algorithm.") for k in bskyrl.SKYRL_NAMES if k != "total_training_steps")
    assert set(bskyrl.SKYRL_NAMES.values()) - set(METHOD_NAMES) <= {
        "divergence", "delta", "cap", "relax", "method", "eps_low", "eps_high"
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
    kwargs = SimpleNamespace(bandpo={"rule_kwargs": {"clip_divergence_low": 0.02, "clip_ratio_c": 5.0}})
    assert bskyrl.clip_rule_for("dppo_kl", kwargs) == make_clip_rule(
        "dppo_kl", clip_divergence_low=0.02, clip_ratio_c=5.0
    )
    step = SimpleNamespace(bandpo={**alg.bandpo, "relax": False, "step_delta": 0.05})
    assert bskyrl.clip_rule_for("band", step) == rule_at_radius(
        make_clip_rule("band", delta=0.1, cap=None), 0.05
    )
    with pytest.raises(ValueError, match=r"^invalid trainer\.algorithm\.bandpo config \(clip rule 'band'\): "
                       r"trainer\.algorithm\.bandpo\.delta_end must be a finite number > 0, got -1"):  # fmt: skip
        bskyrl.clip_method_for("band", SimpleNamespace(bandpo={"delta_schedule": "cosine", "delta_end": -1}))
