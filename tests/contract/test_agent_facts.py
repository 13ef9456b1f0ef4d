"""The agent facts' request and reply (bke.contracts.agent_facts): a full chunk's reply, every
field at its longest, stays well under NATS' 1 MiB payload; a request larger than a chunk, or a
host name longer than a hostname, is refused by the contract itself, and so is a time without its
zone (which the upgrader could not compare with its own)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from bke.contracts.agent import AgentRuntime
from bke.contracts.agent_facts import MAX_HOSTS, AgentFacts, GetAgentFacts, HostFacts, parse_agent_facts_reply
from bke.contracts.status import StatusError

NATS_MAX_PAYLOAD = 1024 * 1024


def _longest(i: int) -> HostFacts:
    runtime = AgentRuntime(agent_version="1.2.3-" + "a" * 58, python="3.11", implementation="c" * 32, machine="m" * 32,
                           libc="glibc", libc_version="123.123", command_binding=1000)
    return HostFacts(hostname=f"{i:05d}" + "h" * 248, last_heartbeat=datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=timezone(timedelta(hours=-9, minutes=-30))),
                     cgroup_version=2, runtime=runtime)


def test_a_full_chunk_s_reply_at_its_largest_stays_under_half_the_payload_limit() -> None:
    reply = AgentFacts(cluster="c" * 253, hosts=[_longest(i) for i in range(MAX_HOSTS)])
    assert len(reply.to_bytes()) < NATS_MAX_PAYLOAD // 2
    assert parse_agent_facts_reply(reply.to_bytes()) == reply
    ask = GetAgentFacts(cluster="c" * 253, hosts=[f"{i:05d}" + "h" * 248 for i in range(MAX_HOSTS)])
    assert len(ask.to_bytes()) < NATS_MAX_PAYLOAD // 2


def test_an_error_reply_reads_as_one_and_an_oversized_request_is_refused() -> None:
    err = StatusError(reason="Unavailable", cluster="c", message="state lost")
    assert parse_agent_facts_reply(err.to_bytes()) == err
    with pytest.raises(ValidationError, match="hosts"):
        GetAgentFacts(cluster="c", hosts=[f"n{i}" for i in range(MAX_HOSTS + 1)])
    with pytest.raises(ValidationError, match="hosts.0"):
        GetAgentFacts(cluster="c", hosts=["h" * 254])
    with pytest.raises(ValidationError, match="hosts"):
        GetAgentFacts(cluster="c", hosts=[])
    with pytest.raises(ValidationError, match="lastHeartbeat"):
        AgentFacts.model_validate_json(b'{"cluster": "c", "hosts": [{"hostname": "n1", "lastHeartbeat": "2026-01-02T03:04:05"}]}')
