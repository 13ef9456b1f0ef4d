"""The rules of an agent's own renewal, without a server: what the authority's side refuses
(bke.adapters.auth.agent_renewal.refusal), when the agent asks (bke_agent.renewal.due), and how the
request is signed and its creds file read (bke.adapters.auth.creds.creds_parts)."""
from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
from pathlib import Path

import pytest

from bke.adapters.auth.agent_renewal import MAX_AGE_S, RENEW_ALL, refusal
from bke.adapters.auth.authority import creds_text
from bke.adapters.auth.creds import creds_parts, subject_matches
from bke.adapters.auth.jwt import KeyPair, new_keypair, verify_nkey
from bke.adapters.auth.permissions import identity_name, inbox_prefix
from bke.adapters.auth.registry import IdentityRecord
from bke.contracts.identity import RenewAgentIdentity, renew_identity_subject
from bke_agent.renewal import IdentityRenewal, creds_unwritable, due

NOW = 1_800_000_000
YEAR = 365 * 86400


def _record(key: KeyPair, *, issued_at: int = NOW - 300 * 86400, jti: str = "J1",
            revoked_at: int | None = None) -> IdentityRecord:
    name = identity_name("agent", "c1", "node-a")
    return IdentityRecord(name, "agent", key.public, jti, inbox_prefix(name), issued_at, "c1", "node-a",
                          revoked_at=revoked_at, expires_at=issued_at + YEAR)


def _request(key: KeyPair, *, node: str = "node-a", at: int = NOW, jti: str = "J1",
             public: str | None = None) -> RenewAgentIdentity:
    unsigned = RenewAgentIdentity(cluster="c1", node=node, public_key=public or key.public, jti=jti, at=at,
                                  signature="-")
    return unsigned.model_copy(update={"signature": base64.b64encode(key.sign(unsigned.signed_bytes())).decode()})


@pytest.fixture
def key() -> KeyPair:
    return new_keypair("user")


def test_a_due_request_of_the_nodes_own_key_is_answered(key: KeyPair) -> None:
    subject = renew_identity_subject("c1", "node-a")
    assert subject_matches(RENEW_ALL, subject)
    assert refusal(_request(key), subject, _record(key), NOW) is None


def test_each_rule_refuses_on_its_own(key: KeyPair) -> None:
    subject, record = renew_identity_subject("c1", "node-a"), _record(key)
    other = new_keypair("user")
    cases = {
        "another node": (_request(key, node="node-b"), subject, record),
        "not signed": (_request(other, public=key.public), subject, record),
        "more than": (_request(key, at=NOW - MAX_AGE_S - 1), subject, record),
        "revoked": (_request(key), subject, _record(key, revoked_at=NOW - 10)),
        "never issued": (_request(key), subject, None),
        "not the one provisioned": (_request(other), subject, record),
        "not due": (_request(key), subject, _record(key, issued_at=NOW - 10)),
    }
    for needle, (req, subj, rec) in cases.items():
        reason = refusal(req, subj, rec, NOW)
        assert reason is not None and needle in reason, (needle, reason)


def test_a_renewal_whose_answer_was_missed_is_answered_again(key: KeyPair) -> None:
    """The record was renewed (not due, another jti) but the agent still holds the older JWT:
    refusing would strand it until its JWT expires."""
    assert refusal(_request(key, jti="OLDER"), renew_identity_subject("c1", "node-a"),
                   _record(key, issued_at=NOW - 10, jti="NEWER"), NOW) is None


def test_the_request_is_the_nkeys_signature_over_every_field(key: KeyPair) -> None:
    req = _request(key)
    sig = base64.b64decode(req.signature)
    assert verify_nkey(key.public, req.signed_bytes(), sig)
    for changed in (req.model_copy(update={"at": NOW + 1}), req.model_copy(update={"node": "node-b"}),
                    req.model_copy(update={"jti": "J2"})):
        assert not verify_nkey(key.public, changed.signed_bytes(), sig)


