"""Output schemas written from report models (server/output_schema.py): a report the model accepts is
accepted by its published schema, and the schema still rejects what the model rejects at its top level."""

import jsonschema
import pytest

from server.output_schema import output_schema
from tools.probes import GradNormReport, ModuleGrad, ParamGrad
from tools.report import Evidence, Finding
from tools.triage import NextStep, TriageReport


def _grad_report() -> GradNormReport:
    return GradNormReport(
        findings=[Finding(failure_mode="exploding_gradients", confidence=0.8, summary="norm 1e4",
                          evidence=[Evidence(what="global grad norm", value=float("inf"), source="probe"),
                                    Evidence(what="steps", value=3), Evidence(what="clipped", value=False)])],
        step=3, global_grad_norm=float("nan"), loss_history=[1.0, float("inf"), None],
        params=[ParamGrad(name="fc.weight", shape=[2, 3], grad_norm=float("-inf"))],
        modules=[ModuleGrad(name="fc", type="Linear")], optimizer="AdamW", clipped=None)


def test_a_report_with_non_finite_numbers_and_nested_records_validates():
    rep = _grad_report()
    schema = output_schema(GradNormReport)
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(rep.model_dump(mode="json"), schema)


def test_findings_and_next_steps_are_spelled_out_and_checked():
    schema = output_schema(TriageReport)
    assert set(schema["$defs"]) >= {"Finding", "Evidence", "NextStep"}
    good = TriageReport(healthy=False, steps=[], budget_s=10, elapsed_s=1,
                        next_steps=[NextStep(tool="nan_hook_run", args={"target": "t.py:f"}, why="NaN at 170")],
                        findings=[Finding(failure_mode="nan_inf", confidence=0.9, summary="x")])
    jsonschema.validate(good.model_dump(mode="json"), schema)
    bad = good.model_dump(mode="json")
    bad["findings"][0].pop("summary")  # a finding without its summary
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**good.model_dump(mode="json"), "healthy": "yes"}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**good.model_dump(mode="json"), "next_steps": [{"why": "no tool"}]}, schema)


def test_other_nested_records_are_objects_one_level_deep():
    schema = output_schema(GradNormReport)
    assert schema["properties"]["params"] == {"type": "array", "items": {"type": "object"}}
    assert schema["properties"]["global_grad_norm"] == {"$ref": "#/$defs/Num"}
    assert schema["$defs"]["Num"] == {"type": ["number", "string", "null"]}
    assert "ParamGrad" not in schema["$defs"]
