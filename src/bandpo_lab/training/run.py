"""Run a training config: :func:`prepare` checks everything without loading a model, :func:`train` trains (what
a run writes, resuming and the lock: docs/trl.md, ``bandpo train``). Under ``accelerate launch`` every process
runs :func:`train`; the main process builds a task model first and writes the files.
"""

from __future__ import annotations

import contextlib
import functools
import shutil
import sys
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bandpo_lab._files import read_json_object, read_jsonl
from bandpo_lab.decode import sampling_generate
from bandpo_lab.models import MODELS, builtin_model_dir, is_builtin_model
from bandpo_lab.rewards import SafeRewardFunc
from bandpo_lab.runtime import (
    FLOAT32,
    Precision,
    completion_tokens_only,
    cuda_tf32,
    freed_memory_kept,
    precision_for,
    weights_note,
)
from bandpo_lab.training import preflight
from bandpo_lab.training.checkpoints import checkpoint_dirs, copy_model_files, scan_checkpoints
from bandpo_lab.training.config import ConfigError, TrainConfig
from bandpo_lab.training.data import build_prompt_dataset, load_problems
from bandpo_lab.training.expected_warnings import silence_expected_warnings, tied_weight_keys
from bandpo_lab.training.layout import (
    LOCK_FILE,
    METRICS_FILE,
    MODEL_CARD_FILE,
    OWN_FILES,
    RUN_INFO_FILE,
    TENSORBOARD_DIR,
    is_model_card,
)
from bandpo_lab.training.lock import OutputDirLock, check_unlocked
from bandpo_lab.training.resume import ConfigChanges, ResumePlan, plan_resume
from bandpo_lab.training.rewards import answer_columns, build_rewards, check_rewards_on
from bandpo_lab.training.run_info import mark_finished, record_run_info, start_run_info
from bandpo_lab.training.tasks import build_task_model
from bandpo_lab.training.trainer_checks import (
    check_trainer_components,
    check_trainer_values,
    check_training_length,
    enum_error,
)


@dataclass
class PreparedRun:
    """Everything :func:`train` needs, checked.

    Attributes:
        args: the method's validated config: ``BandPOConfig``, or TRL's ``GRPOConfig`` for a TRL-native method.
        method: the method (:data:`bandpo_lab.training.methods.METHODS`), which chooses the trainer class.
        problems: the training problems (``prompt`` raw, ``answer``, kept columns).
        model_path: the model directory or Hugging Face id; ``None`` for a model built before training.
        resume_plan: with ``resume``, what the resume does (``None`` without).
        tokenizer, dataset: the tokenizer and the formatted prompts, once the model path is known.
    """

    config: TrainConfig
    args: Any
    method: Any
    reward_funcs: list[SafeRewardFunc]
    problems: list[dict[str, Any]]
    model_path: str | None
    resume_from: Path | None
    resume_plan: ResumePlan | None = None
    tokenizer: Any = None
    dataset: Any = None


def last_checkpoint(output_dir: str | Path) -> Path | None:
    """The newest complete ``checkpoint-<step>`` directory in ``output_dir``, or ``None``."""
    return scan_checkpoints(output_dir).latest


