"""Evaluation of a model on held-out problems (``bandpo eval``), one module a part; ``evaluate`` runs it.
Layering (docs/architecture.md): eval imports training and below; experiments and cli import eval.
"""
