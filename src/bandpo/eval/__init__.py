"""Evaluation: sampling completions for held-out problems and the metrics the authors report (mean@k, pass@k,
best@k, maj@k)."""