def prepare(
    config: TrainConfig,
    resume: bool = False,
    overwrite: bool = False,
    allow_config_change: bool = False,
    caller_files: Collection[str] = (),
) -> PreparedRun:
    """Check the whole run without loading a model: every TRL setting (and the optimizer, scheduler and
    generation config built as TRL will), the rewards (tried on the first problem), the model path, the data and
    the output directory (docs/trl.md, "Troubleshooting runs"). Arguments as :func:`train`'s.

    Raises:
        ConfigError: the first problem found, with the key, the value and what is allowed
            (:class:`~bandpo_lab.training.lock.OutputDirLockedError` when another live run holds ``output_dir``).
    """
    if resume and overwrite:
        raise ConfigError(
            "resume and overwrite are exclusive: resume continues the run, overwrite discards it"
        )
    if allow_config_change and not resume:
        raise ConfigError("allow_config_change applies to a resume only (--resume)")
    output_dir = config.output_dir
    if preflight.is_main_rank():
        check_unlocked(output_dir)
    foreign = foreign_files(output_dir, caller_files)
    checkpoints = checkpoint_dirs(output_dir) if foreign is not None else []
    # --resume also takes another trainer's checkpoints (TRL's output_dir): resuming deletes nothing but what the
    # trainer's own save_total_limit rotates
    if foreign is not None and not (resume and checkpoints):
        other = "; another trainer's checkpoints can be continued with --resume" if checkpoints else ""
        raise ConfigError(
            f"output_dir {str(output_dir)!r} holds files bandpo did not write ({foreign}): it must be an empty or "
            "new folder, or an earlier bandpo training run's folder (with --overwrite or --resume); choose another "
            f"output_dir{other}"
        )
    try:
        check_trainer_values(lambda name: preflight.trainer_value(config, name))
    except ConfigError as err:
        raise ConfigError(config.locate(str(err))) from err
    preflight.check_batch(config, preflight.world_size())
    preflight.check_libraries(config)
    method = config.training_method()
    try:
        args = method.config_class()(**config.trainer_kwargs())
    except ConfigError:
        raise
    except (TypeError, ValueError, ImportError) as err:  # ImportError: a library a setting needs
        raise ConfigError(config.locate(enum_error(str(err), config.trainer))) from err
    check_trainer_components(args)
    on_gpu = not args.use_cpu and _cuda_available()
    preflight.check_precision_here(config, on_gpu=on_gpu)
    preflight.check_gpu_settings(config, on_gpu=on_gpu)
    rewards = build_rewards(config, args.reward_weights)
    model_path = preflight.check_model(config)
    keys = answer_columns(rewards)
    problems = load_problems(
        config.data, need_answer="answer" in keys, answer_columns=sorted(keys - {"answer"})
    )
    check_rewards_on(rewards, problems[0] if model_path is not None else _first_formatted(problems, config))
    check_training_length(args, len(problems))
    plan = None
    if resume:
        _check_foreign_names(output_dir, foreign)
        plan = plan_resume(output_dir, config, args, allow_config_change)
        _check_foreign_resume(plan, output_dir, foreign)
    elif not overwrite:
        earlier = _earlier_run(output_dir)
        if earlier is not None:
            raise ConfigError(
                f"output_dir {str(output_dir)!r} already holds {earlier} from an earlier run: pass --resume to "
                "continue it, --overwrite to discard it, or choose another output_dir"
            )
    prepared = PreparedRun(
        config=config,
        args=args,
        reward_funcs=rewards,
        problems=problems,
        model_path=model_path,
        resume_from=plan.scan.latest if plan and plan.complete_at is None else None,
        resume_plan=plan,
        method=method,
    )
    if model_path is not None:  # the tokenizer is small: check the prompts against it now
        prepared.tokenizer = preflight.load_tokenizer(model_path)
        prepared.dataset = build_prompt_dataset(problems, config.data, prepared.tokenizer)
        first = prepared.dataset[0]
        if first["prompt"] != problems[0]["prompt"]:  # the trial again, on the prompt as TRL passes it
            check_rewards_on(rewards, first)
    return prepared


def _first_formatted(problems: list[dict[str, Any]], config: TrainConfig) -> dict[str, Any]:
    """The first problem with its prompt formatted as training will, before the model is built (a task's model
    has no chat template; a built-in model's entry says whether it has one)."""
    builtin = is_builtin_model(config.model.path)
    if config.data.chat_template == "always" and not builtin:
        return problems[0]  # refused with the task's tokenizer, when the model is built
    chat = builtin and MODELS.get(str(config.model.path)).chat_template
    return dict(build_prompt_dataset(problems[:1], config.data, None, chat_template=chat)[0])


