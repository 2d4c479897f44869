"""The torch CPU thread count a command takes (:func:`check_threads`)."""

from __future__ import annotations

import os

from bandpo.validation import check_int_in

THREADS_PER_CPU = 4
"""The most torch CPU threads a command takes per CPU core (``os.cpu_count()``): more only oversubscribes the
cores, and a count in the tens of thousands crashes torch (a segmentation fault)."""


def check_threads(flag: str, value: object, error: type[ValueError] = ValueError) -> int:
    """``value`` as a torch CPU thread count: an integer in [1, :data:`THREADS_PER_CPU` x ``os.cpu_count()``], else
    ``error`` naming ``flag``, e.g. ``--threads must be an integer in [1, 8] (4 per CPU core; this machine has 2),
    got 100000``."""
    cpus = os.cpu_count() or 1
    note = f" ({THREADS_PER_CPU} per CPU core; this machine has {cpus})"
    return check_int_in(flag, value, 1, THREADS_PER_CPU * cpus, note=note, error=error)
