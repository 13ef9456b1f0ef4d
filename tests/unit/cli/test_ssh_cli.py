"""`bke agent bootstrap` without a network: dry run, installer lines, and every bad input exits 2."""
from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from bke_cli.main import main

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "seed-3m1w.yaml"
NATS = "nats://agent:s3cret@10.0.0.9:4222"
FP = "SHA256:" + "A" * 43


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["agent", "bootstrap", str(EXAMPLE), "--nats", NATS, *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_dry_run_prints_every_command_for_the_selected_nodes(capsys):
    code, out, err = run(capsys, "--dry-run", "--nodes", "master2,node1")
    assert code == 0, err
    assert "# node master2: root@127.0.10.2:22" in out and "# node node1: root@127.0.10.4:22" in out
    assert "master1" not in out
    assert out.count("[init] env BKE_AGENT_BACKEND=host BKE_AGENT_CLUSTER=seed BKE_AGENT_NODE=") == 2
    assert "s3cret" not in out and "ERROR" not in err


def test_print_installer_one_comment_and_one_line_per_node(capsys):
    code, out, _ = run(capsys, "--print-installer", "--nodes", "node1")
    assert code == 0
    comment, line = out.splitlines()
    assert comment.startswith("# node node1 (cluster seed): as root") and "requirements-agent.txt" in comment  # the agent's own set
    assert line.startswith("(umask 077 && ") and "BKE_AGENT_NODE=node1" in line and "master1" not in line
    assert shlex.split(line)  # balanced quoting


@pytest.mark.parametrize(("args", "message"), [
    (["--dry-run", "--nodes", "master1,ghost"], "--nodes: not in the spec: ghost"),
    (["--dry-run", "--print-installer"], "exclude each other"),
    ([], "refusing to connect without verifying host keys"),
    (["--host-key-fingerprint", "SHA256:AAAA"], "not a SHA-256 digest"),
    (["--host-key-fingerprint", FP, "--known-hosts", "/nonexistent"], "not both"),
    (["--known-hosts", "/nonexistent/known_hosts"], "/nonexistent/known_hosts"),
    (["--host-key-fingerprint", f"master1={FP}"], "no --host-key-fingerprint for node master2"),
    (["--dry-run", "--wheel", "/nonexistent/bke-0.1.0-py3-none-any.whl"], "no such file"),
    (["--identity", "/nonexistent/id_ed25519", "--host-key-fingerprint", FP], "not a readable private key"),
    (["--dry-run", "--python", "bundled"], "--python bundled needs the bundled CPython: give --python-from"),
    (["--dry-run", "--python-from", "/nonexistent/bundle"], "--python-from: /nonexistent/bundle: no python/"),
    # the command-signing key: pinned, or the operator says to trust the bus's answer
    (["--host-key-fingerprint", FP], "refusing to give the agents a command-signing key the bus answered, unverified"),
    (["--host-key-fingerprint", FP, "--command-key-fingerprint", "SHA256:AAAA"], "is not a SHA-256 fingerprint"),
    (["--host-key-fingerprint", FP, "--command-key-fingerprint", "bke-command-ed25519 !!"], "not a base64 Ed25519"),
    (["--host-key-fingerprint", FP, "--command-key-file", "/nonexistent/command-key.pub"],
     "--command-key-file /nonexistent/command-key.pub: No such file"),
    (["--host-key-fingerprint", FP, "--command-key-fingerprint", FP, "--command-key-unsafe-skip-verification"],
     "give one of --command-key-fingerprint, --command-key-unsafe-skip-verification, not both"),
])
def test_bad_input_exits_2_with_an_error_line_and_contacts_nothing(capsys, args, message):
    code, _, err = run(capsys, *args)
    assert code == 2
    errors = [line for line in err.splitlines() if line.startswith("ERROR ")]
    assert any(message in line for line in errors), err
    assert "s3cret" not in err


def test_bad_nats_url_exits_2_without_echoing_it(capsys):
    code = main(["agent", "bootstrap", str(EXAMPLE), "--nats", "nats://a b@h", "--dry-run"])
    _, err = capsys.readouterr()
    assert code == 2 and "ERROR --nats:" in err and "a b@h" not in err


def test_dry_run_with_the_bundle_uploads_the_archive_of_each_nodes_arch(capsys, tmp_path):
    import hashlib

    from bke.core.artefacts import agent_artefacts
    art = agent_artefacts("amd64")[0]  # the example's nodes are amd64 (the spec's default arch)
    (tmp_path / art.path).parent.mkdir(parents=True)
    (tmp_path / art.path).write_bytes(b"archive")
    (tmp_path / f"{art.path}.sha256").write_text(hashlib.sha256(b"archive").hexdigest() + "\n")
    code, out, err = run(capsys, "--dry-run", "--nodes", "node1", "--python-from", str(tmp_path))
    assert code == 0, err
    assert f"upload .bke-bootstrap/python.tar.gz (mode 0600) from {tmp_path / art.path}" in out
    assert "[choose-python] sh -c" in out and hashlib.sha256(b"archive").hexdigest() in out
    code, out, _ = run(capsys, "--dry-run", "--nodes", "node1", "--python-from", str(tmp_path), "--python", "system")
    assert code == 0 and "python.tar.gz" not in out and "[check-python] python3 -c" in out
