"""Record signatures (bke.core.secrets.record_signing): a plan or a node's rendered files verify
only as their writer signed them, for the cluster and binding they were signed for."""
from __future__ import annotations

import pytest

from bke.core.secrets.at_rest import DecryptError, SecretBox, new_key
from bke.core.secrets.record_signing import (RecordKeyError, RecordSignatureError, RecordSigner, RecordVerifier,
                                             join_stored, record_message, split_stored, stored_public)

PLAN = b'{"cluster": "a", "nodes": ["m1", "m2"]}'
RECORD = "the plan of a (bke:a:plan)"
SIGNER = RecordSigner.generate("plan")


def _signed(**kw: object) -> str:
    args = {"kind": "plan", "cluster": "a", "binding": ("inc-1", "2"), "data": PLAN, **kw}
    return SIGNER.sign(args["kind"], args["cluster"], args["binding"], args["data"])  # type: ignore[arg-type]


def _verify(signature: str | None, verifier: RecordVerifier = SIGNER.verifier, **kw: object) -> None:
    args = {"kind": "plan", "cluster": "a", "binding": ("inc-1", "2"), "data": PLAN, **kw}
    verifier.verify(RECORD, args["kind"], args["cluster"], args["binding"], args["data"], signature)  # type: ignore[arg-type]


def test_the_writer_s_signature_verifies() -> None:
    _verify(_signed())


@pytest.mark.parametrize("change", [
    {"data": PLAN.replace(b"m2", b"m3")},  # the stored bytes altered
    {"cluster": "b"},  # cluster a's plan offered as cluster b's
    {"binding": ("inc-1", "1")},  # another generation
    {"binding": ("inc-0", "2")},  # another incarnation of the same name
    {"kind": "rendered-files"},  # a signature of another kind of record
], ids=["tampered", "other-cluster", "other-generation", "other-incarnation", "other-kind"])
def test_anything_else_than_what_was_signed_is_refused_naming_the_record(change: dict[str, object]) -> None:
    with pytest.raises(RecordSignatureError, match="does not match") as refused:
        _verify(_signed(), **change)
    assert refused.value.record == RECORD and str(refused.value).startswith(RECORD)


def test_a_record_verified_before_is_taken_again_and_nothing_else_is() -> None:
    verifier = RecordVerifier("plan", stored_public("plan", SIGNER.seal_for_store(SecretBox(new_key()))))
    good = _signed()
    _verify(good, verifier)
    _verify(good, verifier)  # remembered: the same key, bytes, binding and signature
    key_id, _, sig = good.partition(".")
    other = f"{key_id}.{sig[:10]}{'A' if sig[10] != 'A' else 'B'}{sig[11:]}"  # the same record, another signature
    with pytest.raises(RecordSignatureError, match="does not match"):
        _verify(other, verifier)
    with pytest.raises(RecordSignatureError, match="does not match"):
        _verify(good, verifier, data=PLAN + b" ")


def test_a_header_cannot_be_shifted_between_fields() -> None:
    """The header is JSON: ("a:b", "c") and ("a", "b:c") are different messages."""
    assert record_message("plan", "a", ("b", "c"), PLAN) != record_message("plan", "a b", ("c",), PLAN)
    assert record_message("plan", "a", ("b",), b"x") != record_message("plan", "a", ("b",), b"y")


def test_another_writer_s_key_is_refused_as_such() -> None:
    other = RecordSigner.generate("plan")
    with pytest.raises(RecordSignatureError, match=f"signed by key {other.key_id}, not by the plan writer's"):
        _verify(other.sign("plan", "a", ("inc-1", "2"), PLAN))
    forged = f"{SIGNER.key_id}.{other.sign('plan', 'a', ('inc-1', '2'), PLAN).split('.', 1)[1]}"  # its key id borrowed
    with pytest.raises(RecordSignatureError, match="does not match"):
        _verify(forged)


# ids of their own: the key id is made at import, and xdist's workers must collect the same ids
@pytest.mark.parametrize("signature", [None, "", f"{SIGNER.key_id}.", f"{SIGNER.key_id}.not base64!"],
                         ids=["none", "empty", "key-id-only", "not-base64"])
def test_a_missing_or_malformed_signature_is_refused(signature: str | None) -> None:
    with pytest.raises(RecordSignatureError):
        _verify(signature)


def test_the_stored_key_gives_its_public_half_in_clear_and_its_private_half_to_its_box_only() -> None:
    box = SecretBox(new_key())
    blob = SIGNER.seal_for_store(box)
    assert stored_public(SIGNER.writer, blob) == SIGNER.verifier._public.public_bytes_raw()
    assert RecordVerifier.from_stored("plan", blob).key_id == SIGNER.key_id
    again = RecordSigner.from_store("plan", blob, box)
    _verify(again.sign("plan", "a", ("inc-1", "2"), PLAN))
    assert repr(again) == f"RecordSigner(plan, key_id={SIGNER.key_id})"  # no key material
    with pytest.raises(DecryptError):
        RecordSigner.from_store("plan", blob, SecretBox(new_key()))
    with pytest.raises(DecryptError):  # the render writer's record cannot stand for the plan writer's
        RecordSigner.from_store("render", blob, box)
    kept, sealed = split_stored(blob)
    assert join_stored(kept, sealed) == blob


def test_a_stored_key_whose_public_half_was_replaced_is_refused() -> None:
    box = SecretBox(new_key())
    blob = SIGNER.seal_for_store(box)
    other = RecordSigner.generate("plan").seal_for_store(box)
    swapped = b":".join([*other.split(b":")[:2], blob.split(b":")[2]])  # another public half before this private half
    with pytest.raises(RecordKeyError, match="public half is not its private half's"):
        RecordSigner.from_store("plan", swapped, box)
    assert RecordSigner.from_store("plan", blob.decode(), box).key_id == SIGNER.key_id  # a client that decodes answers
    for bad in (b"BKEREC1:short", b"BKESNAP1:" + blob.split(b":", 1)[1], b""):
        with pytest.raises(RecordKeyError, match="not in its form"):
            stored_public("plan", bad)
    with pytest.raises(ValueError, match="unknown record writer"):
        RecordSigner.generate("certs")
