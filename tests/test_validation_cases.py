"""The visible validation suite (validation/*.yaml): every case file loads without a schema
error, every case says where it came from, and a case the simulator refuses (an unknown GPU,
model or release) is listed in validation/README.md with its reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.engines.resolve import parse_engine_spec
from sim.errors import UserError
from sim.paths import REPO_DIR
from sim.scenarios.validate.cases import load_cases
from sim.specs.hardware import load_hardware
from sim.specs.model_config import load_model
from tests.conftest import config

VALIDATION_DIR = REPO_DIR / "validation"
CASE_FILES = sorted(VALIDATION_DIR.glob("*.yaml"))
README = VALIDATION_DIR / "README.md"


def refusal(case) -> str | None:
    """Why the simulator would refuse this case before running it, or None."""
    data = case.data
    try:
        parse_engine_spec(str(data["engine"]))
        load_hardware(str(data["hardware"]))
        load_model(case.config.model)
    except UserError as exc:
        return str(exc)
    return None


def test_there_are_case_files():
    assert CASE_FILES, f"no case files under {VALIDATION_DIR}"
    assert README.exists(), "validation/README.md (the provenance table) is missing"


@pytest.mark.parametrize("path", CASE_FILES, ids=lambda p: p.name)
def test_case_file_loads_without_schema_errors(path: Path):
    cases = load_cases([path], config())
    assert cases, f"{path.name}: no cases"
    errors = {c.id: c.error for c in cases if c.error}
    assert not errors, f"{path.name}: schema errors {errors}"
    for c in cases:
        assert c.data.get("source"), f"{c.id}: no `source:` (where the measurement comes from)"
        assert c.data.get("notes"), f"{c.id}: no `notes:` (what was run)"


@pytest.mark.parametrize("path", CASE_FILES, ids=lambda p: p.name)
def test_refused_cases_are_listed_with_their_reason(path: Path):
    readme = README.read_text(encoding="utf-8")
    assert path.name in readme, f"{path.name} is not in validation/README.md's provenance table"
    for c in load_cases([path], config()):
        why = refusal(c)
        if why:
            assert c.id in readme, f"{c.id} is refused ({why}) but not listed in the README"


def test_refusal_is_detected():
    """The check above can fail: a case on a GPU outside the catalogue is refused."""
    (c,) = load_cases([CASE_FILES[0]], config())[:1]
    moved = type(c)(c.id, c.file, {**c.data, "hardware": "no-such-gpu"}, c.config)
    assert refusal(moved)
