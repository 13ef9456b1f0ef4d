"""docs/asyncapi.yaml is read by the official AsyncAPI parser (@asyncapi/parser 3.x, pinned in
tools/asyncapi-check/package-lock.json) with no error and no warning, and what the generator
writes for a tagged union accepts and refuses the same steps as the pydantic model.

The parser needs `node` and the installed modules (`npm ci --ignore-scripts` in
tools/asyncapi-check; .ci/run does it). Without them the parser test skips with the reason,
unless BKE_REQUIRE_REAL_CHECKS=1 (.ci/run): then it fails.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from pydantic import ValidationError

from bke.contracts.agent import AgentCommand
from bke.contracts.agent_steps import RunProgram, WriteFile

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "tools" / "asyncapi-check"
DOCUMENT = ROOT / "docs" / "asyncapi.yaml"
REQUIRED = os.environ.get("BKE_REQUIRE_REAL_CHECKS") == "1"
# Findings the parser may report and why they are accepted. Only "information" severity: the
# document stays on AsyncAPI 3.0.0, the version most tools read; 3.1.0 adds nothing it needs.
ACCEPTED_INFORMATION = {"asyncapi-latest-version"}


def _unavailable(reason: str) -> None:
    if REQUIRED:
        pytest.fail(f"{reason} (BKE_REQUIRE_REAL_CHECKS=1)")
    pytest.skip(reason)


def _parse(document: Path) -> tuple[int, list[dict[str, Any]], dict[str, Any]]:
    node = shutil.which("node")
    if node is None:
        _unavailable("node is not installed: the AsyncAPI parser is a node package")
    if not (CHECK / "node_modules" / "@asyncapi" / "parser").is_dir():
        _unavailable(f"the parser is not installed: run `npm ci --ignore-scripts` in {CHECK} (.ci/run does it)")
    assert node is not None
    done = subprocess.run([node, "check.js", str(document)], cwd=CHECK, capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, 1), done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    return done.returncode, [x for x in lines if "severity" in x], lines[-1]


def test_the_official_parser_reads_the_document_without_errors_or_warnings() -> None:
    status, findings, summary = _parse(DOCUMENT)
    unexpected = [f for f in findings if not (f["severity"] == "information" and f["code"] in ACCEPTED_INFORMATION)]
    assert unexpected == [], "\n".join(f"{f['severity']} {f['code']} at {f['path']}: {f['message']}" for f in unexpected)
    assert status == 0 and summary["parsed"] is True and summary["summary"]["error"] == 0


def test_the_parser_check_fails_on_an_openapi_discriminator(tmp_path: Path) -> None:
    """The check itself can fail: the document as pydantic writes it (before our rewrite) is refused."""
    doc = yaml.safe_load(DOCUMENT.read_text())
    items = doc["components"]["schemas"]["AgentCommand"]["properties"]["steps"]["items"]
    items["discriminator"] = {"propertyName": "type", "mapping": {"write_file": "#/components/schemas/WriteFile"}}
    bad = tmp_path / "asyncapi.yaml"
    bad.write_text(yaml.safe_dump(doc, sort_keys=False))
    status, findings, summary = _parse(bad)
    assert status == 1
    assert any(f["severity"] == "error" and f["path"].endswith("steps.items.discriminator") for f in findings), findings
    assert summary["summary"]["error"] >= 1 and summary["parsed"] is False


def _agent_command_validator() -> jsonschema.Draft7Validator:
    doc = yaml.safe_load(DOCUMENT.read_text())
    root = {"$ref": "#/components/schemas/AgentCommand", "components": doc["components"]}
    return jsonschema.Draft7Validator(root)


def _command(steps: list[dict[str, Any]]) -> dict[str, Any]:
    cmd = AgentCommand(command_id="c/p/n/0", cluster="c", node="n", phase="p", issued_at="t", steps=[])
    return {**cmd.model_dump(mode="json", by_alias=True), "steps": steps}


def test_the_documented_steps_schema_agrees_with_the_model() -> None:
    validator = _agent_command_validator()
    write = WriteFile(id="w", path="/etc/x", content_b64="eA==", sha256="0" * 64).model_dump(mode="json", by_alias=True)
    run = RunProgram(id="r", argv=["true"]).model_dump(mode="json", by_alias=True)
    good = _command([write, run])
    assert list(validator.iter_errors(good)) == []
    AgentCommand.model_validate(good)
    # a step without its tag, or with a tag no step has, is refused by both
    for bad_step in ({k: v for k, v in run.items() if k != "type"}, {**run, "type": "reboot"}):
        bad = _command([bad_step])
        assert list(validator.iter_errors(bad)) != [], bad_step
        with pytest.raises(ValidationError):
            AgentCommand.model_validate(bad)
