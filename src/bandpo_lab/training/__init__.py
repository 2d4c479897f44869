"""Training from a YAML recipe: the engine behind ``bandpo train`` (:func:`~bandpo_lab.training.config.load_train_config`,
:func:`~bandpo_lab.training.run.prepare`, :func:`~bandpo_lab.training.run.train`). TRL and transformers are imported
on first use, so ``import bandpo_lab.training`` is cheap."""
