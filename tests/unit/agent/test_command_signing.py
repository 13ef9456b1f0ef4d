"""Commands are run only if the dispatcher signed them for this node and they are fresh: the
verification table, and the loop's answer to each case (nothing runs unless valid; a replayed
id is answered from the journal without running, even after its validity)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from bke.contracts.agent import AgentCommand, CLOCK_SKEW_S, COMMAND_VALIDITY_S, CommandRefused, CommandResult
from bke.contracts.agent_steps import HealthProbe, NewFile, ReplaceFiles, RunProgram, WaitHealth
from bke.core.secrets import SecretBox
from bke.core.secrets.signing import CommandSigner, ensure_command_key_sync, sign_command, signed_command_bytes, signed_part
from bke_agent import AgentIdentity, AgentLoop, AgentSettings, MemoryJournal, NullBackend
from bke_agent.verify import CommandVerifier, NoCommandKey, load_command_key
from tests.trust_helpers import SIGNER, signed
from tests.unit.agent.test_agent_handling import FakeJS, FakeMsg

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)
OTHER = CommandSigner.generate()


def _cmd(**kw: object) -> AgentCommand:
    base: dict[str, object] = dict(command_id="c1/node-env/n1/0", cluster="c1", node="n1", phase="node-env",
                                   issued_at=NOW.isoformat(), steps=[RunProgram(id="s", argv=["swapoff", "-a"])])
    base.update(kw)
    return AgentCommand(**base)  # type: ignore[arg-type]


def _tampered() -> AgentCommand:
    good = signed(_cmd())
    return good.model_copy(update={"steps": [RunProgram(id="s", argv=["/bin/sh", "-c", "id"])]})


CASES = [
    ("valid", lambda: signed(_cmd()), NOW, None),
    ("unsigned", lambda: _cmd(), NOW, "unsigned command"),
    ("tampered step", _tampered, NOW, "bad signature"),
    ("tampered phase", lambda: signed(_cmd()).model_copy(update={"phase": "other"}), NOW, "bad signature"),
    ("tampered expiry", lambda: signed(_cmd()).model_copy(update={"expires_at": (NOW + timedelta(days=99)).isoformat()}),
     NOW, "bad signature"),
    ("wrong key", lambda: signed(_cmd(), OTHER), NOW, "not the dispatcher key"),
    ("wrong key, right key id", lambda: signed(_cmd(), OTHER).model_copy(update={"key_id": SIGNER.key_id}), NOW,
     "bad signature"),
    ("other node", lambda: signed(_cmd(node="n2")), NOW, "for node 'n2'"),
    ("other cluster", lambda: signed(_cmd(cluster="c2")), NOW, "of cluster 'c2'"),
    ("expired", lambda: signed(_cmd()), NOW + timedelta(seconds=COMMAND_VALIDITY_S + 1), "expired at"),
    ("still valid at the end", lambda: signed(_cmd()), NOW + timedelta(seconds=COMMAND_VALIDITY_S - 1), None),
    ("not yet valid", lambda: signed(_cmd()), NOW - timedelta(hours=1), "not valid before"),
    ("within clock skew", lambda: signed(_cmd()), NOW - timedelta(minutes=2), None),
    ("validity too long", lambda: sign_command(_cmd(), SIGNER, COMMAND_VALIDITY_S * 2), NOW, "validity longer"),
]


@pytest.mark.parametrize("make,at,reason", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_verification_table(make, at, reason) -> None:
    v = CommandVerifier(SIGNER.verify_key, "c1", "n1")
    cmd = make()
    why = v.authentic(cmd) or v.fresh(cmd, at)
    if reason is None:
        assert why is None
    else:
        assert why is not None and reason in why


def _loop(events: list[str], js: FakeJS, journal: MemoryJournal, now: datetime) -> tuple[AgentLoop, NullBackend]:
    backend = NullBackend()
    loop = AgentLoop(None, js, AgentSettings(cluster="c1", node="n1", heartbeat_s=0), backend, journal,  # type: ignore[arg-type]
                     AgentIdentity.ephemeral(), verifier=CommandVerifier(SIGNER.verify_key, "c1", "n1"), now=lambda: now)
    return loop, backend


@pytest.mark.parametrize("make,at,reason", [c[1:] for c in CASES if c[3] is not None], ids=[c[0] for c in CASES if c[3]])
async def test_the_loop_runs_nothing_it_refuses_and_reports_why(make, at, reason) -> None:
    events: list[str] = []
    js = FakeJS(events)
    loop, backend = _loop(events, js, MemoryJournal(), at)
    await loop._on_msg(FakeMsg(make().to_bytes(), events))  # type: ignore[arg-type]
    assert events == ["publish:refused", "term"] and backend.steps_run == 0
    [(subject, body)] = js.published
    assert subject == "bke.v1.agent.c1.n1.refused"
    ev = CommandRefused.model_validate_json(body)
    assert reason in ev.reason and ev.command_id == make().command_id and ev.node == "n1"


async def test_a_replayed_id_is_answered_from_the_journal_without_running_even_when_stale() -> None:
    events: list[str] = []
    js = FakeJS(events)
    journal = MemoryJournal()
    cmd = signed(_cmd()).to_bytes()
    loop, backend = _loop(events, js, journal, NOW)
    await loop._on_msg(FakeMsg(cmd, events))  # type: ignore[arg-type]
    assert backend.steps_run == 1
    # captured and replayed later: within its validity, and after it (the journal outlives it)
    for later in (NOW + timedelta(days=1), NOW + timedelta(seconds=COMMAND_VALIDITY_S + 60)):
        loop.now = lambda later=later: later  # type: ignore[misc]
        await loop._on_msg(FakeMsg(cmd, events))  # type: ignore[arg-type]
    assert backend.steps_run == 1 and loop.replayed == 2
    results = [CommandResult.model_validate_json(b) for s, b in js.published]
    assert [r.replayed for r in results] == [False, True, True]


def test_journal_outlives_the_validity_window() -> None:
    """Why a replay is answered or refused, never run again: a result is kept past its command's
    expiry (journal.EXPIRED_KEPT_S), and a bare one longer than a command is valid (commands 7
    days, the agent stream's max age), whatever `journal_keep_days` says."""
    from bke.adapters.bus.streams import STREAMS
    from bke_agent.journal import EXPIRED_KEPT_S

    agent_stream = next(s for s in STREAMS if s.name == "BKE_AGENT")
    assert COMMAND_VALIDITY_S <= agent_stream.max_age_s
    assert EXPIRED_KEPT_S > CLOCK_SKEW_S
    assert AgentSettings(cluster="c", node="n").journal_keep_days * 86400 > COMMAND_VALIDITY_S + CLOCK_SKEW_S


def test_the_signing_key_is_made_once_and_stored_encrypted(tmp_path) -> None:
    class Store(dict):
        def get(self, name):  # type: ignore[override]
            return super().get(name)

        def set(self, name, value, nx=False):
            if nx and name in self:
                return None
            self[name] = value
            return True

    box = SecretBox(b"k" * 32)
    store = Store()
    one = ensure_command_key_sync(store, "key", box)
    two = ensure_command_key_sync(store, "key", box)
    assert one.key_id == two.key_id
    blob = store["key"]
    raw = one._key.private_bytes_raw()  # noqa: SLF001 - the test checks the clear key is not stored
    assert raw not in blob
    with pytest.raises(Exception, match="(?i)key"):
        ensure_command_key_sync(store, "key", SecretBox(b"x" * 32))


def test_an_agent_without_a_provisioned_key_refuses_to_start(tmp_path) -> None:
    with pytest.raises(NoCommandKey, match="BKE_AGENT_COMMAND_KEY"):
        load_command_key(None, tmp_path)
    (tmp_path / "command.pub").write_text(SIGNER.verify_key.public_line + "\n")
    assert load_command_key(None, tmp_path).key_id == SIGNER.key_id
    assert load_command_key(OTHER.verify_key.public_line, tmp_path).key_id == OTHER.key_id  # env first
    with pytest.raises(NoCommandKey, match="unusable"):
        load_command_key("bke-command-ed25519 !!", tmp_path)


# The sender's form that carries the signed bytes as they are (signing.signed_command_bytes):
# the same command as sign_command's, and verified over exactly those bytes.

def _replace_cmd() -> AgentCommand:
    files = [NewFile(path="/etc/kubernetes/kubelet.conf", content_b64="aGVsbG8gw6k=", sha256="a" * 64),
             NewFile(path="/usr/local/bin/kubelet", mode=0o755, url="http://repo/kubelet-1.34.1", sha256="b" * 64)]
    return _cmd(phase="upgrade:workers", issuer="upgrader", steps=[
        ReplaceFiles(id="replace:runtime", files=files, restart_units=["kubelet.service"],
                     probes=[HealthProbe(url="http://127.0.0.1:10248/healthz")], timeout_s=300.0),
        WaitHealth(id="health:0", url="https://127.0.0.1:6443/livez", expect_body="ok é", kernel_below="4.19")])


@pytest.mark.parametrize("make", [_cmd, _replace_cmd], ids=["run-program", "replace-files"])
def test_the_sent_form_is_the_signed_command_and_its_signed_bytes_are_the_canonical_ones(make) -> None:
    body = signed_command_bytes(make(), SIGNER)
    parsed = AgentCommand.model_validate_json(body)
    assert parsed == signed(make())  # what the agent reads is what sign_command signs
    assert signed_part(body, parsed.signature_b64) == parsed.signing_bytes()
    assert signed_part(parsed.to_bytes(), parsed.signature_b64) is None  # another form: checked as before
    assert CommandVerifier(SIGNER.verify_key, "c1", "n1").authentic(parsed, body) is None


def _edited(body: bytes, old: bytes, new: bytes) -> bytes:
    assert old in body
    return body.replace(old, new, 1)


SENT_FORM_CASES = [
    ("tampered step", lambda b: _edited(b, b'"swapoff"', b'"id"'), "bad signature"),
    ("signature repeated at the end", lambda b: b[:-1] + b',"signatureB64":"' + b.split(b'"')[3] + b'"}', "bad signature"),
    ("another signature at the end", lambda b: b[:-1] + b',"signatureB64":"' + OTHER.sign(b"x").encode() + b'"}',
     "bad signature"),
    ("wrong key", lambda b: signed_command_bytes(_cmd(), OTHER), "not the dispatcher key"),
]


@pytest.mark.parametrize("edit,reason", [c[1:] for c in SENT_FORM_CASES], ids=[c[0] for c in SENT_FORM_CASES])
async def test_the_loop_refuses_a_changed_body_of_the_sent_form(edit, reason) -> None:
    events: list[str] = []
    js = FakeJS(events)
    loop, backend = _loop(events, js, MemoryJournal(), NOW)
    await loop._on_msg(FakeMsg(edit(signed_command_bytes(_cmd(), SIGNER)), events))  # type: ignore[arg-type]
    assert events == ["publish:refused", "term"] and backend.steps_run == 0
    assert reason in CommandRefused.model_validate_json(js.published[0][1]).reason


async def test_the_loop_runs_a_command_of_the_sent_form() -> None:
    events: list[str] = []
    js = FakeJS(events)
    loop, backend = _loop(events, js, MemoryJournal(), NOW)
    await loop._on_msg(FakeMsg(signed_command_bytes(_cmd(), SIGNER), events))  # type: ignore[arg-type]
    assert backend.steps_run == 1 and loop.executed == 1 and events[-1] == "ack"
