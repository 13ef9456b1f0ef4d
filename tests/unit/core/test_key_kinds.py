"""At-rest keyrings (bke.core.secrets.at_rest) and keys with one job each (bke.core.secrets.key_kinds):
the file format, a box that decrypts with every key and encrypts with one, the roles a rotation
moves keys through, which file each kind is read from, and a service's reload of a changed file."""
from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import pytest

from bke.core.secrets.at_rest import (
    DecryptError,
    Keyring,
    SecretBox,
    SecretKeyInvalid,
    SecretKeyMissing,
    blob_key_id,
    create_key_file,
    load_keyring,
    parse_keyring,
    write_keyring,
)
from bke.core.secrets.key_kinds import KIND_NAMES, KINDS, SERVICE_KEY_KINDS, KeyringFile, box_for, key_file_env, key_file_for

A, B, C = b"a" * 32, b"b" * 32, b"c" * 32
DOC = Path(__file__).resolve().parents[3] / "docs" / "keys.md"


def test_a_box_encrypts_with_its_current_key_and_decrypts_with_all() -> None:
    old, ring = SecretBox(A), SecretBox(B, [A])
    under_a = old.encrypt(b"secret", b"rec")
    assert ring.decrypt(under_a, b"rec") == b"secret"
    under_b = ring.encrypt(b"secret", b"rec")
    assert blob_key_id(under_b) == ring.key_id != old.key_id and blob_key_id(under_a) == old.key_id
    with pytest.raises(DecryptError, match=f"configured key is {old.key_id}"):
        old.decrypt(under_b, b"rec")  # negative control: the old key alone does not open the new blob
    assert ring.reencrypt(under_b, b"rec") is None  # already under the current key: left alone
    again = ring.reencrypt(under_a, b"rec")
    assert again is not None and blob_key_id(again) == ring.key_id and ring.decrypt(again, b"rec") == b"secret"
    with pytest.raises(DecryptError):
        ring.reencrypt(under_a, b"another record")  # the aad still binds it
    assert ring.key_ids == (ring.key_id, old.key_id)
    assert A.hex() not in repr(ring) and "decrypts=" + old.key_id in repr(ring)
    assert blob_key_id(b"junk") is None


def test_the_file_forms_and_their_errors(tmp_path: Path) -> None:
    assert parse_keyring(A) == Keyring(A)  # 32 raw bytes
    assert parse_keyring(base64.b64encode(A) + b"\n") == Keyring(A)  # base64 on one line
    text = f"# comment\n\ncurrent {base64.b64encode(B).decode()}\nnext {base64.b64encode(C).decode()}\n" \
           f"previous {base64.b64encode(A).decode()}\n"
    assert parse_keyring(text.encode()) == Keyring(B, C, (A,))
    for bad, why in ((f"current {base64.b64encode(A).decode()}\ncurrent {base64.b64encode(B).decode()}\n",
                      "exactly one 'current'"),
                     (f"previous {base64.b64encode(A).decode()}\nnext {base64.b64encode(B).decode()}\n",
                      "exactly one 'current'"),
                     (f"current {base64.b64encode(A).decode()}\nold {base64.b64encode(B).decode()}\n", "line 2"),
                     (f"current {base64.b64encode(A[:31]).decode()}\n", "line 1")):
        with pytest.raises(SecretKeyInvalid, match=why) as err:
            parse_keyring(bad.encode(), "f.key")
        assert base64.b64encode(A).decode() not in str(err.value)


def test_rotation_moves_keys_through_their_roles(tmp_path: Path) -> None:
    ring = Keyring(A)
    staged = ring.staged(B)
    assert staged.box().key_id == SecretBox(A).key_id  # staged: decrypts, does not encrypt yet
    assert SecretBox(B).key_id in staged.box().key_ids
    with pytest.raises(ValueError, match="staged already"):
        staged.staged(C)
    rotated = staged.rotated(C)  # the staged key, not the new one
    assert rotated == Keyring(B, None, (A,))
    assert ring.rotated(C) == Keyring(C, None, (A,))  # nothing staged: the given key
    assert rotated.retired() == Keyring(B)
    assert [role for role, _ in Keyring(B, C, (A,)).key_ids] == ["current", "next", "previous"]
    path = tmp_path / "pki.key"
    write_keyring(path, Keyring(B, C, (A,)), "pki")
    assert load_keyring(path) == Keyring(B, C, (A,)) and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["pki.key"]  # no temporary file left
    assert "pki" in path.read_text().splitlines()[0]