def foreign_files(output_dir: Path, caller_files: Collection[str] = ()) -> str | None:
    """The entries of ``output_dir`` no bandpo run wrote, for a message (``README.md, checkpoint-4/``), or
    ``None``: the folder is new, empty (but for the lock file and ``caller_files``) or an earlier bandpo run's, known
    by its ``run_info.json`` (written when training starts, before any checkpoint or metric). A file named like
    one of a run's, or a checkpoint another trainer wrote, does not make a folder bandpo's: ``--overwrite`` would
    delete them."""
    try:
        entries = sorted(output_dir.iterdir()) if output_dir.is_dir() else []
    except OSError:
        return None  # the run's own write reports it
    names = [
        p.name + ("/" if p.is_dir() else "") for p in entries if p.name not in {LOCK_FILE, *caller_files}
    ]
    if not names or _written_by_bandpo(output_dir):
        return None
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _check_foreign_names(output_dir: Path, foreign: str | None) -> None:
    """``--resume`` in another trainer's folder (``foreign``: its entries, ``None`` for a bandpo run's or a new
    folder) writes bandpo's own files there (:data:`OWN_FILES`), and reads a ``train_config.yaml`` as the config the
    run started with: refused where the folder already holds one of them, which are then the folder's own.

    Raises:
        ConfigError: one line naming the folder and the files.
    """
    taken = [name for name in OWN_FILES if (output_dir / name).exists()] if foreign is not None else []
    if taken:
        raise ConfigError(
            f"--resume: output_dir {str(output_dir)!r} is not a bandpo run ({foreign}) and holds "
            f"{', '.join(taken)}, which a bandpo run writes in its folder (run info, logs, config as run): resuming "
            "there would replace them; move them out of the folder, or resume from a copy of its checkpoints in "
            "another output_dir"
        )


def _check_foreign_resume(plan: ResumePlan, output_dir: Path, foreign: str | None) -> None:
    """``--resume`` in another trainer's folder (``foreign``: its entries, ``None`` for a bandpo run's or a new
    folder): continue its newest complete checkpoint, or, where that checkpoint already reaches ``max_steps``, leave
    the folder as it is (``plan.foreign``: the final model is not copied over the folder's own files).

    Raises:
        ConfigError: no complete checkpoint: starting from scratch there would write a model over its files.
    """
    if foreign is None:
        return
    plan.foreign = True
    plan.final_from_checkpoint = False
    if plan.scan.latest is None and plan.complete_at is None:
        skipped = f" ({plan.scan.describe_skipped()})" if plan.scan.skipped else ""
        raise ConfigError(
            f"--resume: output_dir {str(output_dir)!r} is not a bandpo run ({foreign}) and holds no complete "
            f"checkpoint to continue{skipped}: a run from scratch would write its model over those files; choose "
            "another output_dir"
        )


def _written_by_bandpo(output_dir: Path) -> bool:
    """Whether ``output_dir`` holds a bandpo training run: its ``run_info.json`` records bandpo's provenance."""
    provenance = read_json_object(output_dir / RUN_INFO_FILE).get("provenance")
    return isinstance(provenance, dict) and "bandpo" in provenance


def _earlier_run(output_dir: Path) -> str | None:
    """What an earlier run left in ``output_dir`` (checkpoints, logged metrics, a finished record), or ``None``."""
    scan = scan_checkpoints(output_dir)
    if scan.any_found:
        last = scan.latest or scan.skipped[0][0]
        return f"checkpoints (last: {last.name})"
    if read_jsonl(output_dir / METRICS_FILE):
        packed = not (output_dir / METRICS_FILE).is_file()  # read_jsonl's fallback: an export's gzipped log
        return f"logged metrics ({METRICS_FILE}{'.gz' if packed else ''})"
    if "finished" in read_json_object(output_dir / RUN_INFO_FILE):
        return f"a finished run ({RUN_INFO_FILE})"
    return None


