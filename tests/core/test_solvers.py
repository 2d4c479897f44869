"""Solver internals: naive references, no host synchronisation, the table cache."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

import bandpo
from bandpo.core import solvers

sys.path.insert(0, str(Path(__file__).parent))
from host_sync import record_host_reads


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> int:
    """Largest distance in units in the last place between two tensors of non-negative floats (the
    bounds): the difference of their bit patterns read as integers. 0 means bit-identical."""
    assert a.dtype == b.dtype and a.shape == b.shape
    assert bool((a >= 0).all()) and bool((b >= 0).all())
    ints = {torch.float32: torch.int32, torch.float64: torch.int64}[a.dtype]
    return int((a.view(ints).long() - b.view(ints).long()).abs().max())


def naive_kl_bisection(p: float, delta: float, upper: bool, iters: int = 200) -> float:
    """Textbook bisection on r in [1, 1/p] (upper) or [0, 1] (lower) with the KL g of docs/method.md#band-operator."""
    import math

    def g(r: float) -> float:
        c = (1 - r * p) / (1 - p)
        return -p * math.log(r) - (1 - p) * math.log(c) if r > 0 and c > 0 else math.inf

    a, b = (1.0, 1.0 / p) if upper else (0.0, 1.0)
    for _ in range(iters):
        m = 0.5 * (a + b)
        inside = g(m) <= delta
        if upper:
            a, b = (m, b) if inside else (a, m)
        else:
            a, b = (a, m) if inside else (m, b)
    return a if upper else b


@pytest.mark.parametrize("p", [0.01, 0.08, 0.3, 0.5, 0.9, 0.99])
@pytest.mark.parametrize("delta", [0.01, 0.05, 0.5])
def test_every_kl_method_matches_naive_bisection(p: float, delta: float) -> None:
    lp = torch.tensor([p], dtype=torch.float64).log()
    want = (naive_kl_bisection(p, delta, upper=False), naive_kl_bisection(p, delta, upper=True))
    for method in ("table", "newton", "bisection"):
        lo, hi = bandpo.band_bounds(lp, delta, "kl", cap=None, method=method)
        assert lo.item() == pytest.approx(want[0], rel=1e-6)
        assert hi.item() == pytest.approx(want[1], rel=1e-6)


