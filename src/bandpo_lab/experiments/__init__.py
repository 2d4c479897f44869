"""Experiments: what is run across many training runs or none, and reported.

``compare`` (plan, run and export a comparison of methods over seeds: ``bandpo compare``), ``report`` (its report:
one ``ReportData``, then figures, Markdown, HTML and CSV views). The bandit study that was ``bandpo mechanism``
lives in ``studies/mechanism/``, and the benchmarks in ``benchmarks/``, beside the package.

Layering (docs/architecture.md): experiments may import every layer but ``cli``; nothing but ``cli`` imports them.
"""
