"""Pure tensor math for the Band operator: divergences, solvers, bounds. No framework imports."""

from bandpo.core.bounds import SOLVERS, band_bounds, check_generator, resolve_divergence
from bandpo.core.divergences import DIVERGENCES, Divergence, get_divergence, register_divergence

__all__ = [
    "DIVERGENCES",
    "SOLVERS",
    "Divergence",
    "band_bounds",
    "check_generator",
    "get_divergence",
    "register_divergence",
    "resolve_divergence",
]
