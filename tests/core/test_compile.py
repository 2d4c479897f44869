"""``torch.compile(fullgraph=True)`` of the bound solvers and of the policy loss on the CPU: they compile
without a graph break (fixed iteration counts, no host sync, no data-dependent Python control flow) and
match eager. Compiling takes seconds to a minute per solver, hence ``slow``.

Not compiled here: the generic bisection (correct under compile, but inductor needs minutes for its
unrolled loop); CUDA graphs are in ``tests/gpu``."""

from __future__ import annotations

import pytest
import torch

import bandpo

pytestmark = pytest.mark.slow

SOLVERS = [
    ("kl", "table"),
    ("kl", "newton"),
    ("reverse_kl", "newton"),
    ("js", "newton"),
    ("tv", "closed_form"),
    ("chi2", "closed_form"),
    ("neyman_chi2", "closed_form"),
    ("hellinger", "closed_form"),
]


def _logp() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return -torch.exp(torch.rand(4, 257, generator=g) * 14 - 11)  # p from 2e-9 (tails) to 1 - 2e-5


@pytest.mark.parametrize(("name", "method"), SOLVERS)
def test_band_bounds_compile_fullgraph_and_match_eager(name: str, method: str) -> None:
    """Compiled bounds equal eager ones up to float32 reordering (inductor fuses and may use FMA; the Newton
    iterations amplify that to ~20 ulp: measured 2.5e-6 relative for reverse KL, so rtol 1e-5), and stay within
    the solvers' accuracy (relative 1e-4, see test_bounds) of the float64 result."""
    torch._dynamo.reset()
    lp = _logp()

    def bounds(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return bandpo.band_bounds(x, 0.05, name, method=method, check_values=False)

    lo, hi = bounds(lp)  # eager first: builds the KL table outside the trace, as a warm-up call would
    lo_c, hi_c = torch.compile(bounds, fullgraph=True)(lp)
    torch.testing.assert_close(lo_c, lo, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(hi_c, hi, rtol=1e-5, atol=1e-7)
    lo64, hi64 = bandpo.band_bounds(lp.double(), 0.05, name, method=method)
    torch.testing.assert_close(lo_c.double(), lo64, rtol=1e-4, atol=2e-7)
    torch.testing.assert_close(hi_c.double(), hi64, rtol=1e-4, atol=2e-7)


@pytest.mark.parametrize("rule", ["band", "grpo", "dcpo"])
def test_policy_loss_compiles_fullgraph_and_matches_eager(rule: str) -> None:
    """Loss and gradient of the compiled objective equal eager (band: the KL table path). The rule is built
    outside the compiled function (as the adapters do): building one validates Python values."""
    torch._dynamo.reset()
    clip_rule = bandpo.make_clip_rule(rule)
    g = torch.Generator().manual_seed(1)
    old = -torch.rand(6, 9, generator=g) * 3
    new = (old + 0.3 * torch.randn(6, 9, generator=g)).clamp(max=0.0)
    adv = torch.randn(6, generator=g)
    mask = torch.ones(6, 9)
    mask[:, 7:] = 0

    def loss_fn(lp: torch.Tensor) -> torch.Tensor:
        return bandpo.policy_loss(lp, old, adv, mask, clip_rule, check_values=False)[0]

    x = new.clone().requires_grad_(True)
    loss = loss_fn(x)
    (grad,) = torch.autograd.grad(loss, x)
    xc = new.clone().requires_grad_(True)
    loss_c = torch.compile(loss_fn, fullgraph=True)(xc)
    (grad_c,) = torch.autograd.grad(loss_c, xc)
    torch.testing.assert_close(loss_c, loss, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(grad_c, grad, rtol=1e-6, atol=1e-7)