def naive_table_lookup(table: solvers.BoundsTable, logp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The table's interpolation written plainly in float64: find the bin of x = -logp with frexp, interpolate
    linearly in x between the bin's two nodes (node 0 holds the p -> 1 limit), clamp, exp; log lo is floored at
    log(tiny) + 0.5 and mapped back to 0 as the table does."""
    m, e_min = table.bins_log2, table.E_MIN
    x = (-logp).double()
    mant, ex = torch.frexp(x)  # x = mant 2^ex, mant in [0.5, 1)
    octave = ex - 1 - e_min
    sub = torch.floor((2 * mant - 1) * 2**m)
    k = (octave * 2**m + sub).clamp(0, table.n_intervals - 1).long()

    def node_x(k: torch.Tensor) -> torch.Tensor:
        o = torch.div(k, 2**m, rounding_mode="floor")
        return torch.ldexp(1.0 + (k - o * 2**m) / 2**m, o + e_min)

    x0, x1 = node_x(k), node_x(k + 1)
    w = ((x - x0) / (x1 - x0)).clamp(0, 1)
    tiny = torch.finfo(torch.float64).tiny
    out = []
    for z in (table.z_lo.clamp(min=math.log(tiny) + 0.5), table.z_hi):  # log lo = -inf floored, as stored
        out.append(z[k] + w * (z[k + 1] - z[k]))
    lo = torch.exp(out[0].clamp(max=0))
    return torch.where(lo <= 2 * tiny, torch.zeros_like(lo), lo), torch.exp(out[1].clamp(min=0))


def test_table_lookup_matches_naive_interpolation() -> None:
    """The bit-pattern indexing (integer shifts and masks) is the plain linear interpolation in x."""
    g = torch.Generator().manual_seed(0)
    # x in [1.9e-12, 2e4]; below 2^-40 ~ 9.1e-13 the lookup reads the limit row (test_table_extremes)
    logp = -torch.exp(torch.rand(50000, generator=g, dtype=torch.float64) * 37 - 27)
    exact = lambda lp: bandpo.band_bounds(lp, 0.05, "kl", cap=None, method="newton")  # noqa: E731
    table = solvers.BoundsTable(exact, solvers.TABLE_BINS_LOG2[torch.float64])
    lo, hi = table.lookup(logp)
    ref_lo, ref_hi = naive_table_lookup(table, logp)
    finite = torch.isfinite(ref_hi)
    assert torch.allclose(lo, ref_lo, rtol=1e-12, atol=1e-300)
    assert torch.allclose(hi[finite], ref_hi[finite], rtol=1e-12)
    assert torch.equal(torch.isinf(hi), ~finite)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_table_nodes_are_exact(dtype: torch.dtype) -> None:
    """At the nodes (x = 2^e (1 + j / 2^m)) the lookup returns the exact solver's value: no interpolation."""
    exact = lambda lp: bandpo.band_bounds(lp, 0.2, "kl", cap=None, method="newton")  # noqa: E731
    m = solvers.TABLE_BINS_LOG2[dtype]
    table = solvers.BoundsTable(exact, m)
    k = torch.tensor([1, 7, 2**m + 3, 30 * 2**m + 1001, 44 * 2**m], dtype=torch.float64)
    o = torch.div(k, 2**m, rounding_mode="floor")
    x = torch.ldexp(1.0 + (k - o * 2**m) / 2**m, o + table.E_MIN)
    lo, hi = table.lookup((-x).to(dtype))
    want_lo, want_hi = exact(-x)
    tol = 1e-13 if dtype == torch.float64 else 2e-6
    assert torch.allclose(lo.double(), want_lo, rtol=tol, atol=0)
    assert torch.allclose(hi.double(), want_hi, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_table_extremes(dtype: torch.dtype) -> None:
    """p = 1 (logp = +-0) gives hi = 1 exactly and lo = the limit; p = 0 gives lo = 0 and hi = cap (inf
    without); NaN or positive input (unchecked) stays in range."""
    tiny = torch.finfo(dtype).tiny
    lp = torch.tensor([0.0, -0.0, -tiny, -1e-30, -3000.0, -float("inf"), float("nan"), 2.0], dtype=dtype)
    lo, hi = bandpo.band_bounds(lp, 0.05, "kl", method="table", check_values=False)
    assert hi[:3].tolist() == [1.0] * 3 and hi[3].item() == pytest.approx(1.0, abs=1e-6)
    assert lo[:4].tolist() == pytest.approx([math.exp(-0.05)] * 4, rel=1e-6)
    assert lo[4:6].tolist() == [0.0, 0.0] and hi[4:6].tolist() == [10.0, 10.0]
    assert bool(((lo >= 0) & (lo <= 1) & (hi >= 1) & (hi <= 10)).all())
    lo, hi = bandpo.band_bounds(lp[:6], 0.05, "kl", method="table", cap=None)
    assert hi[4:6].tolist() == [math.inf, math.inf]


def test_table_float32_accuracy() -> None:
    """float32 compute: relative error <= 1e-4 (absolute 1e-12 floor) against float64 Halley, p in [1e-30, 1)."""
    g = torch.Generator().manual_seed(3)
    logp = -torch.exp(torch.rand(100000, generator=g, dtype=torch.float64) * 73 - 69)
    for delta in (1e-3, 0.05, 1.0):
        ref_lo, ref_hi = bandpo.band_bounds(logp, delta, "kl", cap=None, method="newton")
        lo, hi = bandpo.band_bounds(logp.float(), delta, "kl", cap=None, method="table")
        ok = ref_hi < 1e38  # float32 range
        for got, ref in ((lo, ref_lo), (hi, ref_hi)):
            err = (got.double() - ref).abs() / (ref.abs() + 1e-8)
            assert err[ok].max().item() <= 1e-4


def test_table_is_cached_per_resolution() -> None:
    solvers.clear_table_cache()
    lp = -torch.rand(100)
    bandpo.band_bounds(lp, 0.0731, "kl")
    bandpo.band_bounds(lp * 2, 0.0731, "kl")
    assert len(solvers._TABLE_CACHE) == 1
    bandpo.band_bounds(lp.double(), 0.0731, "kl")  # float64: a finer table
    assert len(solvers._TABLE_CACHE) == 2


@pytest.mark.parametrize("method", ["table", "newton", "bisection"])
def test_no_host_sync_in_solvers(method: str) -> None:
    """With check_values=False the solvers never read a tensor value on the host (item/bool/tolist...):
    fixed iteration counts only. Checked by intercepting the Tensor methods that copy a value to the host."""
    lp = -torch.rand(64, dtype=torch.float64)
    with record_host_reads() as calls:
        delta = torch.full_like(lp, 0.05) if method != "table" else 0.05
        bandpo.band_bounds(lp, delta, "kl", method=method, check_values=False)
    assert calls == [], calls


def test_the_host_sync_spy_sees_reads_and_data_shaped_ops() -> None:
    """The spy behind the no-sync tests must see a value read and every data-shaped op (a boolean mask, nonzero,
    one-argument where), and nothing of plain elementwise code."""
    x = torch.tensor([1.0, -2.0, 3.0])
    with record_host_reads() as calls:
        torch.where(x > 0, x, torch.zeros_like(x))[1:] * 2 + x[1:]  # elementwise and a slice: no sync
    assert calls == []
    for op in (
        lambda: x[x > 0],
        lambda: x.__setitem__(x < 0, 0.0),
        lambda: torch.nonzero(x),
        lambda: torch.where(x > 0),
        lambda: x.masked_select(x > 0),
        lambda: x.max().item(),
        lambda: bool(x.any()),
    ):
        with record_host_reads() as calls:
            op()
        assert calls, op


def test_table_chunks_give_the_same_result(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU lookup runs in chunks; any chunk size (also one not dividing N) gives the same bounds to at
    most 1 ulp. Not bit-identical in general: torch's vectorised and scalar tail loops of ``exp2`` round
    differently on some CPUs (AVX-512), and a chunk boundary moves elements between the two."""
    g = torch.Generator().manual_seed(5)
    logp = -torch.exp(torch.rand(3, 1001, generator=g) * 30 - 20)
    whole = bandpo.band_bounds(logp, 0.05, "kl", method="table")
    monkeypatch.setattr(solvers.BoundsTable, "CPU_CHUNK", 97)
    chunked = bandpo.band_bounds(logp, 0.05, "kl", method="table")
    assert ulp_distance(whole[0], chunked[0]) <= 1 and ulp_distance(whole[1], chunked[1]) <= 1
    assert chunked[0].shape == logp.shape


@pytest.mark.slow  # builds two tables from user lambdas: ~16 s
def test_user_generators_never_share_a_table() -> None:
    """Tables are cached per divergence (name and generator), not per name: two lambdas, two tables, each giving
    its own divergence's bounds (KL's and chi2's differ by over 10 times the tolerance at each p here). float32 compute: its table has 8x
    fewer nodes than float64's, each solved by bisection (about 4 s a table here, against 15 s)."""
    lp = torch.tensor([0.08, 0.5, 0.9]).log()
    got = {}
    for f, name in ((lambda u: -torch.log(u), "kl"), (lambda u: (u - 1.0) ** 2, "chi2")):
        got[name] = bandpo.band_bounds(lp, 0.05, f, method="table", cap=None)
        want = bandpo.band_bounds(lp.double(), 0.05, name, cap=None)
        for g, w in zip(got[name], want):
            torch.testing.assert_close(g.double(), w, rtol=1e-4, atol=0)
    for k, c in zip(got["kl"], got["chi2"]):
        assert ((k - c).abs() > 1e-3 * c).all(), (k, c)


@pytest.mark.parametrize(
    ("name", "method"), [("kl", "newton"), ("reverse_kl", "newton"), ("tv", "closed_form")]
)
def test_solver_chunks_give_the_same_result(monkeypatch: pytest.MonkeyPatch, name: str, method: str) -> None:
    """The non-table solvers run in CPU chunks too (scalar and per-token delta): the same bounds to at most
    1 ulp (vectorised and scalar tail loops may round differently, see the table test)."""
    from bandpo.core import bounds

    g = torch.Generator().manual_seed(6)
    logp = -torch.exp(torch.rand(5, 999, generator=g) * 30 - 20)
    delta = 0.02 + 0.1 * torch.rand(999, generator=g)  # per token, broadcast over rows
    for d in (0.05, delta):
        whole = bandpo.band_bounds(logp, d, name, method=method)
        monkeypatch.setattr(bounds, "CPU_CHUNK", 128)
        chunked = bandpo.band_bounds(logp, d, name, method=method)
        monkeypatch.undo()
        assert ulp_distance(whole[0], chunked[0]) <= 1 and ulp_distance(whole[1], chunked[1]) <= 1


def test_cap_beyond_the_compute_dtype() -> None:
    """A cap above float32's range acts as its largest number instead of failing."""
    lp = torch.tensor([-float("inf"), -100.0, -1.0])
    for method in ("table", "newton"):
        _, hi = bandpo.band_bounds(lp, 0.05, "kl", cap=1e39, method=method)
        assert hi[0].item() == torch.finfo(torch.float32).max and bool(torch.isfinite(hi).all())