@functools.cache
def _trainer_class(base: type) -> type:
    """``base`` (``BandPOTrainer`` or TRL's ``GRPOTrainer``) that also logs ``rewards/<name>/failures`` (summed
    over processes) and computes in ``self.precision`` (:mod:`bandpo_lab.runtime`)."""
    import torch

    class RunTrainer(base):  # type: ignore[misc, valid-type]
        precision: Precision = FLOAT32

        def _generate_single_turn(self, *args: Any, **kwargs: Any) -> Any:
            # TRL's generate call, with temperature-only sampling, runs bandpo_lab.decode.sample (one prefill per
            # distinct prompt: a group's completions share it)
            with (
                self.precision.sampling(),
                sampling_generate(self.accelerator.unwrap_model(self.model_wrapped)),
            ):
                return super()._generate_single_turn(*args, **kwargs)

        def training_step(self, *args: Any, **kwargs: Any) -> Any:
            with self.precision.backward():
                return super().training_step(*args, **kwargs)

        def _prepare_inputs(self, *args: Any, **kwargs: Any) -> Any:
            with self.precision.exact(), completion_tokens_only():
                return super()._prepare_inputs(*args, **kwargs)

        def compute_loss(self, *args: Any, **kwargs: Any) -> Any:
            with self.precision.exact(), completion_tokens_only():
                return super().compute_loss(*args, **kwargs)

        def _fill_missing_old_log_probs(self) -> None:
            # BandPOTrainer's old-log-prob pass also runs from the optimizer-step callback, outside the two above
            with self.precision.exact(), completion_tokens_only():
                super()._fill_missing_old_log_probs()

        def create_model_card(self, *args: Any, **kwargs: Any) -> None:
            # TRL writes its model card over output_dir's README.md with each checkpoint: not over a user's
            card = Path(self.args.output_dir) / MODEL_CARD_FILE
            if card.exists() and not is_model_card(card):
                if self.is_world_process_zero() and not getattr(self, "_card_kept", False):
                    print(f"bandpo train: {card} is not a model card TRL wrote: left as it is", flush=True)
                self._card_kept = True
                return
            super().create_model_card(*args, **kwargs)

        def _calculate_rewards(self, *args: Any, **kwargs: Any) -> Any:
            safe = [f for f in self.reward_funcs if isinstance(f, SafeRewardFunc)]
            before = [f.n_failures for f in safe]
            out = super()._calculate_rewards(*args, **kwargs)
            if safe:
                local = torch.tensor(
                    [float(f.n_failures - b) for f, b in zip(safe, before)], device=self.accelerator.device
                )
                total = self.accelerator.reduce(local, reduction="sum").tolist()
                mode = "train" if self.model.training else "eval"
                for f, count in zip(safe, total):
                    self._metrics[mode][f"rewards/{f.__name__}/failures"].append(float(count))
            return out

    return RunTrainer


def _describe(prepared: PreparedRun, model_path: str, n_rows: int) -> str:
    args = prepared.args
    per_step = args.per_device_train_batch_size * args.world_size * args.gradient_accumulation_steps
    generation = args.generation_batch_size
    updates = args.steps_per_generation * args.num_iterations / args.gradient_accumulation_steps
    method = prepared.method.describe(args)
    data = prepared.config.data
    source = f"task {data.task}, split {data.split}" if data.task is not None else ", ".join(data.paths)
    lines = [
        f"bandpo train: {prepared.config.source or 'config'} -> {args.output_dir}",
        f"  model      {model_path}",
        f"  data       {n_rows} prompts ({source}), reward {', '.join(f.__name__ for f in prepared.reward_funcs)}",
        f"  method     {method}",
        f"  loss       loss_type {args.loss_type}, beta {args.beta}, lr {args.learning_rate}",
        f"  batches    {generation} completions per generation round ({generation // args.num_generations} prompts x "
        f"{args.num_generations}), {per_step} per optimizer step, {updates:g} optimizer steps per round, "
        f"{args.world_size} process(es)",
        f"  steps      max_steps {args.max_steps}, save every {args.save_steps:g}, log every {args.logging_steps:g}"
        + (f", resuming from {prepared.resume_from}" if prepared.resume_from else ""),
    ]
    return "\n".join(lines)


def _write_run_files(prepared: PreparedRun, model_path: str, n_rows: int, output_dir: Path) -> None:
    """Write ``train_config.yaml`` and ``run_info.json``, after a note naming the settings a resume changed."""
    changes = prepared.resume_plan.changes if prepared.resume_plan else None
    changed = {**changes.altering, **changes.harmless} if changes else {}
    if changed:
        print(
            f"bandpo train: note: resuming with settings changed since the run started: "
            f"{ConfigChanges.describe(changed)}",
            file=sys.stderr,
        )
    start_run_info(
        output_dir,
        prepared.config,
        model_path=model_path,
        n_prompts=n_rows,
        world_size=prepared.args.world_size,
        resumed_from=prepared.resume_from,
        changed=changed,
    )


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _discard_earlier_run(output_dir: Path) -> None:
    """Remove an earlier run's checkpoints, metrics, run info and TensorBoard folders (``runs/<date>_<host>/``
    holding only event files) from ``output_dir``; nothing else (the new run overwrites the model files). A symbolic
    link (``runs`` to a TensorBoard folder shared by many runs, a checkpoint moved to another disk) is left as it
    is, and what it points to: not this run's folder."""
    for child in checkpoint_dirs(output_dir):
        if not child.is_symlink():
            shutil.rmtree(child)
    for name in (METRICS_FILE, RUN_INFO_FILE):
        (output_dir / name).unlink(missing_ok=True)
    board = output_dir / TENSORBOARD_DIR
    if board.is_dir() and not board.is_symlink():
        for child in board.iterdir():
            files = [p for p in child.rglob("*") if p.is_file()]
            if (
                child.is_dir()
                and not child.is_symlink()
                and all(p.name.startswith("events.out.tfevents.") for p in files)
            ):
                shutil.rmtree(child)
        if not any(board.iterdir()):
            board.rmdir()


