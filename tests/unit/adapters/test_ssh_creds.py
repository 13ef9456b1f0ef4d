"""`bke agent bootstrap` ships the node's NATS identity: a 0600 file the environment names,
never printed."""
from __future__ import annotations

from pathlib import Path

from bke.adapters.auth import agent_permissions, new_authority
from bke.adapters.ssh.bootstrap import describe_steps
from bke.adapters.ssh.layout import CREDS_PATH
from bke.adapters.ssh.plan import BootstrapParams, Inline, bootstrap_steps

WHEEL = Path("bke-0.1.0-py3-none-any.whl")


def _params(creds: str | None) -> BootstrapParams:
    return BootstrapParams(cluster="c1", node="w1.example.com", nats_url="nats://10.0.0.1:4222", wheel=WHEEL,
                           requirements=Path("requirements-agent.txt"), nats_creds=creds)


def test_the_creds_file_is_staged_and_installed_0600_and_named_in_the_environment() -> None:
    creds = new_authority().user("agent.c1.w1_example_com", agent_permissions("c1", "w1.example.com"), iat=1).creds
    steps = {s.name: s for s in bootstrap_steps(_params(creds))}
    upload = next(u for s in steps.values() for u in s.uploads if u.name == "nats.creds")
    assert upload.mode == 0o600 and isinstance(upload.source, Inline) and upload.source.secret
    assert upload.source.text == creds
    assert steps["write-creds"].argv[-3:] == ("0600", ".bke-bootstrap/nats.creds", CREDS_PATH)
    env = next(u for s in steps.values() for u in s.uploads if u.name == "env").source
    assert isinstance(env, Inline)
    assert f"BKE_NATS_CREDS={CREDS_PATH}" in env.text.splitlines()
    assert "BKE_NATS_INBOX_PREFIX=_INBOX_agent__c1__w1_example_com" in env.text.splitlines()
    order = list(steps)
    assert order.index("config-dir") < order.index("write-creds") < order.index("restart")
    seed = creds.split("BEGIN USER NKEY SEED-----\n", 1)[1].split("\n", 1)[0]
    assert seed not in "\n".join(describe_steps(tuple(steps.values())))


def test_without_creds_nothing_changes() -> None:
    steps = bootstrap_steps(_params(None))
    assert "write-creds" not in {s.name for s in steps}
    assert not any(u.name == "nats.creds" for s in steps for u in s.uploads)
