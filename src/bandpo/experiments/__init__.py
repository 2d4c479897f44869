"""Experiments built on the losses: the mechanism study (``bandpo mechanism``).

Layering: experiments import ``bandpo.core`` and ``bandpo.losses``; nothing below imports experiments.
"""