def _finish_complete_run(plan: ResumePlan, step: int, args: Any, output_dir: Path) -> None:
    """``--resume`` of a run that finished at ``step``: copy the final model from the last checkpoint if the run
    was killed before saving it."""
    if plan.final_from_checkpoint and plan.scan.latest is not None:
        copy_model_files(plan.scan.latest, output_dir)
        mark_finished(output_dir, step, args)
        how = f"; the final model was not saved, copied it from {plan.scan.latest.name}"
    elif plan.foreign and plan.scan.latest is not None:
        how = f"; another trainer's folder, left as it is: the model of step {step} is {plan.scan.latest}"
    else:
        how = "; the final model is unchanged"
    print(
        f"bandpo train: {output_dir} is complete (step {step}, max_steps {args.max_steps}): "
        f"nothing to train{how}. To train longer, resume with a higher max_steps",
        flush=True,
    )


def _close_progress_bars(trainer: Any) -> None:
    from transformers import ProgressCallback

    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, ProgressCallback):
            for name in ("training_bar", "prediction_bar"):
                bar = getattr(callback, name, None)
                if bar is not None:
                    bar.close()
                    setattr(callback, name, None)


def train(
    config: TrainConfig,
    resume: bool = False,
    overwrite: bool = False,
    callbacks: Sequence[Any] = (),
    prepared: PreparedRun | None = None,
    allow_config_change: bool = False,
    caller_files: Collection[str] = (),
) -> Path:
    """Train ``config`` with its method's trainer; returns ``output_dir`` (its files: docs/trl.md).

    Args:
        config: the training config (:func:`bandpo_lab.training.config.load_train_config`).
        resume: continue from the newest complete ``checkpoint-*`` in ``output_dir`` (none: start from scratch; a
            finished run: do nothing).
        overwrite: discard an earlier run's checkpoints, metrics, run info and TensorBoard folders in
            ``output_dir`` (without it, a fresh run into an earlier run's folder is refused).
        callbacks: more ``transformers.TrainerCallback`` objects.
        prepared: the result of :func:`prepare` for this config, to skip checking twice.
        allow_config_change: with ``resume``, continue even if the config changes the experiment.
        caller_files: names of files in ``output_dir`` the caller wrote (a comparison's ``run_spec.json``), not
            the user's.

    Raises:
        ConfigError: from :func:`prepare`, before any model is loaded.
    """
    prepared = prepared or prepare(
        config,
        resume=resume,
        overwrite=overwrite,
        allow_config_change=allow_config_change,
        caller_files=caller_files,
    )
    args = prepared.args
    output_dir = Path(args.output_dir)
    is_main = args.process_index == 0
    with OutputDirLock(output_dir) if is_main else contextlib.nullcontext():
        plan = prepared.resume_plan
        if is_main and plan is not None and plan.scan.skipped:
            print(
                f"bandpo train: skipping incomplete checkpoint(s) (a save did not finish): "
                f"{plan.scan.describe_skipped()}",
                flush=True,
            )
        if plan is not None and plan.complete_at is not None:
            if is_main:
                _finish_complete_run(plan, plan.complete_at, args, output_dir)
            return output_dir
        return _train_locked(prepared, overwrite, callbacks, is_main)


