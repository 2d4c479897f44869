"""Tests for bandpo_lab.experiments.compare.plan and export: run statuses, stale runs, compact exports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from synthetic_runs import CONFIGS

from bandpo_lab.experiments.compare import (
    RESULTS_FILE,
    CompareError,
    load_compare_config,
    plan_runs,
)
from bandpo_lab.experiments.compare.plan import check_plans
from bandpo_lab.experiments.report import (
    build_report,
    load_runs,
)


def test_plan_statuses_and_stale_runs(tmp_path: Path) -> None:
    cfg = load_compare_config(CONFIGS / "compare-tiny.yaml", [f"output_dir={tmp_path / 'out'}", "seeds=[0]"])
    plans = plan_runs(cfg)
    assert [(p.method.label, p.seed, p.status) for p in plans] == [("grpo", 0, "new"), ("band-kl", 0, "new")]
    grpo, band = plans
    assert grpo.train_config["clip_rule"] == "grpo" and grpo.train_config["clip_rule_kwargs"] == {
        "eps_low": 0.2,
        "eps_high": 0.2,
    }
    assert "band_divergence" not in grpo.train_config  # the base recipe's Band settings are dropped
    assert band.train_config["clip_rule_kwargs"] == {"divergence": "kl", "delta": 0.05}
    assert grpo.train_config["output_dir"] == str(tmp_path / "out" / "runs" / "grpo" / "seed0")
    assert grpo.train_config["max_steps"] == 40 and grpo.train_config["seed"] == 0

    # a finished run with this config is done; one with another config is stale and refused
    for p in plans:
        p.run_dir.mkdir(parents=True)
        (p.run_dir / "run_spec.json").write_text(json.dumps(p.spec(cfg)))
        (p.run_dir / RESULTS_FILE).write_text(json.dumps({"fingerprint": p.fingerprint, "metrics": {}}))
    assert [p.status for p in plan_runs(cfg)] == ["done", "done"]
    changed = load_compare_config(
        CONFIGS / "compare-tiny.yaml",
        [f"output_dir={tmp_path / 'out'}", "seeds=[0]", "train.overrides.max_steps=41"],
    )
    plans = plan_runs(changed)
    assert [p.status for p in plans] == ["stale", "stale"]
    with pytest.raises(
        CompareError,
        match=r"were made \(or started\) with another config.*differs in: train_config.max_steps.*--redo",
    ):
        check_plans(changed, plans)
    check_plans(changed, plans, redo=True)  # allowed with redo


def test_a_run_folder_inside_the_model_folder_says_where_its_output_dir_comes_from(tmp_path: Path) -> None:
    """Each run's output_dir is set by compare, not by the user's recipe: the error says so (it said "default")."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    cfg = load_compare_config(
        CONFIGS / "compare-tiny.yaml",
        [f"output_dir={model}", "seeds=[0]", f"train.overrides.model.path={model}"],
    )
    with pytest.raises(CompareError) as info:
        plan_runs(cfg)
    message = str(info.value)
    assert message.startswith(
        f"methods[grpo] seed 0: output_dir {str(model / 'runs' / 'grpo' / 'seed0')!r} is inside"
    )
    assert message.endswith("(set by bandpo compare: its output_dir/runs/<label>/seed<N>)"), message
    assert "default" not in message


def test_a_run_that_cannot_resume_with_its_settings_is_refused_naming_redo(tmp_path: Path) -> None:
    """A started run (its spec of this config) whose training began with other settings: the trainer's refusal
    named --allow-config-change, which compare does not have; it names --redo, which retrains it from scratch."""
    from synthetic_runs import make_planned_runs

    from bandpo_lab.experiments.compare import validate_with_trainer

    out = tmp_path / "out"
    cfg = load_compare_config(CONFIGS / "compare-tiny.yaml", [f"output_dir={out}", "seeds=[0]"])
    changed = load_compare_config(
        CONFIGS / "compare-tiny.yaml", [f"output_dir={out}", "seeds=[0]", "train.overrides.learning_rate=0.5"]
    )
    make_planned_runs(cfg, train_files=True)
    for p in plan_runs(changed):  # started under the changed config's spec, not finished
        (p.run_dir / RESULTS_FILE).unlink()
        (p.run_dir / "run_spec.json").write_text(json.dumps(p.spec(changed)))
    plans = plan_runs(changed)
    assert [p.status for p in plans] == ["partial", "partial"]
    with pytest.raises(
        CompareError,
        match=r"^methods\[grpo\] seed 0: the run started in '.*seed0' cannot resume with this config \(it started "
        r"with other training settings: learning_rate: 0.0005 -> 0.5\): pass --redo to retrain it from scratch, or "
        r"choose another output_dir$",
    ):
        validate_with_trainer(plans)
    validate_with_trainer(plans, redo=True)
    assert [p.status for p in plans] == ["stale", "stale"]  # the driver discards them before training


