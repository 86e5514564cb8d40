"""Sequential: validation before running, printing, text form, editing."""

from __future__ import annotations

import pytest
from transform_testlib import BASIC, BASIC_ABS, INGESTION, P, Tag, recorder, relu_to_abs

from plait.ir import assert_structural_equal
from plait.transform import (
    LambdaLift,
    Normalize,
    PassContext,
    PhaseError,
    PipelineError,
    Sequential,
    make_pass,
    parse_pipeline,
)


def test_misordered_pipeline_is_rejected_before_any_pass_runs() -> None:
    log: list[str] = []
    seq = Sequential([
        recorder("test.Fold", log),
        recorder("test.Norm", log, phases=("ingestion",)),
        LambdaLift(),
    ])
    with pytest.raises(PhaseError) as info:
        seq(P(INGESTION))
    assert log == []  # nothing ran
    msg = str(info.value)
    assert msg.startswith("pass 'test.Fold' (#1 of pipeline 'sequential') would run in phase "
                          "ingestion but accepts only optimization; run 'Normalize, LambdaLift' "
                          "(the ingestion->optimization transition) before it")
    assert "'LambdaLift' is in the pipeline but comes later (#3)" in msg


def test_pass_after_the_transition_that_leaves_its_phase() -> None:
    log: list[str] = []
    seq = Sequential([Normalize(), LambdaLift(), recorder("test.Late", log, phases="ingestion")])
    with pytest.raises(PhaseError, match="it must come before pass 'LambdaLift' \\(#2\\), which "
                                         "moves the module from ingestion to optimization"):
        seq(P(INGESTION))
    assert log == []


def test_missing_requirement() -> None:
    log: list[str] = []
    with pytest.raises(PhaseError) as info:
        Sequential([LambdaLift(), recorder("test.After", log)])(P(INGESTION))
    assert "pass 'LambdaLift' (#1 of pipeline 'sequential') requires 'Normalize'" in str(info.value)
    assert "insert_before('LambdaLift', 'Normalize')" in str(info.value)
    assert log == []
    seq = Sequential([recorder("test.NeedsTag", log, requires=("test.Tag",)), Tag()])
    with pytest.raises(PhaseError, match="'test.Tag' comes later \\(#2\\)"):
        seq(P(BASIC))


def test_skipped_transition_is_named() -> None:
    log: list[str] = []
    seq = Sequential([Normalize(), LambdaLift(), recorder("test.Opt", log)])
    with PassContext(disabled=["LambdaLift"]):
        with pytest.raises(PhaseError, match="'LambdaLift' is in the pipeline \\(#2\\) but "
                                             "skipped: disabled by the pass context"):
            seq(P(INGESTION))
    assert log == []


def test_nested_pipelines_run_and_validate_as_one() -> None:
    log: list[str] = []
    seq = Sequential([
        Sequential([Normalize(), LambdaLift()], name="ingest"),
        Sequential([recorder("test.A", log), Sequential([recorder("test.B", log)])], name="opt"),
    ], name="all")
    plan = seq.validate("ingestion")
    assert [(s.position, s.info.name, s.phase) for s in plan] == [
        ("1.1", "Normalize", "ingestion"),
        ("1.2", "LambdaLift", "ingestion"),
        ("2.1", "test.A", "optimization"),
        ("2.2.1", "test.B", "optimization"),
    ]
    out = seq(P(INGESTION))
    assert out.phase == "optimization" and log == ["test.A", "test.B"]
    assert seq.names() == ["Normalize", "LambdaLift", "test.A", "test.B"]
    bad = Sequential([Sequential([recorder("test.A", log)], name="opt"), Normalize(),
                      LambdaLift()])
    with pytest.raises(PhaseError, match="pass 'test.A' \\(#1.1 of pipeline 'sequential'\\)"):
        bad(P(INGESTION))


def test_sequential_runs_passes_in_order() -> None:
    seq = Sequential([relu_to_abs, Tag(value="done")])
    out = seq(P(BASIC))
    assert_structural_equal(out, P(BASIC_ABS).with_attrs(tag="done"))