def _train_locked(prepared: PreparedRun, overwrite: bool, callbacks: Sequence[Any], is_main: bool) -> Path:
    config, args = prepared.config, prepared.args
    output_dir = Path(args.output_dir)
    if overwrite and is_main and output_dir.is_dir():
        _discard_earlier_run(output_dir)
    if prepared.resume_plan is not None and prepared.resume_from is None and is_main:
        print(
            f"bandpo train: no complete checkpoint in {output_dir} to resume from: starting from scratch",
            flush=True,
        )

    model_path = prepared.model_path
    if model_path is None:
        # the task's or a built-in model: the main process builds it, the others read the cache
        cache_dir = preflight.cache_dir(config)
        with args.main_process_first(desc="building the model"):
            if is_builtin_model(config.model.path):
                built = builtin_model_dir(
                    str(config.model.path), cache_dir, progress=is_main and not args.disable_tqdm
                )
            else:
                built = build_task_model(
                    config.data.task,  # type: ignore[arg-type]
                    config.data.task_options,
                    config.model.warm_start,
                    cache_dir,
                    progress=is_main and not args.disable_tqdm,
                )
        model_path = str(built)
    if prepared.tokenizer is None:
        prepared.tokenizer = preflight.load_tokenizer(model_path)
        prepared.dataset = build_prompt_dataset(prepared.problems, config.data, prepared.tokenizer)
    n_rows = len(prepared.dataset)
    if is_main:
        _write_run_files(prepared, model_path, n_rows, output_dir)
        print(_describe(prepared, model_path, n_rows), flush=True)

    on_gpu = not args.use_cpu and _cuda_available()
    with freed_memory_kept() if not on_gpu else contextlib.nullcontext():
        step = _run_trainer(prepared, model_path, callbacks, on_gpu, is_main)
    if is_main:
        mark_finished(output_dir, step, args)
        failures = sum(f.n_failures for f in prepared.reward_funcs)
        print(
            f"bandpo train: done at step {step}; model, metrics.jsonl and checkpoints in "
            f"{output_dir}" + (f" ({failures} reward failures on this process)" if failures else ""),
            flush=True,
        )
    return output_dir


def gpu_precision_reason(args: Any, tf32: bool | None = None) -> str:
    """What TRL's settings ``args`` compute on a GPU, for the precision line and ``run_info.json``: ``bf16`` /
    ``fp16`` autocast (the ratio's log-probs too: docs/smollm2.md, "On a GPU") or float32, with or without TF32
    products (``tf32``: PyTorch's setting as the run starts; ``None``: TRL's ``tf32`` field)."""
    if tf32 is None:
        tf32 = bool(getattr(args, "tf32", None))
    tf32_text = ", TF32 products" if tf32 else ""
    for name in ("bf16", "fp16"):
        if getattr(args, name, False):
            return f"TRL's {name}: true: autocast, the ratio's log-probs in {name} too{tf32_text}"
    return f"TRL's bf16 and fp16 off: float32{tf32_text}"


def _run_trainer(
    prepared: PreparedRun, model_path: str, callbacks: Sequence[Any], on_gpu: bool, is_main: bool
) -> int:
    """Build the method's trainer, resolve its precision, train and save the final model; returns the last
    optimizer step."""
    from bandpo.integrations.trl_progress import use_compact_progress
    from bandpo_lab.training.callbacks import MetricsJSONLCallback

    config, args = prepared.config, prepared.args
    output_dir = Path(args.output_dir)
    base = prepared.method.trainer_class()
    trainer = _trainer_class(base)(
        model=model_path,
        reward_funcs=prepared.reward_funcs,
        args=args,
        train_dataset=prepared.dataset,
        processing_class=prepared.tokenizer,
        callbacks=[MetricsJSONLCallback(output_dir / METRICS_FILE), *callbacks],
    )
    trainer.precision = precision_for(
        config.model.precision,
        trainer.model,
        on_gpu=on_gpu,
        gpu_reason=gpu_precision_reason(args, cuda_tf32() if on_gpu else None),
    )
    if is_main:
        print(f"  precision  {trainer.precision.describe()}", flush=True)
        note = weights_note(trainer.precision, trainer.model)
        if note is not None:
            print(f"  note       {note}", flush=True)
        record_run_info(output_dir, precision=trainer.precision.record())
    use_compact_progress(trainer)  # a TRL-native method's GRPOTrainer too (BandPOTrainer has it already)
    try:
        with silence_expected_warnings(tied_weight_keys(trainer.model)):
            trainer.train(resume_from_checkpoint=str(prepared.resume_from) if prepared.resume_from else None)
    except KeyboardInterrupt:
        _close_progress_bars(trainer)  # now, not at exit after the caller's message
        raise
    trainer.save_model(str(output_dir))
    return int(trainer.state.global_step)
