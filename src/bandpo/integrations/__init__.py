"""Thin adapters that plug BandPO's clip rules into RL frameworks.

Each adapter lives in its own module and imports its framework lazily, so ``import bandpo`` works without
any of them installed:

- ``bandpo.integrations.trl``: ``BandPOConfig`` / ``BandPOTrainer``, subclasses of TRL's ``GRPOConfig`` /
  ``GRPOTrainer`` that apply a clip rule's per-token bounds inside TRL's own loss (TRL 1.16.x).
- ``bandpo.integrations.verl``: the verl policy-loss plugin.
"""
