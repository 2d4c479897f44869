"""The seed range of training runs, evaluations and the probe (:func:`check_seed`): ``np.random.seed``'s, which
transformers' ``set_seed`` calls. (The tasks' seeds go to ``random.Random`` and the bootstrap's to
``np.random.default_rng``, which take any integer >= 0.)"""

from __future__ import annotations

from bandpo.validation import check_int_in, is_int_in

SEED_MAX = 2**32 - 1
"""numpy's largest seed: transformers seeds numpy with a run's ``seed``, and the evaluation and the probe seed their
samplers through numpy too (a larger seed passes the config and fails at the first draw)."""

SEED_RANGE = f"an integer in [0, {SEED_MAX}] (numpy's seed range)"
"""What a seed may be, in the words of :func:`check_seed`'s message."""


def is_seed(value: object) -> bool:
    """Whether ``value`` is an integer (Python or numpy, not a bool) in ``[0, SEED_MAX]``."""
    return is_int_in(value, 0, SEED_MAX)


def check_seed(name: str, value: object, *, note: str = "", error: type[ValueError] = ValueError) -> int:
    """``value`` as a seed, an integer in ``[0, SEED_MAX]``, else ``error`` naming ``name``: ``seed must be an
    integer in [0, 4294967295] (numpy's seed range), got -1``; ``note`` (e.g. ``" or None"``) comes before the
    range's reason."""
    return check_int_in(name, value, 0, SEED_MAX, note=f"{note} (numpy's seed range)", error=error)
