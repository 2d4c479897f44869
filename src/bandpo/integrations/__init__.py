"""Thin adapters that plug BandPO's clip rules into RL frameworks.

Each adapter translates its framework's config slot into a ``bandpo.losses.method.ClipMethod`` (one table from the
framework's spelling to bandpo's names; docs/names.md) and imports its framework lazily, so ``import bandpo``
works without any of them installed:

- ``bandpo.integrations.trl``: ``BandPOConfig`` / ``BandPOTrainer``, subclasses of TRL's ``GRPOConfig`` /
  ``GRPOTrainer`` that apply a clip rule's per-token bounds inside TRL's own loss (TRL 1.16.x); the config class
  lives in ``trl_config``, what bandpo knows about TRL without importing it in ``trl_spec``.
- ``bandpo.integrations.verl``: the verl policy-loss plugin (modes ``bandpo``, ``dcpo``, ``bandpo_<rule>``); verl's
  global step in ``verl_steps``, the TRL-next-to-verl check in ``verl_env``.
- ``bandpo.integrations.skyrl``: every clip rule as a SkyRL policy loss (``bandpo``, ``bandpo_<rule>``) but
  ``adaptive_band`` (SkyRL's loss call has no entropy); ``skyrl_section`` translates SkyRL's
  ``trainer.algorithm`` (the section ``trainer.algorithm.bandpo`` and SkyRL's own ``eps_clip_low`` /
  ``eps_clip_high``) into the ``ClipMethod`` with ``SKYRL_NAMES``, without importing SkyRL.
"""
