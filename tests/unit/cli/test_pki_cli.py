"""`bke certs ...` against a directory: exit codes 0/1/2, ERROR lines, what is printed."""
from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tests.unit.core.pki.test_pki_support import SPLIT, split_plan

from bke.core.pki.instances import node_file_refs
from bke_cli.main import main


def _bke(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def _no_operator_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BKE_SECRET_KEY_FILE", raising=False)


def test_issue_creates_the_key_file_says_so_and_reuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "pki"
    code, stdout, stderr = _bke(capsys, "certs", "issue", str(SPLIT), "--out", str(out))
    assert code == 0, stderr
    assert "65 issued, 0 reissued, 0 reused" in stdout
    key = out / ".bke" / "secret.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert f"created the at-rest key {key}" in stderr and "BEGIN" not in stderr
    code, stdout, stderr = _bke(capsys, "certs", "issue", str(SPLIT), "--out", str(out))
    assert code == 0 and "0 issued, 0 reissued, 65 reused" in stdout
    assert "created the at-rest key" not in stderr


def test_issue_with_operator_key_leaves_none_in_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    keyfile = tmp_path / "op.key"
    keyfile.write_bytes(b"\x01" * 32)
    monkeypatch.setenv("BKE_SECRET_KEY_FILE", str(keyfile))
    code, _, stderr = _bke(capsys, "certs", "issue", str(SPLIT), "--out", str(tmp_path / "pki"))
    assert code == 0, stderr
    assert not (tmp_path / "pki" / ".bke" / "secret.key").exists()
    monkeypatch.setenv("BKE_SECRET_KEY_FILE", str(tmp_path / "missing.key"))
    code, _, stderr = _bke(capsys, "certs", "renew", "all", "--dir", str(tmp_path / "pki"))
    assert code == 2 and stderr.startswith("ERROR ") and "missing.key" in stderr


def test_issue_refuses_a_foreign_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "stuff.txt").write_text("x")
    code, _, stderr = _bke(capsys, "certs", "issue", str(SPLIT), "--out", str(tmp_path))
    assert code == 2 and "ERROR " in stderr and "not empty" in stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stuff.txt"]


def test_files_lists_the_table_placement(capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, _ = _bke(capsys, "certs", "files", str(SPLIT))
    assert code == 0
    expected = [f"{h}\t{r.mode:04o}\t{r.path}\t{r.instance}" for h, refs in node_file_refs(split_plan()).items() for r in refs]
    assert stdout.splitlines() == expected


def test_check_expiration_and_renew(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "pki"
    assert _bke(capsys, "certs", "issue", str(SPLIT), "--out", str(out))[0] == 0
    code, stdout, _ = _bke(capsys, "certs", "check-expiration", "--dir", str(out))
    assert code == 0
    lines = stdout.splitlines()
    assert lines[0].split() == ["CERTIFICATE", "EXPIRES", "RESIDUAL", "TIME", "CERTIFICATE", "AUTHORITY", "NODES"]
    row = next(line for line in lines if line.startswith("etcd-events-peer@events2 "))
    assert " 364d " in row and "etcd-events-peer-ca" in row and row.endswith("events2")
    ca_row = next(line for line in lines if line.startswith("ca "))
    assert " 9y " in ca_row and "m1,m2,m3 +15" in ca_row
    old = (out / "m2/etc/kubernetes/pki/apiserver.crt").read_bytes()
    old_ca = (out / "m2/etc/kubernetes/pki/ca.crt").read_bytes()
    code, stdout, _ = _bke(capsys, "certs", "renew", "apiserver", "--dir", str(out))
    assert code == 0 and stdout.count("renewed apiserver@") == 3 and "deliver the new files to: m1, m2, m3" in stdout
    assert (out / "m2/etc/kubernetes/pki/apiserver.crt").read_bytes() != old
    assert (out / "m2/etc/kubernetes/pki/ca.crt").read_bytes() == old_ca


@pytest.mark.parametrize(("args", "message"), [
    (["certs", "renew", "ca"], "CA rotation is not done by renew"),
    (["certs", "renew", "etcd-ca"], "CA rotation is not done by renew"),
    (["certs", "renew", "nope"], "no certificate 'nope'"),
    (["certs", "check-expiration"], "exactly one of --dir DIR and --cluster NAME"),
])
def test_refusals_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    out = tmp_path / "pki"
    assert _bke(capsys, "certs", "issue", str(SPLIT), "--out", str(out))[0] == 0
    extra = ["--dir", str(out)] if args[1] == "renew" else []
    code, _, stderr = _bke(capsys, *args, *extra)
    assert code == 2, stderr
    assert any(line.startswith("ERROR ") and message in line for line in stderr.splitlines()), stderr


def test_dir_and_cluster_together_or_missing_redis_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BKE_NATS_URL", raising=False)
    code, _, stderr = _bke(capsys, "certs", "check-expiration", "--dir", str(tmp_path), "--cluster", "big")
    assert code == 2 and "exactly one" in stderr
    code, _, stderr = _bke(capsys, "certs", "check-expiration", "--cluster", "big")
    assert code == 2 and "--cluster needs --workdir DIR (a lab) or --nats URL" in stderr
    code, _, stderr = _bke(capsys, "certs", "check-expiration", "--dir", str(tmp_path / "empty"))
    assert code == 2 and "no BKE PKI here" in stderr


def test_break_glass_kubeconfig_is_on_no_node_and_written_0600_on_request(tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    import base64

    import yaml
    from cryptography import x509

    out = tmp_path / "pki"
    assert _bke(capsys, "certs", "issue", str(SPLIT), "--out", str(out))[0] == 0
    assert not list(out.glob("*/etc/kubernetes/super-admin.conf"))  # no node holds it
    assert (out / ".bke" / "store" / "super-admin.conf.key.enc").exists()  # the key only encrypted
    conf = tmp_path / "break-glass.conf"
    code, stdout, stderr = _bke(capsys, "certs", "kubeconfig", "--dir", str(out), "--out", str(conf))
    assert code == 0, stderr
    assert stat.S_IMODE(conf.stat().st_mode) == 0o600 and "BEGIN" not in stdout + stderr
    doc = yaml.safe_load(conf.read_text())
    cert = x509.load_pem_x509_certificate(base64.b64decode(doc["users"][0]["user"]["client-certificate-data"]))
    subject = {a.oid._name: a.value for a in cert.subject}
    assert subject == {"commonName": "kubernetes-super-admin", "organizationName": "system:masters"}
    assert doc["clusters"][0]["cluster"]["server"] == f"https://{split_plan().control_plane_endpoint}"
    code, _, stderr = _bke(capsys, "certs", "kubeconfig", "admin.conf", "--dir", str(out), "--out", str(conf))
    assert code == 2 and "not a cluster-wide kubeconfig" in stderr
