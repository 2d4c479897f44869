"""Experiments: what is run across many training runs or none, and reported.

``compare`` (plan, run and export a comparison of methods over seeds: ``bandpo compare``), ``report`` (its report:
one ``ReportData``, then figures, Markdown, HTML and CSV views), ``mechanism`` / ``mechanism_stats`` /
``mechanism_report`` (the bandit study of ``bandpo mechanism``). The benchmarks live beside the package, in
``benchmarks/``.

Layering (docs/architecture.md): experiments may import every layer but ``cli``; nothing but ``cli`` imports them.
"""
