"""bke.core.secrets.command_key_pin: the pin check `bke agent bootstrap` makes on the bus's answer. A
pin is a SHA256 fingerprint or the public line (on the command line or in a file); the pinned key
passes, any other is refused naming both fingerprints; malformed pins are refused."""
from __future__ import annotations

import base64
import hashlib
import stat
from pathlib import Path

import pytest

from bke.core.secrets.command_key_pin import (
    CommandKeyMismatch,
    check_pinned,
    parse_pin,
    read_pin_file,
    write_command_key_file,
)
from bke.core.secrets.signing import CommandSigner, SigningKeyError

KEY = CommandSigner.generate().verify_key
OTHER = CommandSigner.generate().verify_key


def test_the_fingerprint_is_openssh_style_sha256_of_the_raw_key() -> None:
    digest = base64.b64encode(hashlib.sha256(KEY.raw).digest()).decode().rstrip("=")
    assert KEY.fingerprint == f"SHA256:{digest}" and len(digest) == 43


# ids: the key is made at import, and test ids must not change between collections
@pytest.mark.parametrize("text", [KEY.fingerprint, KEY.public_line, f"  {KEY.public_line}\n", KEY.fingerprint + "="],
                         ids=["fingerprint", "public-line", "padded-line", "fingerprint-with-padding"])
def test_a_pin_of_the_key_passes_its_answer(text: str) -> None:
    pin = parse_pin(text, "--command-key-fingerprint")
    assert pin.fingerprint == KEY.fingerprint
    assert check_pinned(KEY.public_line, pin).raw == KEY.raw


def test_another_key_is_refused_naming_both() -> None:
    pin = parse_pin(KEY.fingerprint, "--command-key-fingerprint")
    with pytest.raises(CommandKeyMismatch) as exc:
        check_pinned(OTHER.public_line, pin)
    text = str(exc.value)
    assert OTHER.fingerprint in text and KEY.fingerprint in text and "--command-key-fingerprint" in text
    with pytest.raises(SigningKeyError):
        check_pinned("bke-command-ed25519 not-base64!", pin)  # an answer that is no key at all


@pytest.mark.parametrize(("text", "message"), [
    ("SHA256:AAAA", "is not a SHA-256 fingerprint"),
    ("sha256:" + KEY.fingerprint[7:], "expected SHA256:<base64>"),
    (KEY.public_line.split()[1], "expected SHA256:<base64>"),  # the bare base64: say which form
    ("bke-command-ed25519 AAAA", "not a base64 Ed25519"),
    ("", "expected SHA256:<base64>"),
], ids=["short", "lowercase-prefix", "bare-base64", "short-key", "empty"])
def test_malformed_pins_are_refused(text: str, message: str) -> None:
    with pytest.raises(SigningKeyError, match=message):
        parse_pin(text, "--command-key-fingerprint")


def test_the_key_file_round_trip(tmp_path: Path) -> None:
    path = write_command_key_file(tmp_path / "deploy" / "command-key.pub", KEY)
    assert path.read_text() == KEY.public_line + "\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # public: the agents' env files carry it
    assert read_pin_file(path).fingerprint == KEY.fingerprint
    path.write_text(f"# the command-signing key of prod\n\n{KEY.public_line}\n")
    pin = read_pin_file(path)
    assert pin.fingerprint == KEY.fingerprint and pin.source == str(path)
    path.write_text(f"{KEY.public_line}\n{OTHER.public_line}\n")
    with pytest.raises(SigningKeyError, match="found 2"):
        read_pin_file(path)
