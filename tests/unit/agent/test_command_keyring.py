"""The command keys an agent trusts across a rollover of the signing key, decided by time (an
injected `now`), and the agent's keyring file (bke.core.secrets.command_keyring,
bke.core.secrets.command_key_rollover, agent/bke_agent/command_keys.py)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from bke.contracts.agent import AgentCommand
from bke.contracts.agent_steps import TrustCommandKey, WriteFile
from bke.core.host_actions import command_refusal
from bke.core.secrets.command_key_rollover import Rollover, RolloverError, announcement, parse_overlap, retirement
from bke.core.secrets.command_keyring import CommandKeyring
from bke.core.secrets.signing import CommandSigner, SigningKeyError, sign_command
from bke_agent.command_keys import KEYRING_FILE, AgentKeyring
from bke_agent.errors import PermanentStepError
from bke_agent.verify import CommandVerifier
from bke_dispatcher.command_ids import parse_command_id

T0 = datetime(2030, 1, 1, tzinfo=timezone.utc)
OLD, NEW, OTHER = CommandSigner.generate(), CommandSigner.generate(), CommandSigner.generate()
END = T0 + timedelta(hours=24)


def _rollover() -> Rollover:
    return Rollover(NEW.verify_key.public_line, NEW.key_id, OLD.key_id, END, T0)


def _announced() -> CommandKeyring:
    return CommandKeyring.of(OLD.verify_key).trust(NEW.verify_key.public_line, OLD.key_id, END.isoformat(), T0)


def _ok(ring: CommandKeyring, signer: CommandSigner, now: datetime) -> bool:
    key, _ = ring.verify_key(signer.key_id, now)
    return key is not None


def test_a_bootstrapped_agent_trusts_its_pinned_key_alone_without_end() -> None:
    ring = CommandKeyring.of(OLD.verify_key)
    assert _ok(ring, OLD, T0 + timedelta(days=3650))
    key, why = ring.verify_key(NEW.key_id, T0)
    assert key is None and why is not None and "not the dispatcher key this agent trusts" in why


def test_during_the_overlap_both_keys_are_trusted_and_after_it_only_the_new_one() -> None:
    ring = _announced()
    assert _ok(ring, OLD, T0) and _ok(ring, NEW, T0)
    assert _ok(ring, OLD, END)  # the end itself is still within
    after = END + timedelta(seconds=1)
    key, why = ring.verify_key(OLD.key_id, after)
    assert key is None and why is not None and "retired at" in why and END.isoformat() in why
    assert _ok(ring, NEW, after)
    assert not _ok(ring, OTHER, T0)


def test_a_retire_signed_by_the_new_key_drops_the_old_one_at_once() -> None:
    ring = _announced().trust(NEW.verify_key.public_line, NEW.key_id, T0.isoformat(), T0 + timedelta(hours=1))
    assert ring.key_ids() == [NEW.key_id]
    assert not _ok(ring, OLD, T0 + timedelta(hours=1))


def test_an_overlap_only_ever_ends_earlier() -> None:
    later = END + timedelta(days=30)
    again = _announced().trust(NEW.verify_key.public_line, OLD.key_id, later.isoformat(), T0 + timedelta(hours=1))
    assert not _ok(again, OLD, END + timedelta(seconds=1))  # the first end holds
    sooner = END - timedelta(hours=12)
    shorter = _announced().trust(NEW.verify_key.public_line, OLD.key_id, sooner.isoformat(), T0)
    assert not _ok(shorter, OLD, sooner + timedelta(seconds=1))


def test_a_key_the_ring_does_not_trust_now_cannot_change_it() -> None:
    with pytest.raises(SigningKeyError, match="not the dispatcher key this agent trusts"):
        CommandKeyring.of(OLD.verify_key).trust(OTHER.verify_key.public_line, OTHER.key_id, END.isoformat(), T0)
    with pytest.raises(SigningKeyError, match="retired at"):
        _announced().trust(OTHER.verify_key.public_line, OLD.key_id, END.isoformat(), END + timedelta(seconds=1))
    with pytest.raises(SigningKeyError, match="signerNotAfter"):
        CommandKeyring.of(OLD.verify_key).trust(NEW.verify_key.public_line, OLD.key_id, "tomorrow", T0)


def test_the_keyring_text_round_trips_and_a_bad_one_names_its_source() -> None:
    ring = _announced()
    again = CommandKeyring.from_text(ring.to_text(), "x")
    assert again.to_text() == ring.to_text() and again.key_ids() == [NEW.key_id, OLD.key_id]
    with pytest.raises(SigningKeyError, match="/state/command-keys.json"):
        CommandKeyring.from_text('{"form": 1, "keys": [{"publicLine": "nope"}]}', "/state/command-keys.json")
    with pytest.raises(SigningKeyError, match=r"keys\[0\].notAfter"):
        CommandKeyring.from_text(ring.to_text().replace(END.isoformat(), "soon").replace("null", '"soon"'), "f")


def _trust_cmd(signer: CommandSigner, step_key: CommandSigner, phase: str = "command-key") -> AgentCommand:
    cmd = announcement(Rollover(step_key.verify_key.public_line, step_key.key_id, OLD.key_id, END, T0), "c1", "n1", T0)
    return sign_command(cmd.model_copy(update={"phase": phase}), signer)


def test_the_agent_keyring_writes_its_file_before_it_trusts_and_reads_it_at_start(tmp_path: Path) -> None:
    keys = AgentKeyring.load(OLD.verify_key, tmp_path, fsync=False)
    out = keys.trust(_trust_cmd(OLD, NEW).steps[0], _trust_cmd(OLD, NEW), T0)  # type: ignore[arg-type]
    assert out.status == "Succeeded" and (tmp_path / KEYRING_FILE).exists()
    assert "PRIVATE" not in (tmp_path / KEYRING_FILE).read_text()
    restarted = AgentKeyring.load(OLD.verify_key, tmp_path)  # the bootstrapped env still names OLD
    assert restarted.ring.key_ids() == [NEW.key_id, OLD.key_id]
    again = restarted.trust(_trust_cmd(OLD, NEW).steps[0], _trust_cmd(OLD, NEW), T0)  # type: ignore[arg-type]
    assert again.status == "Skipped"  # a redelivered announcement changes nothing


def test_an_agent_bootstrapped_again_with_another_key_starts_from_that_key(tmp_path: Path) -> None:
    keys = AgentKeyring.load(OLD.verify_key, tmp_path, fsync=False)
    keys.trust(_trust_cmd(OLD, NEW).steps[0], _trust_cmd(OLD, NEW), T0)  # type: ignore[arg-type]
    again = AgentKeyring.load(OTHER.verify_key, tmp_path)  # the operator's new pin wins over the old ring
    assert again.ring.key_ids() == [OTHER.key_id]
    assert again.verify_key(NEW.key_id, T0)[0] is None


def test_the_agent_takes_a_trust_step_only_in_a_command_key_command(tmp_path: Path) -> None:
    keys = AgentKeyring.load(OLD.verify_key, tmp_path, fsync=False)
    cmd = _trust_cmd(OLD, NEW, phase="certs")
    with pytest.raises(PermanentStepError, match="only in a 'command-key' command"):
        keys.trust(cmd.steps[0], cmd, T0)  # type: ignore[arg-type]
    assert not (tmp_path / KEYRING_FILE).exists()


def test_the_verifier_checks_the_key_by_the_time_it_is_given(tmp_path: Path) -> None:
    keys = AgentKeyring(_announced(), tmp_path / KEYRING_FILE)
    verifier = CommandVerifier(OLD.verify_key, "c1", "n1", keys)
    step = WriteFile(id="w", path="/etc/kubernetes/x", content_b64="eA==", sha256="0" * 64)
    plain = AgentCommand(command_id="c1/certs/n1/1", cluster="c1", node="n1", phase="certs",
                         issued_at=T0.isoformat(), steps=[step])
    assert verifier.authentic(sign_command(plain, OLD), now=T0) is None
    assert verifier.authentic(sign_command(plain, NEW), now=T0) is None
    assert "retired at" in (verifier.authentic(sign_command(plain, OLD), now=END + timedelta(seconds=1)) or "")
    assert verifier.authentic(sign_command(plain, NEW), now=END + timedelta(seconds=1)) is None
    forged = sign_command(plain, OTHER).model_copy(update={"key_id": NEW.key_id})
    assert verifier.authentic(forged, now=T0) == "bad signature"


def test_the_rollover_commands_and_record() -> None:
    r = _rollover()
    cmd = announcement(r, "c1", "n1", T0)
    step = cmd.steps[0]
    assert isinstance(step, TrustCommandKey) and cmd.phase == "command-key"
    assert step.public_line == NEW.verify_key.public_line and step.signer_not_after == END.isoformat()
    assert announcement(r, "c1", "n1", T0 + timedelta(hours=1)).command_id == cmd.command_id  # one id per node
    assert command_refusal(cmd) is None  # within what a command may carry to a node
    ret = retirement(NEW.verify_key.public_line, NEW.key_id, "c1", "n1", T0)
    assert ret.command_id != cmd.command_id
    # ids of the form the dispatcher parses every result's (it leaves these to no phase)
    assert parse_command_id(cmd.command_id)[:3] == parse_command_id(ret.command_id)[:3] == ("c1", "command-key", "n1")
    assert Rollover.from_json(r.to_json()) == r and Rollover.from_json(r.switched(T0).to_json()).stage == "switched"
    assert r.seconds_left(T0) == 86400


@pytest.mark.parametrize(("text", "seconds"), [("24h", 86400.0), ("90m", 5400.0), ("2d", 172800.0), ("3600", 3600.0)])
def test_overlaps_parse(text: str, seconds: float) -> None:
    assert parse_overlap(text) == seconds


@pytest.mark.parametrize("text", ["", "1w", "-5h", "5m"])
def test_a_bad_or_too_short_overlap_names_the_option(text: str) -> None:
    with pytest.raises(RolloverError, match="--overlap"):
        parse_overlap(text)
