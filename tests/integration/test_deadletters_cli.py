"""`bke deadletters list|show` against a real nats-server in operator mode: what services stored in
BKE_DEADLETTER, read as the operator, newest first, nothing removed; the dashboard is refused the
message get (positive control: the operator's same reads)."""
from __future__ import annotations

import asyncio
import json
import time
from base64 import b64encode
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from bke.adapters.auth import identity_name, inbox_prefix, role_permissions, write_creds
from bke.adapters.bus.connect import BusAccess, connect_nats
from bke.contracts import DEADLETTER, DeadLettered
from bke.contracts.base import schema_headers
from bke.adapters.runtime import EmbeddedRuntime
from bke_cli.main import app

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

BINARY = bytes(range(256)) * 4  # a payload no terminal should be sent
LONG_REASON = "ValueError: " + "no such cluster c9; " * 20  # longer than the table's reason column


@dataclass(frozen=True)
class Stored:
    garbage: int  # a planner's stored bytes that are no DeadLettered
    first: int  # certs, text payload
    second: int  # planner
    third: int  # certs, binary payload, the newest
    env: dict[str, dict[str, str | None]]  # role -> the CLI's environment as that role


def _access(rt: EmbeddedRuntime, tmp: Path, role: str) -> BusAccess:
    assert rt.nats_auth is not None and rt.info is not None
    user = rt.nats_auth.authority.user(identity_name(role), role_permissions(role), iat=int(time.time()))
    creds = write_creds(tmp / f"{role}.creds", user.creds)
    return BusAccess(rt.info.nats_url, creds, inbox_prefix(role), Path(rt.info.nats_tls_ca) if rt.info.nats_tls_ca else None)


async def _store(access: BusAccess, service: str, bodies: list[bytes]) -> list[int]:
    """Store as the service does (bke.adapters.bus.delivery): its own subject, the schema header."""
    nc = await connect_nats(access)
    try:
        js = nc.jetstream()
        return [(await js.publish(f"{DEADLETTER}.{service}", body, stream="BKE_DEADLETTER", headers=schema_headers())).seq
                for body in bodies]
    finally:
        await nc.close()


def _letter(service: str, subject: str, reason: str, payload: bytes, deliveries: int = 5) -> bytes:
    return DeadLettered(subject=subject, service=service, deliveries=deliveries, reason=reason,
                        payload_b64=b64encode(payload).decode()).to_bytes()


@pytest.fixture(scope="module")
def stored(secure: EmbeddedRuntime, tmp_path_factory: pytest.TempPathFactory) -> Stored:
    tmp = tmp_path_factory.mktemp("deadletters")
    access = {role: _access(secure, tmp, role) for role in ("certs", "planner", "operator", "dashboard")}
    (garbage,) = asyncio.run(_store(access["planner"], "planner", [b"\x00not a message"]))
    (first,) = asyncio.run(_store(access["certs"], "certs", [_letter("certs", "bke.v1.certs.issue", "KeyError: 'x'", b"{}", 1)]))
    (second,) = asyncio.run(_store(access["planner"], "planner", [_letter("planner", "bke.v1.cluster.install", LONG_REASON, b"{}")]))
    (third,) = asyncio.run(_store(access["certs"], "certs", [_letter("certs", "bke.v1.plan.created", "Boom\x1b[31m [red]x[/red]", BINARY, 7)]))
    env = {role: {"BKE_NATS_URL": a.url, "BKE_NATS_CREDS": str(a.creds), "BKE_NATS_INBOX_PREFIX": a.inbox_prefix,
                  "BKE_NATS_TLS_CA": str(a.tls_ca) if a.tls_ca else None, "COLUMNS": "200"}
           for role, a in access.items()}
    return Stored(garbage, first, second, third, env)


def _bke(stored: Stored, role: str, *args: str) -> Result:
    return CliRunner().invoke(app, ["deadletters", *args], env=stored.env[role])


