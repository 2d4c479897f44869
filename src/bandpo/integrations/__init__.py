"""Thin adapters that plug BandPO's clip rules into RL frameworks: ``trl`` (``BandPOConfig`` / ``BandPOTrainer``),
``verl`` (the policy-loss plugin) and ``skyrl`` (the policy losses and the override entrypoint), with the modules
each keeps beside it (docs/architecture.md, layer 3).

Each adapter translates its framework's config slot into a ``bandpo.losses.method.ClipMethod`` with one table from
the framework's spelling to bandpo's names (docs/names.md), and imports its framework lazily, so ``import bandpo``
works without any of them installed.
"""
