"""The mechanism on a real model's own tokens: do the clip rules' bounds bind, and where, for *this* model?

:func:`run_probe` samples batches from a causal LM and, from each, takes ``K`` updates under every clip rule from
the same weights (:func:`probe_batch`); what it measures: docs/smollm2.md, "The mechanism on the model's own
tokens". The summary, the tables and the figure: :mod:`bandpo_lab.experiments.llm_probe_report`.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from bandpo.losses import CLIP_RULES, group_advantages, make_clip_rule, policy_loss
from bandpo.losses.diagnostics import FIXED_INTERVAL
from bandpo.validation import check_int_in, check_positive_number
from bandpo_lab.experiments.llm_probe_report import BIN_NAMES, P_OLD_BINS, pool, summarize_probe
from bandpo_lab.runtime import FLOAT32, Precision, check_precision, precision_for
from bandpo_lab.runtime.seeds import SEED_MAX, check_seed

DEFAULT_RULES = ("grpo", "band", "band_upper", "band_lower")
"""The rules ``bandpo probe`` compares unless told others: GRPO, Band and Band's two sides alone, which
:func:`attribution` needs (why not ``dppo_kl``: docs/smollm2.md)."""


@dataclass(frozen=True)
class ProbeConfig:
    """What the probe samples and how it updates: ``bandpo probe``'s flags (``updates`` is ``K``; batch ``b`` has
    seed ``seed + b``; update ``k`` from 0 takes mini-batch ``k mod minibatches`` of a seeded split of the batch's
    completions); every rule at its registered defaults."""

    rules: tuple[str, ...] = DEFAULT_RULES
    batches: int = 3
    prompts: int = 4
    group_size: int = 8
    max_new_tokens: int = 16
    temperature: float = 1.0
    updates: int = 3
    minibatches: int = 1
    learning_rate: float = 1e-5
    seed: int = 0
    split: str = "train"
    precision: str = "auto"

    def __post_init__(self) -> None:
        check_int_in("batches", self.batches, 1)
        check_int_in("prompts", self.prompts, 1)
        check_int_in("group_size", self.group_size, 2)
        check_int_in("max_new_tokens", self.max_new_tokens, 1)
        check_int_in("updates", self.updates, 2)
        check_int_in("minibatches", self.minibatches, 1)
        if self.minibatches > self.prompts * self.group_size:
            raise ValueError(
                f"minibatches must be at most the batch's {self.prompts * self.group_size} completions (prompts x "
                f"group_size), got {self.minibatches}"
            )
        # numpy's range, as training's seed; batch b is seeded seed + b
        check_seed("seed", self.seed)
        if self.seed + self.batches - 1 > SEED_MAX:
            raise ValueError(
                f"seed must be at most {SEED_MAX - self.batches + 1} with batches {self.batches} (batch b is seeded "
                f"seed + b, in numpy's seed range [0, {SEED_MAX}]), got {self.seed}"
            )
        check_positive_number("temperature", self.temperature)
        check_positive_number("learning_rate", self.learning_rate)
        object.__setattr__(self, "precision", check_precision(self.precision))  # bfloat16 recorded as bf16
        if not self.rules:
            raise ValueError("rules must name at least one clip rule")
        for rule in self.rules:
            make_clip_rule(rule)  # an unknown name raises, listing the valid ones
        if len({CLIP_RULES.canonical(r) for r in self.rules}) < len(self.rules):  # results are keyed by rule
            raise ValueError(f"rules must name each clip rule once, got {', '.join(self.rules)}")


# ------------------------------------------------------------------------------------------------ one batch
def _sequences(
    prompt_ids: Sequence[list[int]], completion_ids: Sequence[list[int]], pad_id: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Right-padded ``input_ids`` (N, L), ``attention_mask`` (N, L) and the response mask (N, L - 1) over the
    positions that predict a completion token (position ``t`` predicts token ``t + 1``)."""
    n = len(prompt_ids)
    length = max(len(p) + len(c) for p, c in zip(prompt_ids, completion_ids))
    ids = torch.full((n, length), pad_id, dtype=torch.long)
    attn = torch.zeros((n, length), dtype=torch.long)
    resp = torch.zeros((n, length - 1), dtype=torch.bool)
    for i, (p, c) in enumerate(zip(prompt_ids, completion_ids)):
        ids[i, : len(p) + len(c)] = torch.tensor([*p, *c])
        attn[i, : len(p) + len(c)] = 1
        resp[i, len(p) - 1 : len(p) + len(c) - 1] = True
    return ids, attn, resp