def test_each_kind_reads_its_own_file_else_the_shared_one(tmp_path: Path) -> None:
    shared, own = tmp_path / "secret.key", tmp_path / "pki.key"
    create_key_file(shared)
    create_key_file(own)
    env = {"BKE_SECRET_KEY_FILE": str(shared), "BKE_KEY_FILE_PKI": str(own)}
    assert key_file_for("pki", env) == own and key_file_for("signing", env) == shared
    assert box_for("pki", env).key_id != box_for("signing", env).key_id
    with pytest.raises(SecretKeyMissing, match="neither BKE_KEY_FILE_API nor BKE_SECRET_KEY_FILE"):
        key_file_for("api", {})
    with pytest.raises(ValueError, match="unknown key kind"):
        key_file_env("everything")
    assert [key_file_env(k) for k in KIND_NAMES] == [
        "BKE_KEY_FILE_PKI", "BKE_KEY_FILE_API", "BKE_KEY_FILE_SIGNING", "BKE_KEY_FILE_SNAPSHOT",
        "BKE_KEY_FILE_AUTHORITY", "BKE_KEY_FILE_BACKUP", "BKE_KEY_FILE_PLAN", "BKE_KEY_FILE_RENDER"]


def test_each_service_is_given_only_the_kinds_it_uses() -> None:
    assert SERVICE_KEY_KINDS == {"certs": ("pki", "api"), "dispatcher": ("api", "signing"), "planner": ("plan",),
                                 "renderer": ("render",), "upgrader": ("api", "snapshot", "plan")}
    # a record writer's key in its writers' hands only (bke.core.secrets.record_signing)
    assert [s for s, kinds in SERVICE_KEY_KINDS.items() if "plan" in kinds] == ["planner", "upgrader"]
    assert [s for s, kinds in SERVICE_KEY_KINDS.items() if "render" in kinds] == ["renderer"]
    # nothing that opens a CA key outside certs; no snapshot key in the dispatcher (public half only)
    assert [s for s, kinds in SERVICE_KEY_KINDS.items() if "pki" in kinds] == ["certs"]
    assert "snapshot" not in SERVICE_KEY_KINDS["dispatcher"]
    assert not {"authority", "backup"} & {k for kinds in SERVICE_KEY_KINDS.values() for k in kinds}


def test_the_docs_name_every_kind_its_variable_and_its_services() -> None:
    doc = DOC.read_text()
    for kind in KINDS:
        (row,) = [line for line in doc.splitlines() if line.startswith(f"| `{kind.name}` |")]
        holders = row.split("|")[3]
        assert all(svc in holders for svc in kind.services), (kind.name, holders)
        assert key_file_env(kind.name) in doc


def test_a_service_reads_a_changed_file_again_and_keeps_its_keys_over_a_bad_one(tmp_path: Path) -> None:
    path = tmp_path / "pki.key"
    write_keyring(path, Keyring(A))
    keys = KeyringFile(path)
    blob = keys.box().encrypt(b"x")
    write_keyring(path, Keyring(A).rotated(B))
    assert keys.box().key_id == SecretBox(B).key_id and keys.box().decrypt(blob) == b"x"
    path.write_text("current not-a-key\n")  # mid-edit: the keys in use stay
    assert keys.box().key_id == SecretBox(B).key_id
    write_keyring(path, Keyring(B))  # retired: A no longer opens what it made
    with pytest.raises(DecryptError):
        keys.box().decrypt(blob)
    with pytest.raises(SecretKeyMissing):
        KeyringFile(tmp_path / "none.key")  # a missing file fails at start
    os.unlink(path)
    assert keys.box().key_id == SecretBox(B).key_id  # a file gone while running: the keys in use stay
