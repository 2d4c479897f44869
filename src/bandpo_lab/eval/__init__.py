"""Evaluation of a model on held-out problems: ``settings`` (k, pass@j values, temperature), ``datasets`` and
``scorers`` (tasks and files, their verifiers), ``models`` (checking and loading a model directory), ``backends``
(transformers / vLLM sampling), ``sampling`` (generation helpers), ``metrics`` (mean@k, pass@k, best@k, maj@k:
pure numpy), ``evaluate`` (the loop and its table) and ``outputs`` (where the results and samples files may go).

Layering (docs/architecture.md): eval imports training (data loading, the task registry) and below; experiments and
cli import eval.
"""