def test_the_plan_keeps_every_call_with_its_time_and_code(tmp_path: Path) -> None:
    from bandpo_lab.experiments.compare.plan import write_plan
    from bandpo_lab.provenance import provenance

    out = tmp_path / "out"
    out.mkdir()
    # a plan written before calls were kept: it counts as one call, time and code not recorded
    (out / "compare_plan.json").write_text(json.dumps({"config": {"seeds": [7]}, "seeds": [7]}))
    cfg = load_compare_config(CONFIGS / "compare-tiny.yaml", [f"output_dir={out}", "seeds=[0]"])
    plans = plan_runs(cfg)
    write_plan(cfg, plans)
    plans[0].status = "done"  # the second call finds grpo finished
    write_plan(cfg, plans)
    plan = json.loads((out / "compare_plan.json").read_text())
    calls = plan["calls"]
    assert len(calls) == 3
    assert calls[0] == {
        "time": None,
        "argv": None,
        "provenance": None,
        "config": {"seeds": [7]},
        "queued": None,
    }
    assert calls[1]["queued"] == ["grpo seed 0", "band-kl seed 0"] and calls[2]["queued"] == [
        "band-kl seed 0"
    ]
    now = provenance()
    for call in calls[1:]:
        assert call["time"] and call["config"] == cfg.to_dict() and isinstance(call["argv"], list)
        assert call["provenance"]["commit"] == now["commit"] and call["provenance"]["torch"] == now["torch"]
    assert plan["seeds"] == [0]  # a plan without methods (older than them) adds none of its seeds


def test_the_plan_describes_the_study_over_every_call(tmp_path: Path) -> None:
    """A call on some methods or seeds (``--methods band-kl seeds=[2]``) replaced the plan's methods, seeds and
    reference with its own, so that the report built from the plan alone misdescribed the study."""
    from bandpo_lab.experiments.compare.plan import write_plan

    out = tmp_path / "out"
    preset = CONFIGS / "compare-tiny.yaml"
    first = load_compare_config(preset, [f"output_dir={out}", "seeds=[0, 1]"])
    write_plan(first, plan_runs(first))
    partial = load_compare_config(preset, [f"output_dir={out}", "seeds=[2]"])
    partial.methods, partial.reference = partial.methods[1:], "band-kl"  # as --methods band-kl makes it
    write_plan(partial, plan_runs(partial))
    plan = json.loads((out / "compare_plan.json").read_text())
    assert plan["seeds"] == [0, 1, 2] and plan["reference"] == "grpo"
    assert [(m["label"], m.get("seeds")) for m in plan["methods"]] == [("grpo", [0, 1]), ("band-kl", None)]
    assert [(r["label"], r["seed"]) for r in plan["runs"]] == [
        ("grpo", 0), ("grpo", 1), ("band-kl", 0), ("band-kl", 1), ("band-kl", 2),
    ]  # fmt: skip
    assert [c["config"]["seeds"] for c in plan["calls"]] == [[0, 1], [2]]  # each call's own subset
    assert plan["calls"][1]["config"]["reference"] == "band-kl"
    # a call on every method that names another reference changes it
    again = load_compare_config(preset, [f"output_dir={out}", "seeds=[0]", "reference=band-kl"])
    write_plan(again, plan_runs(again))
    plan = json.loads((out / "compare_plan.json").read_text())
    assert plan["reference"] == "band-kl" and plan["seeds"] == [0, 1, 2]


