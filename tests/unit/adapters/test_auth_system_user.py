"""bke.adapters.auth.system_user: a good sys.creds is kept byte for byte; a missing or foreign one is
replaced; a damaged, expired or revoked one of ours is replaced and its key revoked on the
system account; every earlier system user is refused by the `*` entry, which never moves back.
Against the real nats-server: tests/integration/test_runtime_system_user.py."""
from __future__ import annotations

import time
from pathlib import Path

from bke.adapters.auth.authority import ALL_USERS, Authority, creds_text, new_authority, write_creds
from bke.adapters.auth.jwt import decode_jwt, encode_jwt, new_keypair
from bke.adapters.auth.permissions import role_permissions
from bke.adapters.auth.system_user import creds_parts, ensure_system_user, inspect_system_creds

NOW = 1_800_000_000


def _sys_user(authority: Authority, iat: int, *, exp: int | None = None) -> tuple[str, str]:
    """(creds text, public key) of a system user, as Authority.system_user makes one."""
    key = new_keypair("user")
    token = encode_jwt(authority.system, key.public, "bke-sys", {"type": "user", "subs": -1, "data": -1,
                                                                  "payload": -1}, iat=iat, exp=exp)
    return creds_text(token, key.seed), key.public


def test_verdicts() -> None:
    a = new_authority()
    good, public = _sys_user(a, NOW - 10)
    assert inspect_system_creds(a, good, NOW) == ("valid", public, NOW - 10)
    assert inspect_system_creds(a, None, NOW)[0] == "missing"
    assert inspect_system_creds(a, "not a creds file", NOW)[0] == "missing"
    other, other_public = _sys_user(new_authority(), NOW - 10)
    assert inspect_system_creds(a, other, NOW) == ("foreign", other_public, NOW - 10)
    token, _ = creds_parts(good)
    assert token is not None
    forged = creds_text(token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB"), new_keypair("user").seed)
    assert inspect_system_creds(a, forged, NOW)[0] == "foreign"  # the signature is not the issuer's
    account_user = a.user("x", role_permissions("operator"), iat=NOW - 10)  # of the BKE account, not the system account
    assert inspect_system_creds(a, account_user.creds, NOW)[0] == "foreign"
    damaged = creds_text(token, new_keypair("user").seed)
    assert inspect_system_creds(a, damaged, NOW) == ("mismatched", public, NOW - 10)
    expired, _ = _sys_user(a, NOW - 10, exp=NOW)
    assert inspect_system_creds(a, expired, NOW)[0] == "expired"
    a.revoke_system_user(public, NOW - 5)
    assert inspect_system_creds(a, good, NOW)[0] == "revoked"
    b = new_authority()
    old, _ = _sys_user(b, NOW - 10)
    b.revoke_system_user(ALL_USERS, NOW - 10)  # `*` at its issue time: refused
    assert inspect_system_creds(b, old, NOW)[0] == "revoked"


def test_a_good_file_is_kept_byte_for_byte_and_earlier_users_are_refused(tmp_path: Path) -> None:
    a = new_authority()
    path = tmp_path / "sys.creds"
    first = ensure_system_user(a, path, NOW)
    assert (first.status, first.found, first.revocations_changed) == ("made", "missing", True)
    assert a.system_revocations == {ALL_USERS: NOW - 1}  # every user minted before it
    text = path.read_text()
    again = ensure_system_user(a, path, NOW + 100)
    assert (again.status, again.public, again.revocations_changed) == ("kept", first.public, False)
    assert path.read_text() == text and a.system_revocations == {ALL_USERS: NOW - 1}
    assert decode_jwt(creds_parts(text)[0] or "")["iat"] == NOW


def test_a_kept_file_of_an_older_lab_refuses_the_users_minted_before_it(tmp_path: Path) -> None:
    """Older labs minted a system user at each start and revoked none: the kept one's start
    refuses all those before it."""
    a = new_authority()
    text, public = _sys_user(a, NOW - 100)
    path = write_creds(tmp_path / "sys.creds", text)
    kept = ensure_system_user(a, path, NOW)
    assert (kept.status, kept.public, kept.revocations_changed) == ("kept", public, True)
    assert a.system_revocations == {ALL_USERS: NOW - 101}
    assert a.system_user_revoked("Uearlier", NOW - 200) and not a.system_user_revoked(public, NOW - 100)


def test_a_damaged_one_of_ours_is_replaced_and_revoked(tmp_path: Path) -> None:
    a = new_authority()
    path = tmp_path / "sys.creds"
    first = ensure_system_user(a, path, NOW)
    token, _ = creds_parts(path.read_text())
    write_creds(path, creds_text(token or "", new_keypair("user").seed))  # the seed is not the JWT's key
    second = ensure_system_user(a, path, NOW + 60)
    assert (second.status, second.found, second.revoked) == ("replaced", "mismatched", first.public)
    assert second.public != first.public and second.revocations_changed
    assert a.system_revocations[first.public] == NOW + 60
    assert a.system_user_revoked(first.public, NOW) and not a.system_user_revoked(second.public, NOW + 60)
    assert inspect_system_creds(a, path.read_text(), NOW + 61)[0] == "valid"


def test_a_foreign_one_is_replaced_without_a_revocation_of_it(tmp_path: Path) -> None:
    a, other = new_authority(), new_authority()
    text, public = _sys_user(other, NOW - 10)
    path = write_creds(tmp_path / "sys.creds", text)
    made = ensure_system_user(a, path, NOW)
    assert (made.status, made.found, made.revoked) == ("made", "foreign", None)
    assert public not in a.system_revocations


def test_the_clock_going_back_never_mints_a_user_its_own_revocation_refuses(tmp_path: Path) -> None:
    a = new_authority()
    path = tmp_path / "sys.creds"
    ensure_system_user(a, path, NOW)
    path.unlink()
    made = ensure_system_user(a, path, NOW - 3600)  # an hour earlier than the last start
    issued = decode_jwt(creds_parts(path.read_text())[0] or "")["iat"]
    assert issued == NOW and not a.system_user_revoked(made.public, issued)
    assert inspect_system_creds(a, path.read_text(), NOW - 3600)[0] == "valid"


def test_revocations_survive_the_secret_json_and_reach_the_system_account_jwt() -> None:
    a = new_authority()
    assert b"systemRevocations" not in a.to_secret_json()  # unchanged bytes without any
    a.revoke_system_user(ALL_USERS, NOW)
    a.revoke_system_user("Uold", NOW + 1)
    b = Authority.from_secret_json(a.to_secret_json())
    assert b.system_revocations == {ALL_USERS: NOW, "Uold": NOW + 1}
    claims = decode_jwt(b.system_account_jwt(int(time.time())))
    assert claims["nats"]["revocations"] == {ALL_USERS: NOW, "Uold": NOW + 1}
    assert "revocations" not in decode_jwt(new_authority().system_account_jwt(NOW))["nats"]


def test_merging_revocations_never_undoes_one() -> None:
    a, b = new_authority(), new_authority()
    a.revoke("U1", 10)
    a.revoke("U2", 30)
    b.revoke("U2", 20)
    b.revoke("U3", 5)
    b.revoke_system_user(ALL_USERS, 7)
    assert a.merge_revocations(b) == 2
    assert a.revocations == {"U1": 10, "U2": 30, "U3": 5} and a.system_revocations == {ALL_USERS: 7}
    assert a.merge_revocations(b) == 0
