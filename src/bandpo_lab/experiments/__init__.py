"""Experiments across many training runs: ``compare`` (``bandpo compare``) and its ``report``, and ``llm_probe``
(``bandpo probe``). Layering (docs/architecture.md): only ``cli`` imports them.
"""