def test_export_keeps_what_the_report_needs_and_no_model(compare_dir: Path, tmp_path: Path) -> None:
    """The exported copy holds no weights or checkpoints, its training logs are gzipped, and the report built
    from it has the same tables as the one built from the run directories."""
    import shutil

    from bandpo_lab.experiments.compare import export_results

    compare_dir = Path(shutil.copytree(compare_dir, tmp_path / "cmp"))
    run = compare_dir / "runs" / "grpo" / "seed0"
    (run / "run_info.json").write_text(json.dumps({"provenance": {"commit": "a" * 40}}))
    (run / "checkpoint-20").mkdir(exist_ok=True)
    (run / "checkpoint-20" / "optimizer.pt").write_bytes(b"x" * 100)
    (run / "model.safetensors").write_bytes(b"x" * 100)
    written = export_results(compare_dir, tmp_path / "export")
    names = {p.name for p in written}
    assert "model.safetensors" not in names and "optimizer.pt" not in names
    assert not (tmp_path / "export" / "runs" / "grpo" / "seed0" / "metrics.jsonl").exists()
    assert (tmp_path / "export" / "runs" / "grpo" / "seed0" / "metrics.jsonl.gz").is_file()
    exported_info = tmp_path / "export" / "runs" / "grpo" / "seed0" / "run_info.json"
    assert (
        exported_info.read_bytes() == (run / "run_info.json").read_bytes()
    )  # the training code's provenance
    assert load_runs(tmp_path / "export")[0].metrics == load_runs(compare_dir)[0].metrics
    ours = build_report(tmp_path / "export", reference="grpo", smooth=2, figures=False)
    theirs = build_report(compare_dir, reference="grpo", smooth=2, figures=False)
    assert (ours / "results.md").read_text() == (theirs / "results.md").read_text()
    # byte-for-byte reproducible: a second export writes the same gzip bytes
    again = export_results(compare_dir, tmp_path / "again")
    gz = next(p for p in again if p.name == "metrics.jsonl.gz")
    assert gz.read_bytes() == (tmp_path / "export" / gz.relative_to(tmp_path / "again")).read_bytes()
    # a run restored from an export (its log only packed) exports its packed log again, unchanged
    restored = Path(shutil.copytree(tmp_path / "export", tmp_path / "restored"))
    refreshed = export_results(restored, tmp_path / "re-export")
    assert gz.relative_to(tmp_path / "again") in {p.relative_to(tmp_path / "re-export") for p in refreshed}
    assert (tmp_path / "re-export" / gz.relative_to(tmp_path / "again")).read_bytes() == gz.read_bytes()
    with pytest.raises(CompareError, match="outside"):
        export_results(compare_dir, compare_dir / "inside")
    with pytest.raises(CompareError, match="nothing to export"):
        export_results(tmp_path / "empty", tmp_path / "x")


def test_settings_added_later_keep_earlier_fingerprints() -> None:
    """A run exported before ``precision`` existed has no such key; the same config now carries it at the value
    that reproduces that run (``float32``, or ``auto``), and the fingerprints must agree. Any other value (``bf16``)
    is part of the fingerprint."""
    from bandpo_lab.experiments.compare.layout import fingerprint

    before = {"train": {"model": {"path": "m", "dtype": "float32"}, "lr": 1e-5}, "eval": {"k": 8}}
    for value in ("float32", "auto"):
        now = {"train": {"model": {"path": "m", "dtype": "float32", "precision": value}, "lr": 1e-5},
               "eval": {"k": 8, "precision": value}}  # fmt: skip
        assert fingerprint(now) == fingerprint(before)
    bf16 = {
        "train": {"model": {"path": "m", "dtype": "float32", "precision": "bf16"}, "lr": 1e-5},
        "eval": {"k": 8},
    }
    assert fingerprint(bf16) != fingerprint(before)


def test_exporting_again_drops_the_files_a_redone_run_no_longer_has(tmp_path: Path) -> None:
    """A run being redone kept its old results.json in the export next to its new spec: the rebuilt report counted
    it finished, with the old config's numbers."""
    from synthetic_runs import make_planned_runs

    from bandpo_lab.experiments.compare import export_results

    src, dest = tmp_path / "out", tmp_path / "export"
    make_planned_runs(load_compare_config(CONFIGS / "compare-tiny.yaml", [f"output_dir={src}"]))
    export_results(src, dest)
    changed = load_compare_config(
        CONFIGS / "compare-tiny.yaml", [f"output_dir={src}", "train.overrides.max_steps=30"]
    )
    redone = next(p for p in plan_runs(changed) if (p.method.label, p.seed) == ("band-kl", 1))
    for name in ("results.json", "metrics.jsonl"):  # --redo discarded it; the new run has started
        (redone.run_dir / name).unlink()
    (redone.run_dir / "run_spec.json").write_text(json.dumps(redone.spec(changed)))
    export_results(src, dest)
    run = dest / "runs" / "band-kl" / "seed1"
    assert sorted(p.name for p in run.iterdir()) == ["run_spec.json"]
    assert json.loads((run / "run_spec.json").read_text())["fingerprint"] == redone.fingerprint
    report = build_report(dest, figures=False)
    assert json.loads((report / "results.json").read_text())["missing"] == ["band-kl seed 1"]
    assert (dest / "runs" / "grpo" / "seed1" / "results.json").is_file()  # the others are as they were