def test_text_form_round_trips() -> None:
    for text in [
        "Normalize,LambdaLift,test.ReluToAbs",
        "Normalize,LambdaLift,opt[test.ReluToAbs,test.Tag(value='a')]",
        "ingest[Normalize,LambdaLift],[test.Tag(value='x'),[test.ReluToAbs]]",
        "all[Normalize,LambdaLift]",
        "",
    ]:
        seq = parse_pipeline(text)
        assert seq.to_text() == text
        assert parse_pipeline(seq.to_text()) == seq
    built = Sequential([Normalize(), LambdaLift(), Sequential([Tag(value="v")], name="x")])
    assert parse_pipeline(built.to_text()) == built
    assert Sequential.parse(" Normalize , LambdaLift ").to_text() == "Normalize,LambdaLift"
    assert Sequential("Normalize,LambdaLift") == Sequential([Normalize(), LambdaLift()])


def test_text_form_errors_point_at_the_column() -> None:
    with pytest.raises(PipelineError, match="did you mean 'LambdaLift'") as info:
        parse_pipeline("Normalize,LambdaLfit")
    assert "column 11" in str(info.value)
    with pytest.raises(PipelineError, match="missing ']'"):
        parse_pipeline("opt[Normalize")
    with pytest.raises(PipelineError, match="must be written key=value"):
        parse_pipeline("test.Tag('x')")
    with pytest.raises(PipelineError, match="must be a Python literal"):
        parse_pipeline("test.Tag(value=os.system)")
    with pytest.raises(PipelineError, match="expected ','"):
        parse_pipeline("Normalize LambdaLift")


def test_pipeline_prints_phases_and_transitions() -> None:
    seq = Sequential([Sequential([Normalize(), LambdaLift()], name="ingest"), relu_to_abs],
                     name="demo")
    text = str(seq)
    assert text.splitlines()[0] == "pipeline 'demo': 3 passes"
    assert "1.2  LambdaLift" in text
    assert "[ingestion] -> optimization, requires Normalize" in text
    assert "test.ReluToAbs" in text and "[optimization]" in text
    assert repr(seq) == "Sequential.parse('demo[ingest[Normalize,LambdaLift],test.ReluToAbs]')"


def test_editing_by_name_returns_new_pipelines() -> None:
    seq = parse_pipeline("Normalize,LambdaLift,opt[test.ReluToAbs]")
    assert seq.insert_before("test.ReluToAbs", "test.Tag").to_text() == \
        "Normalize,LambdaLift,opt[test.Tag,test.ReluToAbs]"
    assert seq.insert_after("LambdaLift", Tag(value="z")).to_text() == \
        "Normalize,LambdaLift,test.Tag(value='z'),opt[test.ReluToAbs]"
    assert seq.remove("opt").to_text() == "Normalize,LambdaLift"
    assert seq.replace("opt/test.ReluToAbs", "test.Tag,test.Tag(value='b')").to_text() == \
        "Normalize,LambdaLift,opt[test.Tag,test.Tag(value='b')]"
    assert seq.remove(0).to_text() == "LambdaLift,opt[test.ReluToAbs]"
    assert seq.append("test.Tag").names()[-1] == "test.Tag"
    assert seq.to_text() == "Normalize,LambdaLift,opt[test.ReluToAbs]"  # unchanged
    assert seq["opt/test.ReluToAbs"] == relu_to_abs
    with pytest.raises(PipelineError, match="did you mean 'LambdaLift'"):
        seq.remove("LambdaLif")
    twice = parse_pipeline("a[test.Tag],b[test.Tag]")
    with pytest.raises(PipelineError, match="appears 2 times .*#1.1 \\(a/test.Tag\\)"):
        twice.remove("test.Tag")
    assert twice.remove("b/test.Tag").to_text() == "a[test.Tag],b[]"


def test_default_pipeline_shape_is_editable() -> None:
    seq = parse_pipeline("Normalize,LambdaLift")
    edited = seq.insert_after("LambdaLift", make_pass("test.ReluToAbs"))
    out = edited(P(INGESTION))
    assert out.phase == "optimization"
    assert "abs(" in out.script()
