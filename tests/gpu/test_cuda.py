"""CUDA checks (``-m gpu``; skipped without a CUDA device): the solvers and the policy loss inside a captured
CUDA graph, equal to eager; CUDA bounds equal to the CPU's; bf16 losses on CUDA equal to float32.
``make gpu-check`` runs these and ``benchmarks/bench.py`` in one command and writes JSON."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import bandpo

pytestmark = pytest.mark.gpu

SOLVERS = [("kl", "table"), ("kl", "newton"), ("reverse_kl", "newton"), ("tv", "closed_form")]


def _logp(device: str, shape: tuple[int, ...] = (64, 1024), seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (-torch.exp(torch.rand(shape, generator=g) * 14 - 11)).to(device)


def _capture(fn: Callable[..., Any], *static_inputs: torch.Tensor) -> tuple[torch.cuda.CUDAGraph, Any]:
    """Warm up ``fn`` on a side stream (tables are copied on first use), then capture it in a CUDA graph."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn(*static_inputs)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(*static_inputs)
    return graph, out


@pytest.mark.parametrize(("name", "method"), SOLVERS)
def test_band_bounds_replay_in_a_cuda_graph(name: str, method: str) -> None:
    """Captured once, replayed on new data: the graph's bounds equal an eager call on that data."""
    static = _logp("cuda")
    graph, (lo, hi) = _capture(
        lambda x: bandpo.band_bounds(x, 0.05, name, method=method, check_values=False), static
    )
    fresh = _logp("cuda", seed=1)
    static.copy_(fresh)
    graph.replay()
    want_lo, want_hi = bandpo.band_bounds(fresh, 0.05, name, method=method)
    assert torch.equal(lo, want_lo) and torch.equal(hi, want_hi)


@pytest.mark.parametrize(("name", "method"), SOLVERS)
def test_cuda_bounds_match_the_cpu(name: str, method: str) -> None:
    """Other vectorised code, same maths: CUDA and CPU agree to float32 rounding (relative 1e-5)."""
    lp = _logp("cpu")
    lo, hi = bandpo.band_bounds(lp, 0.05, name, method=method)
    lo_c, hi_c = bandpo.band_bounds(lp.cuda(), 0.05, name, method=method)
    torch.testing.assert_close(lo_c.cpu(), lo, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(hi_c.cpu(), hi, rtol=1e-5, atol=1e-7)


def test_policy_loss_replays_in_a_cuda_graph() -> None:
    g = torch.Generator().manual_seed(2)
    old = (-torch.rand(16, 128, generator=g) * 3).cuda()
    new = (old + 0.2 * torch.randn(16, 128, generator=g).cuda()).clamp(max=0.0)
    adv = torch.randn(16, generator=g).cuda()
    mask = torch.ones(16, 128, device="cuda")
    rule = bandpo.make_clip_rule("band")
    graph, loss = _capture(
        lambda lp: bandpo.policy_loss(lp, old, adv, mask, rule, check_values=False)[0], new
    )
    fresh = (old + 0.3 * torch.randn(16, 128, generator=g).cuda()).clamp(max=0.0)
    new.copy_(fresh)
    graph.replay()
    want = bandpo.policy_loss(fresh, old, adv, mask, rule)[0]
    torch.testing.assert_close(loss, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_loss_on_cuda_equals_float32(dtype: torch.dtype) -> None:
    """The objective computes in float32 whatever the input dtype: bf16/fp16 log-probs (exactly
    representable values) give the float32 loss to float32 precision."""
    g = torch.Generator().manual_seed(3)
    old = (-torch.rand(8, 64, generator=g) * 3).to(dtype).cuda()
    new = (old.float() + 0.2 * torch.randn(8, 64, generator=g).cuda()).clamp(max=0.0).to(dtype)
    adv = torch.randn(8, generator=g).cuda()
    mask = torch.ones(8, 64, device="cuda")
    loss_lp = bandpo.policy_loss(new, old, adv, mask, "band")[0]
    loss_32 = bandpo.policy_loss(new.float(), old.float(), adv, mask, "band")[0]
    assert loss_lp.dtype == torch.float32
    torch.testing.assert_close(loss_lp, loss_32, rtol=1e-6, atol=1e-7)
