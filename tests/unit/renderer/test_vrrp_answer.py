"""The renderer's answer to the VRRP password's request and the upgrader's client of it, byte to
byte: sealed to the asker's key, bad requests answered Invalid at their field, a store away
answered Unavailable, and each way an answer can be unusable a retryable error for the asker."""
from __future__ import annotations

import base64
import json

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from bke.contracts.status import StatusError
from bke.contracts.vrrp_password import VRRP_PASSWORD_GET, GetVrrpPassword, VrrpPassword
from bke.core.secrets.sealing import generate_agent_key, open_sealed, public_key_to_raw
from bke_renderer.vrrp_answer import vrrp_password_answer
from bke_upgrader.vrrp_password import VrrpPasswordClient, VrrpPasswordUnavailable

STORED = {"c1": "Vr7pQ2xZ"}


async def _stored(cluster: str) -> str | None:
    return STORED.get(cluster)


async def _away(cluster: str) -> str | None:
    raise RedisConnectionError("Connection refused")


def _ask(cluster: str = "c1") -> tuple[bytes, object]:
    key = generate_agent_key()
    body = GetVrrpPassword(cluster=cluster, reply_key_b64=base64.b64encode(public_key_to_raw(key.public_key())).decode())
    return body.to_bytes(), key


async def test_the_password_is_sealed_to_the_key_of_the_request_and_to_no_other() -> None:
    body, key = _ask()
    raw = await vrrp_password_answer(_stored)(VRRP_PASSWORD_GET, body)
    assert b"Vr7pQ2xZ" not in raw
    reply = VrrpPassword.model_validate_json(raw)
    assert open_sealed(key, base64.b64decode(reply.sealed_b64 or "")) == b"Vr7pQ2xZ"  # type: ignore[arg-type]
    _, other = _ask()
    with pytest.raises(Exception, match="sealed to agent key"):
        open_sealed(other, base64.b64decode(reply.sealed_b64 or ""))  # type: ignore[arg-type]
    body, _ = _ask("c2")
    assert VrrpPassword.model_validate_json(await vrrp_password_answer(_stored)(VRRP_PASSWORD_GET, body)).sealed_b64 is None


@pytest.mark.parametrize("body, field", [
    (b"{}", "cluster: Field required"),
    (json.dumps({"cluster": "c1", "reply_key_b64": "x"}).encode(), "reply_key_b64: String should have at least 44"),
    (json.dumps({"cluster": "c1", "reply_key_b64": "!" * 44}).encode(), "reply_key_b64: not a base64 X25519"),
    (json.dumps({"cluster": "c1", "reply_key_b64": base64.b64encode(b"k" * 31).decode()}).encode(),
     "reply_key_b64: not a base64 X25519"),
])
async def test_a_bad_request_is_answered_invalid_at_its_field(body: bytes, field: str) -> None:
    reply = StatusError.model_validate_json(await vrrp_password_answer(_stored)(VRRP_PASSWORD_GET, body))
    assert reply.reason == "Invalid" and reply.message.startswith(field), reply.message


async def test_a_store_away_is_answered_unavailable_and_the_client_retries_later() -> None:
    body, _ = _ask()
    reply = StatusError.model_validate_json(await vrrp_password_answer(_away)(VRRP_PASSWORD_GET, body))
    assert reply.reason == "Unavailable" and "Connection refused" in reply.message

    async def renderer(subject: str, payload: bytes, timeout: float) -> bytes:
        return await vrrp_password_answer(_away)(subject, payload)

    with pytest.raises(VrrpPasswordUnavailable, match="answered Unavailable") as info:
        await VrrpPasswordClient(renderer, 1.0)("c1")
    assert info.value.delay > 0


async def test_the_client_opens_its_own_answer_and_refuses_what_it_cannot_read() -> None:
    async def renderer(subject: str, payload: bytes, timeout: float) -> bytes:
        return await vrrp_password_answer(_stored)(subject, payload)

    assert await VrrpPasswordClient(renderer, 1.0)("c1") == "Vr7pQ2xZ"
    assert await VrrpPasswordClient(renderer, 1.0)("c2") is None

    async def garbage(subject: str, payload: bytes, timeout: float) -> bytes:
        return b'{"apiVersion": "bke.v1/Nope"}'

    with pytest.raises(VrrpPasswordUnavailable, match="no VrrpPassword"):
        await VrrpPasswordClient(garbage, 1.0)("c1")

    async def someone_elses(subject: str, payload: bytes, timeout: float) -> bytes:
        body, _ = _ask()  # sealed to a key that is not this request's
        return await vrrp_password_answer(_stored)(subject, body)

    with pytest.raises(VrrpPasswordUnavailable, match="does not open with this request's key"):
        await VrrpPasswordClient(someone_elses, 1.0)("c1")
