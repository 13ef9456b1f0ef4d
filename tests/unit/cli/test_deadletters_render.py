"""`bke deadletters`: a stored message read as a dead letter, and its table, JSON and `show` text."""
from __future__ import annotations

import hashlib
from base64 import b64encode
from datetime import datetime, timezone

from bke.contracts import DeadLettered
from bke.contracts.base import SCHEMA_HEADER, schema_headers
from bke_cli.deadletters_client import DeadLetter, dead_letter
from bke_cli.deadletters_cmd import letter_document, letter_lines, list_rows

AT = datetime(2030, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)
STORED = "bke.v1.deadletter.certs"


def _body(reason: str = "KeyError: 'x'", payload: bytes = b"\x00\x01binary", service: str = "certs") -> bytes:
    return DeadLettered(subject="bke.v1.certs.issue", service=service, deliveries=5, reason=reason,
                        payload_b64=b64encode(payload).decode()).to_bytes()


def test_a_stored_dead_letter_is_read_and_its_payload_kept_only_when_asked() -> None:
    d = dead_letter(7, AT, STORED, _body(), schema_headers())
    assert (d.service, d.subject, d.deliveries, d.reason, d.payload_size, d.payload) == (
        "certs", "bke.v1.certs.issue", 5, "KeyError: 'x'", 8, None)
    assert dead_letter(7, AT, STORED, _body(), None, keep_payload=True).payload == b"\x00\x01binary"  # no header: form 0


def test_what_is_no_dead_letter_is_listed_as_unreadable() -> None:
    for body, headers in ((b"\x00garbage", schema_headers()), (_body(), {SCHEMA_HEADER: "99"}),
                          (_body().replace(b'"payloadB64":"', b'"payloadB64":"!'), schema_headers())):
        d = dead_letter(3, AT, STORED, body, headers)
        assert d.unreadable and d.subject is None and d.payload_size is None, body
        assert letter_document(d)["unreadable"] == d.unreadable
        assert list_rows([d])[0][5].startswith("unreadable: ")


def test_the_table_cuts_the_reason_and_escapes_control_characters() -> None:
    d = dead_letter(7, AT, STORED, _body(reason="Boom\x1b[2J\n" + "x" * 100), schema_headers())
    (row,) = list_rows([d], width=20)
    assert row[:5] == ("7", "2030-01-02T03:04:05Z", "certs", "bke.v1.certs.issue", "5")
    assert row[5] == "Boom\\x1b[2J\\nxxxxxx…" and len(row[5]) == 20
    assert row[6] == "8 B"


def test_json_has_the_whole_reason_and_never_the_payload() -> None:
    reason = "ValueError: " + "y" * 500
    d = dead_letter(7, AT, STORED, _body(reason=reason), schema_headers(), keep_payload=True)
    assert letter_document(d) == {
        "sequence": 7, "time": "2030-01-02T03:04:05Z", "service": "certs", "subject": "bke.v1.certs.issue",
        "deliveries": 5, "reason": reason, "payloadBytes": 8,
        "payloadSha256": hashlib.sha256(b"\x00\x01binary").hexdigest(),
    }
    assert "payloadB64" not in letter_document(d) and "payload" not in letter_document(d)


def test_show_names_the_service_the_subject_proves_and_what_the_body_claims() -> None:
    d = dead_letter(7, AT, STORED, _body(service="dispatcher", reason="a\x07b"), schema_headers(), keep_payload=True)
    lines = letter_lines(d)
    assert "service:     certs" in lines and "body says:   service dispatcher" in lines
    assert lines[-1] == "reason:      a\\x07b"
    assert any(line.startswith("payload:     8 bytes, sha256 ") and "--payload-out FILE" in line for line in lines)
    assert not any("\x00" in line for line in lines)
    assert letter_lines(DeadLetter(1, None, STORED, unreadable="bad\nbody"))[-1] == "unreadable:  bad\\nbody"