def test_export_refuses_a_folder_of_other_files_or_a_comparisons_runs(tmp_path: Path) -> None:
    """``--export DIR`` copied into any folder: a user's ``report/report.md`` and ``results.csv`` were replaced by
    the comparison's, and a second comparison's output_dir had its runs' specs, results and configs replaced (and
    its files the source runs lack deleted). DIR must be new, empty or an earlier export; the refusal names it."""
    from synthetic_runs import make_planned_runs

    from bandpo_lab.experiments.compare import export_results

    src = tmp_path / "out"
    make_planned_runs(load_compare_config(CONFIGS / "compare-tiny.yaml", [f"output_dir={src}"]))
    mine = tmp_path / "mine"
    (mine / "report").mkdir(parents=True)
    (mine / "report" / "report.md").write_text("my own report")
    with pytest.raises(CompareError) as err:
        export_results(src, mine)
    assert str(err.value) == (
        f"export destination {str(mine)!r} holds files that are not an earlier export (report/): exporting "
        "replaces files of the same names there; choose a new or empty folder"
    )
    assert (mine / "report" / "report.md").read_text() == "my own report" and len(list(mine.rglob("*"))) == 2
    (mine / "compare_plan.json").write_text('{"mine": true}')  # named like a plan, not a comparison's
    with pytest.raises(CompareError, match="holds files that are not an earlier export"):
        export_results(src, mine)
    assert (mine / "compare_plan.json").read_text() == '{"mine": true}'
    (mine / "compare_plan.json").unlink()
    other = tmp_path / "other"  # another comparison, with a trained model in a run
    make_planned_runs(load_compare_config(CONFIGS / "compare-tiny.yaml", [f"output_dir={other}"]))
    (other / "runs" / "grpo" / "seed0" / "config.json").write_text("{}")
    before = {p: p.read_bytes() for p in other.rglob("*") if p.is_file()}
    with pytest.raises(CompareError, match="is a comparison's output_dir"):
        export_results(src, other)
    assert {p: p.read_bytes() for p in other.rglob("*") if p.is_file()} == before
    (mine / "report" / "report.md").unlink()
    export_results(src, mine)  # no file in it (an empty folder): taken
    export_results(src, mine)  # an earlier export: updated


def test_export_refuses_a_comparison_whose_runs_hold_no_model_yet(tmp_path: Path) -> None:
    """A comparison stopped (or failed) before its first run saved a model passed for an earlier export: exporting
    another comparison there replaced its compare_plan.json, baseline results and its run's spec, run info and
    training config, and gave the run a results.json it never made. Its compare_config.yaml, or a run's
    train.log, which an export never holds, marks it; before any write, whichever it has."""
    from synthetic_runs import make_planned_runs

    from bandpo_lab.experiments.compare import export_results
    from bandpo_lab.experiments.compare.plan import write_plan

    src, other = tmp_path / "out", tmp_path / "other"
    make_planned_runs(load_compare_config(CONFIGS / "compare-tiny.yaml", [f"output_dir={src}"]))
    stopped = load_compare_config(CONFIGS / "compare-tiny.yaml", [f"output_dir={other}", "seeds=[0]"])
    started = plan_runs(stopped)[0]
    write_plan(stopped, plan_runs(stopped))
    started.run_dir.mkdir(parents=True)
    (started.run_dir / "run_spec.json").write_text(json.dumps(started.spec(stopped)))
    (started.run_dir / "train.log").write_text("===== grpo seed 0\n")
    (started.run_dir / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 0.5}) + "\n")
    before = {p: p.read_bytes() for p in other.rglob("*") if p.is_file()}
    for marker in (other / "compare_config.yaml", started.run_dir / "train.log"):
        with pytest.raises(
            CompareError, match=r"is a comparison's output_dir \(its compare_config\.yaml or a run"
        ):
            export_results(src, other)
        assert {p: p.read_bytes() for p in other.rglob("*") if p.is_file()} == before
        marker.unlink()  # the other marker alone
        before.pop(marker)
