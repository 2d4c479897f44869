"""Compare clip rules: train the same task with several methods over several seeds, evaluate, report.

The engine behind ``bandpo compare --config configs/compare-tiny.yaml``::

    from bandpo_lab.experiments.compare import load_compare_config, run_compare
    config = load_compare_config("configs/compare-tiny.yaml", ["seeds=[0]"])
    report_dir = run_compare(config)          # -> <output_dir>/report (report.md, report.html, figures, tables)

A compare config (YAML; ``key=value`` overrides with dotted keys apply on top, e.g. ``train.overrides.max_steps=8``)::

    output_dir: runs/compare-tiny          # relative to the working directory
    train:
      config: tiny.yaml                    # the base training recipe, relative to this file
      overrides: {max_steps: 60}           # training keys applied to every run (dotted keys allowed; not the
                                           # method or its settings: those come from methods[])
    methods:                               # default: all of DEFAULT_METHODS
      - {label: grpo, clip_rule: grpo}
      - {label: band-kl, clip_rule: band, params: {divergence: kl, delta: 0.05}}
      - {label: band-decay, clip_rule: band, params: {delta: 0.2, delta_schedule: linear, delta_end: 0.02}}
      - {label: cispo, method: cispo, params: {epsilon_high: 5.0}}   # TRL-native: plain GRPOTrainer
      - {label: clip-higher, clip_rule: clip_higher, seeds: [0, 1]}  # on fewer seeds than the others
    seeds: [0, 1, 2]
    reference: grpo                        # the label the others are compared against (default: the first)
    eval: {k: 16, ks: [1, 4, 16], temperature: 1.0, max_problems: 200}   # final evaluation of every run
    #   eval.at_steps: [120, 140]          # also at these steps, during training: the report's main metric is then
    #                                      # the late mean (late/mean@k: these and the final evaluation averaged)
    curves: {every: 20, k: 4, max_problems: 100}   # held-out accuracy during training (every: 0 turns it off)
    baseline: true                         # evaluate the starting policy once
    num_threads: 1                         # OMP_NUM_THREADS of the training processes (null: inherit)
    report: {smooth: 1}                    # rolling-mean window of the training curves

A method is any name of :data:`bandpo_lab.training.methods.METHODS`: a clip rule (``clip_rule: NAME`` or
``method: NAME``, ``params`` its parameters and, for a rule with a radius, its schedule ``delta_schedule``,
``delta_end``, ``delta_hold_frac``; trained by ``BandPOTrainer``) or a TRL-native method (``method: cispo``,
``sapo``, ``gspo``; ``params`` the ``GRPOConfig`` fields it takes, e.g. ``{epsilon_high: 5.0}``; trained by plain
``GRPOTrainer`` with the same data, reward, callbacks, checkpoints and evaluation). Its runs log TRL's metrics and
not our clip diagnostics, which the report shows as ``-``.

Every run (method x seed) trains in its own process (``python -m bandpo_lab.experiments.compare.worker RUN_SPEC``, log in the run's
``train.log``), in sequence, into ``<output_dir>/runs/<label>/seed<seed>/``: the model, checkpoints, ``metrics.jsonl``
(training logs), ``heldout.jsonl`` (the held-out curve), ``run_spec.json`` (what was run) and, once finished,
``results.json`` (the final evaluation: the marker of a finished run; with ``eval.at_steps`` also those
evaluations, from ``evals_at_steps.jsonl``, and their late mean). A second ``bandpo compare`` with the same
config skips finished runs and resumes an interrupted one from its last checkpoint; a finished run whose config
differs from the current one is refused (``--redo`` retrains it). The starting policy's evaluation goes to
``<output_dir>/baseline/results.json``; the report (:func:`bandpo_lab.experiments.report.build_report`) to
``<output_dir>/report/``.

Modules: ``config`` (the compare config), ``plan`` (runs and their status), ``worker`` (one run, in its own process),
``baseline`` (the starting policy), ``driver`` (:func:`run_compare`), ``export`` (compact results), ``layout`` (the
output directory's file names).
"""

from bandpo_lab.experiments.compare.config import (
    DEFAULT_METHODS,
    CompareConfig,
    CompareError,
    CurveSpec,
    EvalSpec,
    MethodSpec,
    load_compare_config,
)
from bandpo_lab.experiments.compare.driver import run_compare
from bandpo_lab.experiments.compare.export import export_results
from bandpo_lab.experiments.compare.layout import PLAN_FILE, RESULTS_FILE, RUN_SPEC_FILE
from bandpo_lab.experiments.compare.plan import RunPlan, check_eval_data, plan_runs, validate_with_trainer

__all__ = [
    "DEFAULT_METHODS",
    "PLAN_FILE",
    "RESULTS_FILE",
    "RUN_SPEC_FILE",
    "CompareConfig",
    "CompareError",
    "CurveSpec",
    "EvalSpec",
    "MethodSpec",
    "RunPlan",
    "check_eval_data",
    "export_results",
    "load_compare_config",
    "plan_runs",
    "run_compare",
    "validate_with_trainer",
]