def test_the_agent_asks_in_the_last_third_only() -> None:
    claims = {"iat": NOW, "exp": NOW + 300}
    assert not due(claims, NOW + 199) and due(claims, NOW + 200) and due(claims, NOW + 400)
    assert not due({"iat": NOW}, NOW + 10**9)  # a JWT that never expires is never renewed


def test_creds_parts_reads_the_jwt_and_the_seed(key: KeyPair) -> None:
    token = "aGVhZA.Ym9keQ.c2ln"
    assert creds_parts(creds_text(token, key.seed)) == (token, key.seed)
    with pytest.raises(ValueError) as err:
        creds_parts(f"-----BEGIN NATS USER JWT-----\n{token}\n")
    assert key.seed not in str(err.value)


def test_a_writable_creds_file_is_found_so_and_left_as_it_was(tmp_path: Path) -> None:
    creds = tmp_path / "agent.creds"
    creds.write_text("jwt and seed")
    before = creds.stat()
    assert creds_unwritable(creds) is None
    assert creds.read_text() == "jwt and seed" and creds.stat().st_mtime_ns == before.st_mtime_ns


def test_a_file_mounted_on_its_own_is_found_unwritable() -> None:
    # a mount point cannot be renamed over (EBUSY), as a compose secret's bind-mounted file
    assert Path("/proc").is_mount() and creds_unwritable(Path("/proc")) is not None


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in any folder of a writable filesystem")
def test_a_creds_file_in_a_folder_it_cannot_write_is_found_unwritable(tmp_path: Path) -> None:
    creds = tmp_path / "ro" / "agent.creds"
    creds.parent.mkdir()
    creds.write_text("jwt and seed")
    creds.parent.chmod(0o555)
    try:
        assert creds_unwritable(creds) is not None
    finally:
        creds.parent.chmod(0o755)


class _NoBus:
    """Any use of the bus fails the test: nothing may be asked."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"the bus was used: {name}")


def _agent_creds(tmp_path: Path, key: KeyPair, *, iat: int, exp: int) -> Path:
    claims = {"sub": key.public, "iss": "A", "name": "agent", "jti": "J1", "iat": iat, "exp": exp}
    token = ".".join(base64.urlsafe_b64encode(json.dumps(p).encode()).decode().rstrip("=")
                     for p in ({"typ": "JWT", "alg": "ed25519-nkey"}, claims)) + ".c2ln"
    creds = tmp_path / "agent.creds"
    creds.write_text(creds_text(token, key.seed))
    return creds


async def test_an_agent_whose_creds_file_is_read_only_says_so_once_and_never_asks(
        tmp_path: Path, key: KeyPair, caplog: pytest.LogCaptureFixture) -> None:
    creds = _agent_creds(tmp_path, key, iat=NOW - 300 * 86400, exp=NOW + 65 * 86400)  # due
    renewal = IdentityRenewal(_NoBus(), creds, "c1", "node-a", clock=lambda: NOW,
                              unwritable=lambda path: "Read-only file system")
    caplog.set_level(logging.INFO, logger="bke.agent.renewal")
    await asyncio.wait_for(renewal.run(asyncio.Event(), every_s=0.01), 5)  # returns: no loop
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert "Read-only file system" in lines[0] and "provision this node again" in lines[0]
    assert str(NOW + 65 * 86400) in lines[0]
    assert await renewal.renew_once() == "unwritable"  # a due check asks nothing either


async def test_the_checks_end_after_a_renewal_the_agent_could_not_keep(tmp_path: Path, key: KeyPair) -> None:
    creds = _agent_creds(tmp_path, key, iat=NOW - 300 * 86400, exp=NOW + 65 * 86400)
    renewal = IdentityRenewal(_NoBus(), creds, "c1", "node-a", clock=lambda: NOW, unwritable=lambda path: None)
    outcomes = ["unwritable", "renewed"]
    calls = []

    async def renew_once() -> str:
        calls.append(1)
        return outcomes.pop(0)

    renewal.renew_once = renew_once  # type: ignore[method-assign]
    await asyncio.wait_for(renewal.run(asyncio.Event(), every_s=0.01), 5)
    assert calls == [1]  # not asked again: another JWT it cannot keep would be issued each hour