def _log_probs(
    model: Any, ids: Tensor, attn: Tensor, resp: Tensor, full: bool = False
) -> tuple[Tensor, Tensor | None]:
    """Log-probabilities of the next tokens (N, L - 1) float32, 0 outside ``resp``, and, with ``full``, the whole
    log-softmax at the ``resp`` positions (M, V) float32. The LM head projects only the ``resp`` positions (the
    decoder runs on every position), in float32."""
    decoder = getattr(model, "base_model", None)
    head = model.get_output_embeddings()
    if decoder is None or decoder is model or head is None:  # no separate head: full logits
        logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1][resp].float()  # (M, V)
    else:
        hidden = decoder(input_ids=ids, attention_mask=attn).last_hidden_state[:, :-1]  # (N, L-1, H)
        logits = head(hidden[resp]).float()  # (M, V)
    logp_all = torch.log_softmax(logits, dim=-1)  # (M, V)
    picked = logp_all.gather(-1, ids[:, 1:][resp][:, None]).squeeze(-1)  # (M,)
    logp = torch.zeros(resp.shape, dtype=picked.dtype).masked_scatter(resp, picked)  # (N, L-1)
    return logp, (logp_all if full else None)


def probe_batch(
    model: Any,
    ids: Tensor,
    attn: Tensor,
    resp: Tensor,
    advantages: Tensor,
    config: ProbeConfig,
    progress: Callable[[], None] | None = None,
    precision: Precision = FLOAT32,
    share_first_update: bool = True,
) -> dict[str, Any]:
    """Every rule's ``K`` updates from the same weights on one batch; returns the batch's and each rule's numbers.

    Args:
        model: a causal LM in float32; its weights are restored after each rule.
        ids, attn: (N, L) long input ids and attention mask (prompt + completion, right-padded).
        resp: (N, L - 1) bool, positions that predict completion tokens.
        advantages: (N,) float group advantages.
        progress: called after every update run (``1 + len(rules) * (K - 1)`` with ``share_first_update``).
        precision: the resolved precision (:mod:`bandpo_lab.runtime`): the forwards of the log-probs in float32, the
            backward pass in bf16 for ``bf16``.
        share_first_update: run update 1, identical for every rule, once (``False``: once per rule).
    """
    initial = copy.deepcopy(model.state_dict())
    model.eval()  # no dropout: the only difference between rules is the rule
    with torch.no_grad(), precision.exact():
        old_logp, old_all_r = _log_probs(model, ids, attn, resp, full=True)
    assert old_all_r is not None  # (M, V): the old distribution at the response positions
    m = resp
    p_old = old_logp[m].exp()  # (M,)
    adv_tok = advantages[:, None].expand_as(m)[m]  # (M,)
    entropy_old = -(old_all_r.exp() * old_all_r).sum(-1)  # (M,)
    out: dict[str, Any] = {
        "n_tokens": int(m.sum()),
        "n_sequences": int(ids.shape[0]),
        "share_signal": float((advantages != 0).float().mean()),
        "p_old_below_0.2": float((p_old < 0.2).float().mean()),
        "p_old_below_0.01": float((p_old < 0.01).float().mean()),
        "p_old_below_1e-3": float((p_old < 1e-3).float().mean()),
        "pos_adv_p_old_below_0.2": _share(p_old[adv_tok > 0] < 0.2),
        "pos_adv_p_old_below_0.01": _share(p_old[adv_tok > 0] < 0.01),
        "entropy_old": float(entropy_old.mean()),
        "p_old_values": [float(f"{float(v):.4g}") for v in p_old],  # 4 significant digits: the tail stays
        "rules": {},
    }
    bins = torch.bucketize(p_old, torch.tensor(P_OLD_BINS[1:-1], dtype=p_old.dtype), right=True)
    bins_at = torch.zeros(m.shape, dtype=torch.long).masked_scatter(m, bins)  # (N, L - 1): position's bin
    chunks = _minibatches(ids.shape[0], config.minibatches, config.seed)

    def update(rule: Any, optimizer: Any, k: int) -> dict[str, Any]:
        rows = chunks[k % len(chunks)]  # (n,) long: the mini-batch's sequences
        m_k = m[rows]
        with precision.backward():
            with precision.exact():
                logp, _ = _log_probs(model, ids[rows], attn[rows], resp[rows])
            logp.retain_grad()
            loss, _ = policy_loss(
                logp, old_logp[rows], advantages[rows], m_k.float(), clip_rule=rule, check_values=False
            )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        grad = logp.grad[m_k]  # (M_k,)
        ratio = (logp.detach()[m_k] - old_logp[rows][m_k]).exp()
        if progress is not None:
            progress()
        adv_k = advantages[rows][:, None].expand_as(m_k)[m_k]
        return _clip_counts(grad, adv_k, bins_at[rows][m_k], ratio, k)

    # Update 1 is the same for every rule (ratio exactly 1 lies inside every rule's bounds, and DPPO's weight
    # min(r, c) is 1): with share_first_update it runs once and every rule continues from its weights and
    # optimizer state (copied: AdamW updates its state in place).
    first: tuple[dict[str, Any], dict[str, Any], dict[str, Any]] | None = None
    for name in config.rules:
        rule = make_clip_rule(name)
        optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=0.0)
        if first is None or not share_first_update:
            model.load_state_dict(initial)
            per_update = [update(rule, optimizer, 0)]
            first = (copy.deepcopy(model.state_dict()), copy.deepcopy(optimizer.state_dict()), per_update[0])
        else:
            model.load_state_dict(first[0])
            optimizer.load_state_dict(copy.deepcopy(first[1]))
            per_update = [copy.deepcopy(first[2])]
        for k in range(1, config.updates):
            per_update.append(update(rule, optimizer, k))
        with torch.no_grad(), precision.exact():
            new_logp, new_all_r = _log_probs(model, ids, attn, resp, full=True)
        assert new_all_r is not None
        p_new = new_logp[m].exp()
        kl = (old_all_r.exp() * (old_all_r - new_all_r)).sum(-1)  # (M,) exact KL(old || new) over the vocab
        gained = p_new - p_old
        low = (adv_tok > 0) & (p_old < 0.2)
        rare = (adv_tok > 0) & (p_old < 0.01)
        later = [u for u in per_update if u["update"] >= 2]
        result = pool(later)
        result.update(
            {
                "gain_pos_adv_p_below_0.2": float(gained[low].mean()) if low.any() else None,
                "gain_pos_adv_p_below_0.01": float(gained[rare].mean()) if rare.any() else None,
                "n_pos_adv_p_below_0.2": int(low.sum()),
                "entropy_after": float(-(new_all_r.exp() * new_all_r).sum(-1).mean()),
                "kl_after": float(kl.mean()),
                "per_update": per_update,
            }
        )
        out["rules"][name] = result
    model.load_state_dict(initial)
    return out


