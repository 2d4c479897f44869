"""bandpo_lab: the lab around the bandpo library.

The ``bandpo`` command (``bandpo_lab.cli``), one training run with TRL (``training``), evaluation of a model
(``eval``), comparisons, reports and benchmarks (``experiments``), the built-in tasks, answer
checking and models (``tasks``, ``rewards``, ``models``) and their YAML configs (``config``). It imports the library
(``bandpo``: the bounds, the policy loss, the framework adapters); the library never imports it.
"""
