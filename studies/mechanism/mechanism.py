"""The mechanism experiment: a single-state categorical policy trained with every registered clip rule.

The policy is a softmax over ``V`` logits (one "state", a vocabulary of ``V`` actions) whose initial
probabilities follow a Zipf law ``p_k ~ 1 / (k + 1) ** zipf_exponent``. Each step samples ``G`` actions from the
current policy, rewards them (the scenario's reward table), standardises the rewards within the group
(``bandpo.group_advantages``) and then takes ``K`` plain SGD steps on the logits with the *same* batch, so from
the second update on the data are stale and the ratio ``pi_new / pi_old`` leaves 1: that is where clip rules
differ. The per-sample objective is the one of ``bandpo.policy_loss`` (its per-token part,
``per_token_policy_loss``, with each registered rule's defaults); the diagnostics of ``policy_loss`` are skipped
because they cost more than the whole update here.

Everything is vectorised: one row of logits per (rule, learning rate, initial rare probability, seed). Seeds share
their random numbers across rules and cells (common random numbers): the same uniform variates draw the actions
(inverse CDF) for a given seed, so rules whose policies agree sample the same actions and differences between
rules are not sampling noise. With ``K = 1`` the ratio is exactly 1 at the only update, no bound can bind and all
rules follow the same trajectory bit for bit.

The gradient with respect to the logits is the chain rule through the log-softmax written out: for row ``n`` with
per-sample loss gradients ``g_i = dL / d log pi(a_i)``, ``dL / d theta_v = sum_i g_i (1[a_i = v] - pi_v)``
(equivalent to autograd through ``torch.log_softmax``; tested against it), so an update costs a few passes over
the logits instead of autograd's graph. Samples with the same (row, action, reward) are identical tokens and are
evaluated once with their count as a weight (``rollout_is_weights``), which is exact.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import torch
from torch import Tensor

from bandpo.losses import CLIP_RULES, ClipRule, group_advantages, make_clip_rule
from bandpo.losses.policy_loss import per_token_policy_loss
from bandpo.registry import Registry
from bandpo.validation import check_int_in, check_number_in, check_positive_number

CURVES = ("p_head", "log_p_rare", "entropy")  # recorded before every step, (..., steps + 1)
FLAGS = ("nonfinite", "p_zero", "p_one")  # one per run and seed: did it ever happen
#: Largest number of logits the sampler turns into a float64 CDF at once (memory bound for big vocabularies).
SAMPLER_CHUNK = 1 << 23


@dataclass(frozen=True)
class Scenario:
    """One experiment: the reward table, the grid of knobs and what is measured.

    Actions: the ``n_head`` most likely actions of the Zipf law ("head") pay ``head_reward`` with probability
    ``head_reward_prob`` (else 0); an optional "rare" action, the last one, starts at probability ``rare_p`` (each
    value of ``rare_probs`` is a cell) and pays ``rare_reward``; every other action pays ``other_reward``.
    ``outcome`` names the summary in ``mechanism_stats.OUTCOMES``.
    """

    name: str
    question: str
    outcome: str
    n_head: int = 1
    head_reward: float = 1.0
    head_reward_prob: float = 1.0
    rare_reward: float | None = None
    rare_probs: tuple[float, ...] = ()
    other_reward: float = 0.0
    learning_rates: tuple[float, ...] = (0.3, 3.0, 30.0)
    updates_per_batch: tuple[int, ...] = (1, 8)
    group_size: int = 64
    steps: int = 100

    def __post_init__(self) -> None:
        check_int_in("n_head", self.n_head, 1)
        check_number_in("head_reward_prob", self.head_reward_prob, 0.0, 1.0)
        if (self.rare_reward is None) != (not self.rare_probs):
            raise ValueError(f"scenario {self.name!r}: rare_reward and rare_probs must be given together")
        for p in self.rare_probs:
            check_number_in("rare_probs", p, 1e-12, 0.5)
        if not self.learning_rates or not self.updates_per_batch:
            raise ValueError(
                f"scenario {self.name!r}: learning_rates and updates_per_batch must not be empty"
            )
        for lr in self.learning_rates:
            check_positive_number("learning_rates", lr)
        for k in self.updates_per_batch:
            check_int_in("updates_per_batch", k, 1)
        check_int_in("group_size", self.group_size, 2)
        check_int_in("steps", self.steps, 1)

    @property
    def has_rare(self) -> bool:
        return self.rare_reward is not None

    @property
    def cell_rare_probs(self) -> tuple[float | None, ...]:
        """The rare-probability axis of the grid (``(None,)`` without a rare action)."""
        return self.rare_probs if self.rare_probs else (None,)


SCENARIOS: Registry[Scenario] = Registry("mechanism scenario")


def register_scenario(scenario: Scenario) -> Scenario:
    return SCENARIOS.register(scenario.name, scenario)


register_scenario(
    Scenario(
        name="rare_reward",
        question="a rare action paying 1 against the likeliest one paying 1 half the time: is it found (p >= 0.5)?",
        outcome="find",
        head_reward_prob=0.5,
        rare_reward=1.0,
        rare_probs=(1e-2, 1e-3, 1e-4),
        steps=80,
    )
)
register_scenario(
    Scenario(
        name="exploit",
        question="the 4 likeliest actions pay 1, nothing rare pays: how fast does each rule collapse entropy?",
        outcome="entropy",
        n_head=4,
        steps=50,
    )
)
register_scenario(
    Scenario(
        name="rare_penalty",
        question="a rare action costs 1, nothing pays: does a wide lower bound crash its probability to 0?",
        outcome="crash",
        head_reward=0.0,
        rare_reward=-1.0,
        rare_probs=(1e-2,),
        learning_rates=(
            0.3,
            3.0,
            30.0,
            1000.0,
        ),  # 1000: one update sends a sampled p = 0.01 below float32's range
        steps=50,
    )
)


MAX_VOCAB = 1 << 20
"""The largest simulated vocabulary (1,048,576 actions, above every real tokenizer's): the simulation holds
``seeds x vocab`` float64 logits and their CDF, so a larger one would exhaust memory rather than say anything new."""


@dataclass(frozen=True)
class MechanismConfig:
    """Run settings shared by every scenario. ``steps`` (if set) overrides each scenario's step budget."""

    seeds: int = 30
    vocab: int = 1024
    steps: int | None = None
    zipf_exponent: float = 1.0
    dtype: torch.dtype = torch.float32
    seed: int = 0

    def __post_init__(self) -> None:
        check_int_in("seeds", self.seeds, 2)
        check_int_in("vocab", self.vocab, 16, MAX_VOCAB)
        if self.steps is not None:
            check_int_in("steps", self.steps, 1)
        check_positive_number("zipf_exponent", self.zipf_exponent)
        if self.dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype must be torch.float32 or torch.float64, got {self.dtype!r}")


@dataclass
class Trajectories:
    """What one scenario produced. Curves have shape ``(n_K, R, L, P, S, steps + 1)`` (index 0: before any update);
    per-step rates ``(n_K, R, L, P, S, steps)``; flags ``(n_K, R, L, P, S)``. Axes: updates per batch, rules,
    learning rates, initial rare probabilities, seeds."""

    scenario: Scenario
    config: MechanismConfig
    rules: list[str]
    updates_per_batch: tuple[int, ...]
    learning_rates: tuple[float, ...]
    rare_probs: tuple[float | None, ...]
    curves: dict[str, Tensor] = field(default_factory=dict)  # p_head, log_p_rare, entropy
    rates: dict[str, Tensor] = field(default_factory=dict)  # clip_frac
    flags: dict[str, Tensor] = field(default_factory=dict)  # nonfinite, p_zero, p_one


def resolve_rules(names: Sequence[str] | None = None) -> dict[str, ClipRule]:
    """Registered clip rules by name with their defaults (all of ``CLIP_RULES`` when ``names`` is None)."""
    names = CLIP_RULES.names() if names is None else [CLIP_RULES.canonical(n) for n in names]
    return {name: make_clip_rule(name) for name in names}


def initial_logits(vocab: int, zipf_exponent: float, rare_p: float | None) -> Tensor:
    """(vocab,) float64 log-probabilities: Zipf over all actions; the last one reset to ``rare_p`` if given."""
    p = torch.arange(1, vocab + 1, dtype=torch.float64) ** -zipf_exponent
    if rare_p is not None:
        p[-1] = 0.0
        p = p / p.sum() * (1.0 - rare_p)
        p[-1] = rare_p
    return torch.log(p / p.sum())


def _sample(probs: Tensor, uniform: Tensor) -> Tensor:
    """Inverse-CDF sampling: (N, V) probabilities, (N, G) uniforms in [0, 1) -> (N, G) int64 actions.

    Zero-probability actions are never drawn (the first index whose CDF exceeds ``u * total``)."""
    out = torch.empty(uniform.shape, dtype=torch.int64)
    rows = max(1, SAMPLER_CHUNK // probs.shape[1])
    for start in range(0, probs.shape[0], rows):
        cdf = torch.cumsum(probs[start : start + rows], dim=-1, dtype=torch.float64)  # (n, V)
        target = uniform[start : start + rows].to(torch.float64) * cdf[:, -1:]
        out[start : start + rows] = torch.searchsorted(cdf, target, right=True)
    return out.clamp_(max=probs.shape[1] - 1)


def _softmax_parts(theta: Tensor) -> tuple[Tensor, Tensor]:
    """(N, V) logits -> probabilities and log-probabilities, both (N, V)."""
    log_probs = torch.log_softmax(theta, dim=-1)
    return torch.exp(log_probs), log_probs


class _Batch(NamedTuple):
    """One sampled batch, deduplicated: the M unique (row, action, reward) tokens, each (M,), sorted by row."""

    row: Tensor  #: int64 row of the logits
    action: Tensor  #: int64 action
    count: Tensor  #: float, how many of the row's G samples this token stands for
    adv: Tensor  #: float, group advantage
    old: Tensor  #: float, log pi_old(action)
    entropy: Tensor  #: float, entropy of pi_old in the token's row (for entropy-driven rules)


class _Simulator:
    """The vectorised training loop of one scenario at one value of updates per batch."""

    def __init__(self, scenario: Scenario, config: MechanismConfig, rules: dict[str, ClipRule]):
        self.sc, self.cfg, self.rules = scenario, config, list(rules.values())
        self.lrs, self.rare = scenario.learning_rates, scenario.cell_rare_probs
        r, l_, p, s = len(self.rules), len(self.lrs), len(self.rare), config.seeds
        self.shape = (r, l_, p, s)
        self.n = r * l_ * p * s
        self.rows_per_rule = l_ * p * s
        v, dt = config.vocab, config.dtype
        init = torch.stack([initial_logits(v, config.zipf_exponent, q) for q in self.rare])  # (P, V)
        self.init = init.to(dt)[None, None, :, None, :].expand(r, l_, p, s, v).reshape(self.n, v)
        lr = torch.tensor(self.lrs, dtype=dt)[None, :, None, None].expand(self.shape)
        self.lr = lr.reshape(self.n, 1)
        reward = torch.full((v,), scenario.other_reward, dtype=dt)
        reward[: scenario.n_head] = scenario.head_reward
        if scenario.has_rare:
            reward[-1] = scenario.rare_reward
        self.reward = reward
        self.is_head = torch.zeros(v, dtype=torch.bool)
        self.is_head[: scenario.n_head] = True

    def _rows_to_seed(self, x: Tensor) -> Tensor:
        """(S, ...) per-seed random numbers -> (N, ...) for every row (common random numbers)."""
        return x.unsqueeze(0).expand(self.n // self.cfg.seeds, *x.shape).reshape(self.n, *x.shape[1:])

    def batch(self, probs: Tensor, log_probs: Tensor, entropy: Tensor, gen: torch.Generator) -> _Batch:
        s, g, v = self.cfg.seeds, self.sc.group_size, self.cfg.vocab
        u_action = self._rows_to_seed(torch.rand(s, g, generator=gen, dtype=torch.float64))
        u_reward = self._rows_to_seed(torch.rand(s, g, generator=gen, dtype=torch.float64))
        action = _sample(probs, u_action)  # (N, G)
        paid = (u_reward < self.sc.head_reward_prob) | ~self.is_head[action]  # head pays with its probability
        reward = torch.where(paid, self.reward[action], torch.zeros((), dtype=self.reward.dtype))
        adv = group_advantages(reward.reshape(-1), g).reshape(self.n, g)
        row = torch.arange(self.n).unsqueeze(1).expand(self.n, g)
        # identical tokens share a key; sorted keys keep the rows in order
        key = (row * v + action) * 2 + paid.long()
        uniq, inverse, count = torch.unique(key.reshape(-1), return_inverse=True, return_counts=True)
        first = torch.empty(uniq.shape, dtype=torch.int64).scatter_(0, inverse, torch.arange(inverse.numel()))
        row_u, action_u = uniq // (2 * v), (uniq // 2) % v
        old = log_probs[row_u, action_u]
        return _Batch(row_u, action_u, count.to(probs.dtype), adv.reshape(-1)[first], old, entropy[row_u])

    def update(self, theta: Tensor, probs: Tensor, log_probs: Tensor, b: _Batch, clip_count: Tensor) -> None:
        """One SGD step on every row, in place; adds each row's count of clipped samples to ``clip_count``."""
        logp = log_probs[b.row, b.action].requires_grad_()
        bounds = torch.searchsorted(b.row, torch.arange(len(self.rules) + 1) * self.rows_per_rule)
        total = torch.zeros((), dtype=theta.dtype)
        clipped = []
        for i, rule in enumerate(self.rules):
            sl = slice(int(bounds[i]), int(bounds[i + 1]))
            extra = {"entropy": b.entropy[sl, None]} if rule.needs_entropy else {}
            terms = per_token_policy_loss(
                logp[sl, None], b.old[sl, None], b.adv[sl, None], torch.ones_like(b.old[sl, None], dtype=torch.bool),
                rule, rollout_is_weights=b.count[sl, None], **extra,
            )  # fmt: skip
            total = total + terms.loss.sum()
            a, r = terms.advantages[:, 0], terms.ratio[:, 0]
            clipped.append(((a > 0) & (r > terms.hi[:, 0])) | ((a < 0) & (r < terms.lo[:, 0])))
        (grad,) = torch.autograd.grad(total / self.sc.group_size, logp)  # (M,) dL/dlog pi per unique token
        grad = grad.to(theta.dtype)
        clip_count.index_add_(0, b.row, torch.cat(clipped).to(theta.dtype) * b.count)
        grad_sum = torch.zeros(self.n, dtype=theta.dtype).index_add_(0, b.row, grad)
        theta.addcmul_(probs, self.lr * grad_sum[:, None])  # - lr * (-sum_i g_i) pi
        theta.index_put_((b.row, b.action), -self.lr[b.row, 0] * grad, accumulate=True)

    def run(self, updates: int, on_step: Callable[[int], None] | None = None) -> dict[str, Tensor]:
        steps = self.cfg.steps or self.sc.steps
        gen = torch.Generator().manual_seed(self.cfg.seed)
        theta = self.init.clone()
        curve = {k: torch.empty(self.n, steps + 1, dtype=torch.float64) for k in CURVES}
        clip_frac = torch.empty(self.n, steps, dtype=torch.float64)
        flags = {k: torch.zeros(self.n, dtype=torch.bool) for k in FLAGS}
        for t in range(steps + 1):
            probs, log_probs = _softmax_parts(theta)
            entropy = -(probs * log_probs).sum(dim=-1)  # (N,)
            curve["p_head"][:, t] = probs[:, : self.sc.n_head].sum(dim=-1)
            curve["entropy"][:, t] = entropy
            curve["log_p_rare"][:, t] = log_probs[:, -1]
            flags["nonfinite"] |= ~torch.isfinite(theta.sum(dim=-1))  # NaN and inf propagate through the sum
            flags["p_zero"] |= probs.amin(dim=-1) == 0
            flags["p_one"] |= probs.amax(dim=-1) == 1
            if t == steps:
                break
            b = self.batch(probs, log_probs, entropy, gen)
            clip_count = torch.zeros(self.n, dtype=theta.dtype)
            for k in range(updates):
                if k:
                    probs, log_probs = _softmax_parts(theta)
                self.update(theta, probs, log_probs, b, clip_count)
            clip_frac[:, t] = clip_count.to(torch.float64) / (updates * self.sc.group_size)
            if on_step is not None:
                on_step(updates)
        out = {k: v.reshape(*self.shape, steps + 1) for k, v in curve.items()}
        out["clip_frac"] = clip_frac.reshape(*self.shape, steps)
        out.update({k: v.reshape(self.shape) for k, v in flags.items()})
        return out


def run_scenario(
    scenario: Scenario,
    config: MechanismConfig,
    rules: dict[str, ClipRule],
    on_step: Callable[[int], None] | None = None,
) -> Trajectories:
    """Train every rule in every cell of ``scenario`` for ``config.seeds`` seeds; ``on_step(updates)`` after
    each sampled batch (for progress bars)."""
    if not rules:
        raise ValueError("rules must name at least one clip rule")
    sim = _Simulator(scenario, config, rules)
    runs = [sim.run(k, on_step) for k in scenario.updates_per_batch]
    stacked = {key: torch.stack([r[key] for r in runs]) for key in runs[0]}
    return Trajectories(
        scenario=scenario,
        config=config,
        rules=list(rules),
        updates_per_batch=scenario.updates_per_batch,
        learning_rates=scenario.learning_rates,
        rare_probs=scenario.cell_rare_probs,
        curves={k: stacked[k] for k in CURVES},
        rates={"clip_frac": stacked["clip_frac"]},
        flags={k: stacked[k] for k in FLAGS},
    )


def total_updates(scenarios: Sequence[Scenario], config: MechanismConfig) -> int:
    """The number of SGD updates a run performs (each over every rule, cell and seed): the progress total."""
    return sum((config.steps or s.steps) * sum(s.updates_per_batch) for s in scenarios)


def quick(scenario: Scenario) -> Scenario:
    """A test-sized version of ``scenario``: two learning rates, one and four updates, 12 steps, groups of 16."""
    return replace(
        scenario,
        learning_rates=(scenario.learning_rates[0], scenario.learning_rates[-1]),
        updates_per_batch=(1, 4),
        rare_probs=scenario.rare_probs[:1],
        steps=12,
        group_size=16,
    )
