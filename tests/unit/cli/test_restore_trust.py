"""bke.adapters.state.restore_trust, the pure core: which keys are trust material, the docstring's table
names every item of TRUST_ITEMS (they cannot drift), a backup-only identity is marked revoked
when the kept authority revokes its key, and `bke state restore` prints where each item came
from. Against a real Redis: tests/integration/test_state_backup.py."""
from __future__ import annotations

import base64
import json

import bke.adapters.state.restore_trust as restore_trust
from bke.adapters.auth.authority import new_authority
from bke.core.secrets.at_rest import SecretBox
from bke.adapters.state.keys.auth import auth_authority_key, auth_identities_key
from bke.adapters.state.restore_trust import TRUST_ITEMS, TrustDecision, decide_trust, trust_group
from bke_cli.state_cmd import trust_lines

KEY = SecretBox(b"k" * 32)


def _b64(text: str | bytes) -> str:
    return base64.b64encode(text if isinstance(text, bytes) else text.encode()).decode()


def _string(key: str, value: bytes) -> dict:
    return {"key": _b64(key), "type": "string", "pttl": -1, "value": _b64(value)}


def _hash(key: str, fields: dict[str, str]) -> dict:
    return {"key": _b64(key), "type": "hash", "pttl": -1, "value": {_b64(f): _b64(v) for f, v in fields.items()}}


def test_which_keys_are_trust_material() -> None:
    groups = {k: (None if (g := trust_group(k)) is None else (g[0].name, g[1])) for k in (
        "bke:auth:authority", "bke:auth:identities", "bke:command-signing-key", "bke:etcd-snapshot-key",
        "bke:seed:agents:provisioned", "bke:seed:certs:agents", "bke:seed:agents:accepted",
        "bke:seed:agents", "bke:seed:pki:keys", "bke:seed:plan-meta", "bke:seed:files:certs", "bke:epoch")}
    assert groups == {
        "bke:auth:authority": ("NATS authority", ""), "bke:auth:identities": ("bus identities", ""),
        "bke:command-signing-key": ("command-signing key", ""), "bke:etcd-snapshot-key": ("etcd snapshot key", ""),
        "bke:seed:agents:provisioned": ("agent keys", "seed"), "bke:seed:certs:agents": ("agent keys", "seed"),
        "bke:seed:agents:accepted": ("agent keys", "seed"),
        # the cluster's data, from the backup
        "bke:seed:agents": None, "bke:seed:pki:keys": None, "bke:seed:plan-meta": None, "bke:seed:files:certs": None,
        "bke:epoch": None}


def test_the_docstring_table_names_every_item() -> None:
    doc = restore_trust.__doc__ or ""
    table = doc.split("Why each:")[0]
    for item in TRUST_ITEMS:
        assert f"    {item.name}" in table, item.name
    for key in ("bke:auth:authority", "bke:auth:identities", "bke:command-signing-key", "bke:etcd-snapshot-key",
                "bke:<c>:agents:provisioned", "bke:<c>:certs:agents", "bke:<c>:agents:accepted"):
        assert key in table, key


def test_a_backup_only_identity_whose_key_the_kept_authority_revokes_comes_back_revoked() -> None:
    authority = new_authority()
    authority.revoke("UREVOKED", 1234)
    blob = KEY.encrypt(authority.to_secret_json(), auth_authority_key().encode())
    record = {"name": "agent.seed.n9", "role": "agent", "public": "UREVOKED", "jti": "j", "inbox": "_INBOX_x",
              "issued_at": 1000, "cluster": "seed", "node": "n9", "revoked_at": None, "previous": None}
    backup = [_hash(auth_identities_key(), {"agent.seed.n9": json.dumps(record)})]
    current = [_string(auth_authority_key(), blob), _hash(auth_identities_key(), {})]
    plan = decide_trust(backup, current, KEY)
    [identities] = [e for e in plan.entries if base64.b64decode(e["key"]) == auth_identities_key().encode()]
    restored = json.loads(base64.b64decode(next(iter(identities["value"].values()))))
    assert restored["revoked_at"] == 1234 and restored["public"] == "UREVOKED"
    assert TrustDecision("bus identities", "backup", "0 current record(s) kept, 1 only in the backup added") in plan.decisions


def test_restore_output_names_the_flag() -> None:
    kept = trust_lines([TrustDecision("command-signing key", "current", "the same as the backup's")], False)
    assert kept == ["trust material kept as it is now (--replace-trust takes the backup's instead):",
                    "  command-signing key: current: the same as the backup's"]
    [replaced] = trust_lines([TrustDecision("NATS authority, bus identities", "backup", "x")], True)
    assert replaced.startswith("trust material replaced with the backup's (--replace-trust): NATS authority, bus identities")
