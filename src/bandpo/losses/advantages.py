"""GRPO's group advantages: each completion's reward centred (and scaled) within its group of ``G``."""

from __future__ import annotations

import torch
from torch import Tensor

from bandpo.core.checks import check_float_tensor
from bandpo.validation import check_bool, check_int_in, check_positive_number


def group_advantages(
    rewards: Tensor,
    group_size: int,
    normalize_std: bool = True,
    eps: float = 1e-6,
    *,
    check_values: bool = True,
) -> Tensor:
    """GRPO advantages: ``(r - mean_group) / (std_group + eps)``.

    Args:
        rewards: (B,) float, integer or bool (cast to float32), with B = n_groups * G and each group's G
            completions contiguous; finite (one NaN or inf made its whole group NaN).
        group_size: G >= 1.
        normalize_std: divide by the group's (unbiased) standard deviation (Dr. GRPO: False).
        eps: added to the std.
        check_values: refuse a NaN or infinite reward (one device->host sync); ``False`` skips it.

    Returns:
        (B,) float advantages (float32 for integer or bool rewards, else the rewards' dtype). A group whose mean
        or deviation overflows that dtype (float32: rewards near 3.4e38 / G) is computed in float64, so any finite
        float32 rewards give finite advantages (but on MPS, which has no float64; and without ``normalize_std`` an
        ``r - mean`` beyond the dtype's range is inf). Groups whose rewards are all equal get exactly 0 (no signal,
        no 1/eps blow-up); G = 1 gives 0.

    Raises:
        TypeError: ``rewards`` not a tensor of a float, integer or bool dtype.
        ValueError: a bad shape, ``group_size`` or ``eps``; with ``check_values``, a non-finite reward, naming the
            first (index and value) and how many.
    """
    if isinstance(rewards, Tensor) and not rewards.dtype.is_floating_point and not rewards.dtype.is_complex:
        rewards = rewards.to(torch.float32)  # integer or bool rewards (a verifier's 0/1)
    check_float_tensor("rewards", rewards)
    check_positive_number("eps", eps, allow_zero=True)
    check_bool("normalize_std", normalize_std)
    check_bool("check_values", check_values)
    if rewards.dim() != 1:
        raise ValueError(f"rewards must have shape (B,), got {tuple(rewards.shape)}")
    group_size = check_int_in("group_size", group_size, 1)
    if rewards.numel() % group_size:
        raise ValueError(
            f"group_size must divide the number of rewards {rewards.numel()} (B = groups x G), got {group_size!r}"
        )
    if check_values:
        bad = ~torch.isfinite(rewards)
        n = int(bad.sum())
        if n:
            first = int(bad.nonzero()[0, 0])
            raise ValueError(
                f"rewards must hold finite numbers (a NaN or inf makes its whole group's advantages NaN); found "
                f"{n} other value(s), the first rewards[{first}] = {rewards[first].item()!r}"
            )
    g = rewards.view(-1, group_size)  # (n_groups, G)
    constant = (g == g[:, :1]).all(dim=1, keepdim=True)  # (n_groups, 1)

    def advantages_in(dtype: torch.dtype) -> Tensor:  # (n_groups, G) in the rewards' dtype
        x = g.to(dtype)
        centred = x - x.mean(dim=1, keepdim=True)
        if normalize_std and group_size > 1:
            centred = centred / (x.std(dim=1, keepdim=True) + eps)
        return centred.to(rewards.dtype)

    out = advantages_in(rewards.dtype)
    # A group whose sum overflows the rewards' dtype (float32: |r| near 3.4e38 / G) has a NaN mean: redone in
    # float64 (none on MPS), only there, so the others keep their bits (results computed before stay as they were)
    if rewards.dtype != torch.float64 and rewards.device.type != "mps":
        out = torch.where(torch.isfinite(out), out, advantages_in(torch.float64))
    return torch.where(constant, torch.zeros_like(out), out).view(-1)
