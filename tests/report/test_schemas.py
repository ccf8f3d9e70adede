"""The checked-in JSON Schemas are what the models produce now, and they accept real records."""

from __future__ import annotations

import json

import jsonschema
import pytest

from imagekit.errors import InvalidInput
from imagekit.report import build_report, check_promotable
from imagekit.schemas import export as schemas


def test_checked_in_schemas_are_current() -> None:
    problems = schemas.check()
    assert problems == [], "run `imagekit schemas export` and commit: " + "; ".join(problems)


def test_every_listed_model_has_a_schema_file() -> None:
    names = {schemas.file_name(p) for p in schemas.MODELS}
    on_disk = {p.name for p in schemas.SCHEMA_DIR.glob("*.json")}
    assert names == on_disk
    for path in schemas.MODELS:
        schema = json.loads((schemas.SCHEMA_DIR / schemas.file_name(path)).read_text())
        jsonschema.Draft202012Validator.check_schema(schema)


def test_check_notices_a_stale_schema(tmp_path) -> None:
    schemas.export(tmp_path)
    assert schemas.check(tmp_path) == []
    target = tmp_path / "CheckResult.json"
    target.write_text(target.read_text().replace('"detail"', '"detailz"'))
    (tmp_path / "Gone.json").write_text("{}")
    assert schemas.check(tmp_path) == ["CheckResult.json: differs from the model",
                                       "Gone.json: no model lists it"]
    schemas.export(tmp_path)
    assert schemas.check(tmp_path) == []


def test_unknown_model_path_is_an_error(tmp_path) -> None:
    with pytest.raises(InvalidInput):
        schemas.export(tmp_path, models=("imagekit.nowhere.Model",))


def _validator(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(
        json.loads((schemas.SCHEMA_DIR / name).read_text()))


def test_records_validate_against_their_schemas(rehearsal) -> None:
    store = rehearsal.store
    for record in store.attempts(rehearsal.digest):
        _validator("AttemptRecord.json").validate(
            json.loads((store.path_of(record) / "attempt.json").read_text()))
    report = build_report(store, rehearsal.digest)
    _validator("ImageReport.json").validate(json.loads(report.model_dump_json()))
    decision = check_promotable(store, rehearsal.digest)
    _validator("GateDecision.json").validate(json.loads(decision.model_dump_json()))
    bad = json.loads(report.model_dump_json())
    bad["status"] = "MAYBE"
    assert list(_validator("ImageReport.json").iter_errors(bad))


def test_every_evidence_kind_model_is_exported() -> None:
    """`imagekit schemas export|check` covers each kind's result model."""
    from imagekit.evidence import registered
    from imagekit.schemas.export import MODELS

    listed = set(MODELS)
    missing = [f"{m.__module__}.{m.__qualname__}" for m in registered().values()
               if f"{m.__module__}.{m.__qualname__}" not in listed]
    assert not missing, missing
