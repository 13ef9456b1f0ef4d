"""At-rest encryption (AES-256-GCM, operator key file) and sealing to one agent (X25519)."""
from __future__ import annotations

import base64
import os
import pickle
import stat
from pathlib import Path

import pytest

from bke.core.secrets import (
    DecryptError,
    NotForThisKey,
    SealedDataError,
    SecretBox,
    SecretKeyInvalid,
    SecretKeyMissing,
    agent_key_id,
    box_for,
    create_key_file,
    generate_agent_key,
    load_secret_box,
    open_sealed,
    private_key_from_pem,
    private_key_to_pem,
    public_key_from_pem,
    public_key_from_raw,
    public_key_to_pem,
    public_key_to_raw,
    seal,
)

SECRET = b"-----BEGIN PRIVATE KEY-----\nnot really\n-----END PRIVATE KEY-----\n"


def test_box_round_trip_with_bound_record() -> None:
    box = SecretBox(os.urandom(32))
    blob = box.encrypt(SECRET, b"c1/ca")
    assert SECRET not in blob and b"PRIVATE KEY" not in blob
    assert box.decrypt(blob, b"c1/ca") == SECRET
    assert box.encrypt(SECRET, b"c1/ca") != blob  # fresh nonce each time
    with pytest.raises(DecryptError, match="another record"):
        box.decrypt(blob, b"c1/etcd-ca")
    tampered = blob[:-1] + bytes([blob[-1] ^ 1])
    with pytest.raises(DecryptError):
        box.decrypt(tampered, b"c1/ca")


def test_wrong_key_says_so_without_leaking_it() -> None:
    key = os.urandom(32)
    blob = SecretBox(key).encrypt(SECRET)
    other = SecretBox(os.urandom(32))
    with pytest.raises(DecryptError, match=f"configured key is {other.key_id}") as err:
        other.decrypt(blob)
    assert key.hex() not in str(err.value) and base64.b64encode(key).decode() not in str(err.value)
    assert key.hex() not in repr(other) and repr(SecretBox(key)) == f"SecretBox(key_id={SecretBox(key).key_id})"
    with pytest.raises(TypeError):
        pickle.dumps(SecretBox(key))


def test_key_file_created_0600_and_loaded(tmp_path: Path) -> None:
    path = tmp_path / "secret.key"
    box = create_key_file(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_secret_box(path).key_id == box.key_id
    assert box_for("pki", {"BKE_SECRET_KEY_FILE": str(path)}).decrypt(box.encrypt(b"x")) == b"x"
    with pytest.raises(FileExistsError):
        create_key_file(path)  # never overwrite an operator's key
    raw = tmp_path / "raw.key"
    raw.write_bytes(os.urandom(32))
    assert load_secret_box(raw).key_id != box.key_id


def test_missing_or_bad_key_file_is_a_clear_typed_error(tmp_path: Path) -> None:
    with pytest.raises(SecretKeyMissing, match="neither BKE_KEY_FILE_PKI nor BKE_SECRET_KEY_FILE is set"):
        box_for("pki", {})
    with pytest.raises(SecretKeyMissing, match="does not exist"):
        box_for("pki", {"BKE_SECRET_KEY_FILE": str(tmp_path / "nope")})
    bad = tmp_path / "bad.key"
    bad.write_text("c2hvcnQ=\n")  # base64 of 5 bytes
    with pytest.raises(SecretKeyInvalid, match="32 raw bytes") as err:
        load_secret_box(bad)
    assert "c2hvcnQ" not in str(err.value)


def test_seal_opens_only_for_its_agent() -> None:
    agent, other = generate_agent_key(), generate_agent_key()
    blob = seal(agent.public_key(), SECRET)
    assert SECRET not in blob
    assert open_sealed(agent, blob) == SECRET
    assert bytes.fromhex(agent_key_id(agent.public_key())) in blob  # the recipient id travels (as AAD)
    with pytest.raises(NotForThisKey, match=agent_key_id(agent.public_key())):
        open_sealed(other, blob)
    for i in (6, 30, 60, len(blob) - 1):  # key id, ephemeral key, nonce, tag: all authenticated
        bent = bytearray(blob)
        bent[i] ^= 1
        with pytest.raises(SealedDataError):
            open_sealed(agent, bytes(bent))
    with pytest.raises(SealedDataError):
        open_sealed(agent, b"junk")


def test_agent_key_serialisation_round_trips() -> None:
    key = generate_agent_key()
    again = private_key_from_pem(private_key_to_pem(key))
    pub = key.public_key()
    assert public_key_to_raw(again.public_key()) == public_key_to_raw(pub)
    assert public_key_to_raw(public_key_from_raw(public_key_to_raw(pub))) == public_key_to_raw(pub)
    assert public_key_to_raw(public_key_from_pem(public_key_to_pem(pub))) == public_key_to_raw(pub)
    assert open_sealed(again, seal(public_key_from_pem(public_key_to_pem(pub)), b"hi")) == b"hi"
    with pytest.raises(SealedDataError):
        public_key_from_raw(b"\x00" * 31)