def _minibatches(n: int, parts: int, seed: int) -> list[Tensor]:
    """The rows of each mini-batch: ``[arange(n)]`` for one part (the batch in its order), else a permutation of
    ``0..n-1`` seeded by ``seed`` split into ``parts`` nearly equal parts (long tensors)."""
    if parts == 1:
        return [torch.arange(n)]
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return list(torch.tensor_split(order, parts))


def _share(mask: Tensor) -> float | None:
    return float(mask.float().mean()) if mask.numel() else None


def _clip_counts(grad: Tensor, adv: Tensor, bins: Tensor, ratio: Tensor, k: int) -> dict[str, Any]:
    """Counts for one update: tokens with a non-zero advantage whose log-prob gradient is exactly 0 (clipped),
    by the advantage's sign and by ``p_old`` bin (``bins``: (M,) long); the tokens with a gradient where GRPO's
    fixed interval would clip them, per side (:data:`bandpo.losses.diagnostics.FIXED_INTERVAL`: ``A > 0`` and
    ``r > 1 + 0.2``, ``A < 0`` and ``r < 1 - 0.2``), by bin, and their gradient mass ``sum |grad|``."""
    live = adv != 0
    clipped = live & (grad == 0)
    n_bins = len(BIN_NAMES)
    e_lo, e_hi = FIXED_INTERVAL
    flowing = live & (grad != 0)
    through = {
        "up": flowing & (adv > 0) & (ratio > 1.0 + e_hi),
        "down": flowing & (adv < 0) & (ratio < 1.0 - e_lo),
    }
    mass = grad.abs().double()
    sides: dict[str, Any] = {"grad_mass": float(mass.sum())}
    for side, sel in through.items():
        sides[f"n_{side}_through"] = int(sel.sum())
        sides[f"{side}_through_by_bin"] = torch.bincount(bins[sel], minlength=n_bins).tolist()
        sides[f"grad_mass_{side}_through"] = float(mass[sel].sum())
    return {
        **sides,
        "update": k + 1,
        "n_live": int(live.sum()),
        "n_clipped": int(clipped.sum()),
        "n_up": int((clipped & (adv > 0)).sum()),
        "n_down": int((clipped & (adv < 0)).sum()),
        "live_by_bin": torch.bincount(bins[live], minlength=n_bins).tolist(),
        "clipped_by_bin": torch.bincount(bins[clipped], minlength=n_bins).tolist(),
        "ratio_max": float(ratio.max()) if ratio.numel() else 1.0,
        "ratio_min": float(ratio.min()) if ratio.numel() else 1.0,
    }


