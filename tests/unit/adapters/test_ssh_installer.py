"""The one-line installer is the step table as one POSIX shell line, holding nothing but the node's own values."""
from __future__ import annotations

import shlex
import stat
import subprocess
from pathlib import Path

import pytest
from bke.adapters.ssh import (
    AgentFiles,
    BootstrapParams,
    LocalFile,
    bootstrap_steps,
    installer_files,
    installer_line,
)

NATS = "nats://agent:s3cret@10.0.0.9:4222"


def params(**kw) -> BootstrapParams:
    base = {"cluster": "prod", "node": "n1", "nats_url": NATS,
            "wheel": Path("/home/op/secret-dir/bke-0.1.0-py3-none-any.whl"),
            "requirements": Path("/home/op/secret-dir/requirements.txt"), "username": "deploy"}
    return BootstrapParams(**{**base, **kw})


def _segments(line: str) -> list[list[str]]:
    """Split the line into its commands at `&&`, as a POSIX shell would tokenise it."""
    lex = shlex.shlex(line, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    tokens = list(lex)
    assert tokens[0] == "(" and tokens[-1] == ")"
    out: list[list[str]] = [[]]
    for tok in tokens[1:-1]:
        if tok == "&&":
            out.append([])
        else:
            out[-1].append(tok)
    return out


def test_one_line_no_heredoc_no_download():
    line = installer_line(params())
    assert "\n" not in line and "<<" not in line
    assert "curl" not in line and "wget" not in line and "| sh" not in line
    subprocess.run(["sh", "-n", "-c", line], check=True)  # valid POSIX shell syntax


def test_line_is_the_step_table_in_order_without_sudo():
    segs = _segments(installer_line(params()))
    assert segs[0] == ["umask", "077"]
    expected: list[list[str]] = []
    for step in bootstrap_steps(params(username="root")):
        expected.append(list(step.argv))
        for u in step.uploads:
            if isinstance(u.source, LocalFile):
                expected.append(["install", "-m", "0600", "--", u.source.path.name, u.remote_path])
            else:
                expected.append(["printf", "%s\\n", *u.source.text.splitlines(), ">", u.remote_path])
                expected.append(["chmod", "0600", u.remote_path])
    assert segs[1:] == expected
    assert not any(seg[0] == "sudo" for seg in segs)


def test_only_the_nodes_own_values_and_no_local_paths():
    line = installer_line(params())
    assert NATS in line and "BKE_AGENT_NODE=n1" in line and "BKE_AGENT_CLUSTER=prod" in line
    assert "secret-dir" not in line and "/home/op" not in line  # local paths stay local
    assert installer_files(params()) == ("bke-0.1.0-py3-none-any.whl", "requirements.txt")


def test_generated_files_come_out_byte_for_byte(tmp_path):
    """Run just the printf parts with a real shell: the unit and env files equal the rendered ones."""
    segs = _segments(installer_line(params()))
    writes = [s for s in segs if s[0] in ("printf", "chmod")]
    script = "umask 077 && mkdir -p .bke-bootstrap && " + " && ".join(
        shlex.join(s[:-2]) + " > " + shlex.quote(s[-1]) if s[0] == "printf" else shlex.join(s) for s in writes)
    subprocess.run(["sh", "-c", script], cwd=tmp_path, check=True)
    files = AgentFiles.for_node("prod", "n1", NATS)
    assert (tmp_path / ".bke-bootstrap/bke-agent.service").read_text() == files.unit
    assert (tmp_path / ".bke-bootstrap/env").read_text() == files.env
    assert stat.S_IMODE((tmp_path / ".bke-bootstrap/env").stat().st_mode) == 0o600


def test_a_line_break_in_a_free_text_value_is_refused():
    with pytest.raises(ValueError, match="line break"):
        installer_line(params(python="/opt/py\nthon3"))
