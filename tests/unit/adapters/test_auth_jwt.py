"""bke.adapters.auth.jwt / authority: the token format nats-server reads, deterministic with injected
randomness and time, and never a seed where it does not belong."""
from __future__ import annotations

import base64
import json
import stat
from itertools import count
from pathlib import Path

import pytest

from bke.adapters.auth import Authority, agent_permissions, decode_jwt, encode_jwt, new_authority, new_keypair, write_creds
from bke.adapters.auth.jwt import keypair_from_seed


def _fixed_random():
    counter = count(1)
    return lambda n: bytes([next(counter) % 256]) * n


def _part(token: str, i: int) -> dict:
    seg = token.split(".")[i]
    return json.loads(base64.urlsafe_b64decode(seg + "=" * (-len(seg) % 4)))


def test_keys_have_the_role_prefix_and_round_trip() -> None:
    for role, letter in (("operator", "O"), ("account", "A"), ("user", "U")):
        key = new_keypair(role)  # type: ignore[arg-type]
        assert key.public.startswith(letter) and key.seed.startswith("S" + letter)
        assert keypair_from_seed(key.seed) == key
        assert key.seed not in repr(key)


def test_jwt_header_claims_and_signature() -> None:
    op = new_keypair("operator", _fixed_random())
    token = encode_jwt(op, op.public, "bke-operator", {"type": "operator"}, iat=1700000000)
    assert _part(token, 0) == {"typ": "JWT", "alg": "ed25519-nkey"}
    claims = decode_jwt(token)
    assert claims["iss"] == claims["sub"] == op.public and claims["iat"] == 1700000000
    assert claims["nats"] == {"type": "operator", "version": 2}
    assert len(claims["jti"]) == 52  # base32 of a sha256, unpadded
    tampered = token.rsplit(".", 1)[0][:-2] + "AA." + token.rsplit(".", 1)[1]
    with pytest.raises(ValueError):
        decode_jwt(tampered)


def test_the_same_inputs_mint_the_same_tokens() -> None:
    a1, a2 = new_authority(_fixed_random()), new_authority(_fixed_random())
    assert a1.account_jwt(5) == a2.account_jwt(5)
    assert a1.user("x", agent_permissions("c", "n"), iat=5, random=_fixed_random()).jwt == \
        a2.user("x", agent_permissions("c", "n"), iat=5, random=_fixed_random()).jwt


def test_user_is_signed_by_the_account_signing_key_and_names_its_account() -> None:
    auth = new_authority()
    user = auth.user("agent.c.n", agent_permissions("c", "n"), iat=10)
    claims = decode_jwt(user.jwt)
    assert claims["iss"] == auth.signing.public != auth.account.public
    assert claims["nats"]["issuer_account"] == auth.account.public
    assert claims["nats"]["type"] == "user" and claims["sub"] == user.public
    account = decode_jwt(auth.account_jwt(10))
    assert auth.signing.public in account["nats"]["signing_keys"]
    assert account["nats"]["limits"]["disk_storage"] == -1  # JetStream on
    assert user.seed not in user.jwt


def test_revocations_go_into_the_account_jwt_and_survive_serialisation() -> None:
    auth = new_authority()
    auth.revoke("UABC", 100)
    auth.revoke("UABC", 50)  # never moves back
    assert decode_jwt(auth.account_jwt(101))["nats"]["revocations"] == {"UABC": 100}
    again = Authority.from_secret_json(auth.to_secret_json())
    assert again.revocations == {"UABC": 100} and again.account == auth.account


def test_server_conf_names_operator_system_account_and_preloads_both(tmp_path: Path) -> None:
    auth = new_authority()
    conf = auth.server_conf(1, tmp_path)
    assert f"system_account: {auth.system.public}" in conf and "type: full" in conf
    assert f"  {auth.account.public}: " in conf and f"  {auth.system.public}: " in conf
    for kp in (auth.operator, auth.system, auth.account, auth.signing):
        assert kp.seed not in conf


def test_creds_file_is_private_from_the_start(tmp_path: Path) -> None:
    user = new_authority().user("planner", agent_permissions("c", "n"), iat=1)
    path = write_creds(tmp_path / "d" / "planner.creds", user.creds)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    assert "BEGIN NATS USER JWT" in text and user.seed in text and user.jwt in text