# ------------------------------------------------------------------------------------------------- the run
def run_probe(
    model: Any,
    tokenizer: Any,
    problems: Sequence[Mapping[str, Any]],
    prompts: Sequence[str],
    score: Callable[[int, str], float],
    config: ProbeConfig,
    progress: bool = True,
) -> dict[str, Any]:
    """Sample ``config.batches`` batches and probe each (:func:`probe_batch`); returns per-batch results, the
    summary and the wall time.

    Args:
        model, tokenizer: a causal LM (float32) and its tokenizer (with a pad or eos token).
        problems: the task's problems (for ``score``); prompts: their formatted prompt texts, aligned.
        score: ``score(problem_index, completion) -> reward``.
    """
    from tqdm.auto import tqdm

    from bandpo_lab.eval.sampling import generate_samples

    start = time.perf_counter()
    precision = precision_for(config.precision, model)
    n_steps = config.batches * (1 + len(config.rules) * (config.updates - 1))  # update 1 shared by the rules
    bar = tqdm(total=n_steps, desc="probe updates", unit="update", disable=not progress)
    chat = bool(getattr(tokenizer, "chat_template", None))
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    results = []
    for b in range(config.batches):
        g = torch.Generator().manual_seed(config.seed + b)
        chosen = torch.randperm(len(problems), generator=g)[: config.prompts].tolist()
        samples = generate_samples(
            model,
            tokenizer,
            [prompts[i] for i in chosen],
            k=config.group_size,
            temperature=config.temperature,
            max_new_tokens=config.max_new_tokens,
            seed=config.seed + b,
            add_special_tokens=not chat,
            precision=precision,
        )
        rewards, prompt_ids, completion_ids = [], [], []
        for j, i in enumerate(chosen):
            ids = tokenizer(prompts[i], add_special_tokens=not chat)["input_ids"]
            for text, toks in zip(samples.completions[j], samples.token_ids[j]):
                rewards.append(score(i, text))
                prompt_ids.append(ids)
                completion_ids.append(toks)
        adv = group_advantages(torch.tensor(rewards, dtype=torch.float32), config.group_size)
        ids, attn, resp = _sequences(prompt_ids, completion_ids, pad_id)
        result = probe_batch(model, ids, attn, resp, adv, config, progress=bar.update, precision=precision)
        result.update({"batch": b, "seed": config.seed + b, "reward_mean": sum(rewards) / len(rewards)})
        results.append(result)
    bar.close()
    return {
        "config": dataclasses.asdict(config),
        "batches": results,
        "summary": summarize_probe(results, config.rules),
        "precision": precision.record(),
        "wall_time_s": round(time.perf_counter() - start, 1),
    }
