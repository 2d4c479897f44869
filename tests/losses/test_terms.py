"""``bandpo.losses.terms.framework_metrics``, what the verl and SkyRL losses return: over a batch with no real token
the extremes are 0 for a framework that averages (verl) and +inf / -inf for one that reduces them by min / max
(SkyRL), so that an empty micro-batch cannot replace the others' extremes; over real tokens both give the same
values, those of ``clip_metrics``."""

from __future__ import annotations

import math

import pytest
import torch

from bandpo.losses import make_clip_rule
from bandpo.losses.policy_loss import per_token_policy_loss
from bandpo.losses.terms import framework_metrics

NAMES = {"clip_ratio": "clip/frac"}


def _terms(mask: torch.Tensor) -> object:
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(3, 5, generator=g, dtype=torch.float64) * 4.0
    logp = torch.clamp(old + torch.randn(3, 5, generator=g, dtype=torch.float64) * 0.5, max=-1e-4)
    adv = torch.tensor([1.0, -0.5, 2.0], dtype=torch.float64)
    return per_token_policy_loss(logp, old, adv, mask, make_clip_rule("band"))


@pytest.mark.parametrize("level", ["full", "basic", "none"])
def test_extremes_of_an_empty_batch_are_the_neutral_elements_where_the_framework_takes_min_and_max(
    level: str,
) -> None:
    rule = make_clip_rule("band")
    empty = _terms(torch.zeros(3, 5, dtype=torch.bool))
    averaged = framework_metrics(empty, NAMES, level, rule)
    reduced = framework_metrics(empty, NAMES, level, rule, extremes_reduced=True)
    assert averaged.keys() == reduced.keys()
    extremes = [k for k in reduced if k.endswith(("_min", "_max"))]
    assert bool(extremes) == (level == "full")  # band/{lo,hi}_{min,max}, policy/ratio_{min,max}
    for key in extremes:
        assert averaged[key] == 0.0
        assert reduced[key] == (math.inf if key.endswith("_min") else -math.inf)
    assert {k: v for k, v in reduced.items() if k not in extremes} == {
        k: v for k, v in averaged.items() if k not in extremes
    }
    real = _terms(torch.tensor([[1, 1, 0, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]], dtype=torch.bool))
    assert framework_metrics(real, NAMES, level, rule, extremes_reduced=True) == framework_metrics(
        real, NAMES, level, rule
    )
    if level == "full":
        got = framework_metrics(real, NAMES, level, rule, extremes_reduced=True)
        assert 0.0 < got["band/lo_min"] <= got["band/lo_max"] < 1.0 < got["band/hi_min"] <= got["band/hi_max"]