def _listed(stored: Stored, *args: str) -> list[dict]:
    res = _bke(stored, "operator", "list", "-o", "json", *args)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_list_gives_the_newest_first_with_every_field(stored: Stored) -> None:
    got = _listed(stored)
    assert [d["sequence"] for d in got] == [stored.third, stored.second, stored.first, stored.garbage]
    third, second, first, garbage = got
    assert third == {"sequence": stored.third, "time": third["time"], "service": "certs", "subject": "bke.v1.plan.created",
                     "deliveries": 7, "reason": "Boom\x1b[31m [red]x[/red]", "payloadBytes": len(BINARY)}
    assert third["time"].endswith("Z")
    assert second["reason"] == LONG_REASON and second["service"] == "planner"  # whole in json
    assert (first["deliveries"], first["payloadBytes"]) == (1, 2)
    assert garbage["service"] == "planner" and "DeadLettered" in garbage["unreadable"] and garbage["deliveries"] is None
    assert [d["sequence"] for d in _listed(stored, "--last", "2")] == [stored.third, stored.second]
    assert _listed(stored) == got  # reading removed nothing


def test_service_filters(stored: Stored) -> None:
    assert [d["sequence"] for d in _listed(stored, "--service", "certs")] == [stored.third, stored.first]
    # fewer wanted than it has: back from its newest, over the planner's
    assert [d["sequence"] for d in _listed(stored, "--service", "certs", "--last", "1")] == [stored.third]
    assert [d["sequence"] for d in _listed(stored, "--service", "planner")] == [stored.second, stored.garbage]
    assert _listed(stored, "--service", "renderer") == []
    res = _bke(stored, "operator", "list", "--service", "nobody")
    assert res.exit_code == 2 and "ERROR --service" in res.stderr


def test_the_table_cuts_the_reason_and_escapes_what_a_terminal_would_run(stored: Stored) -> None:
    res = _bke(stored, "operator", "list")
    assert res.exit_code == 0, res.output
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in res.stdout.splitlines() if "│" in line]
    assert [int(r[0]) for r in rows if r[0].isdigit()] == [stored.third, stored.second, stored.first, stored.garbage]
    assert LONG_REASON not in res.stdout and "…" in res.stdout
    assert "\x1b" not in res.stdout and "\\x1b[31m [red]x[/red]" in res.stdout  # escaped, and no rich markup
    assert f"{len(BINARY)} B" in res.stdout


def test_show_gives_one_in_full_and_writes_the_payload_only_when_asked(stored: Stored, tmp_path: Path) -> None:
    res = _bke(stored, "operator", "show", str(stored.third))
    assert res.exit_code == 0, res.output
    assert "subject:     bke.v1.plan.created" in res.stdout and "deliveries:  7" in res.stdout
    assert f"payload:     {len(BINARY)} bytes" in res.stdout and "\x00" not in res.stdout and "\x1b" not in res.stdout
    assert not any(tmp_path.iterdir())  # no file unless asked
    out = tmp_path / "payload.bin"
    res = _bke(stored, "operator", "show", str(stored.second), "--payload-out", str(tmp_path / "second.bin"))
    assert res.exit_code == 0 and f"reason:      {LONG_REASON}" in res.stdout  # whole
    res = _bke(stored, "operator", "show", str(stored.third), "--payload-out", str(out), "-o", "json")
    assert res.exit_code == 0, res.output
    assert out.read_bytes() == BINARY and out.stat().st_mode & 0o777 == 0o600
    assert json.loads(res.stdout)["payloadBytes"] == len(BINARY)


def test_an_unknown_sequence_is_an_error_line_and_exit_2(stored: Stored) -> None:
    res = _bke(stored, "operator", "show", "999999")
    assert res.exit_code == 2
    assert res.stderr.startswith("ERROR dead letter 999999: none in BKE_DEADLETTER")


def test_the_dashboard_is_refused_the_message_get(stored: Stored) -> None:
    started = time.monotonic()
    for args in (("list",), ("show", str(stored.third))):
        res = _bke(stored, "dashboard", *args)
        assert res.exit_code == 2, res.output
        assert res.stderr.startswith("ERROR refused") and "permissions violation" in res.stderr.lower()
    assert time.monotonic() - started < 9  # told at once: two requests left to their timeout would take 10 s


def test_nats_unreachable_is_an_error_line_and_exit_1(stored: Stored) -> None:
    res = _bke(stored, "operator", "list", "--nats", "nats://127.0.0.1:1")
    assert res.exit_code == 1 and res.stderr.startswith("ERROR cannot reach NATS")
