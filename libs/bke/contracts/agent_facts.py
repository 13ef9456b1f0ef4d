"""What the agents' heartbeats told the dispatcher about their nodes, asked of the dispatcher
(core NATS request/reply on `AGENT_FACTS_GET`): the one service that hears agents keeps these
facts, and another service asks for them rather than reading its keys.

    GetAgentFacts   upgrader -> dispatcher   a cluster and up to MAX_HOSTS hostnames
    AgentFacts      the reply                per host asked, in the order asked: its agent's last
                                             heartbeat, the cgroup version and the runtime (version,
                                             Python, platform) it reports; None where nothing is known
    StatusError     the reply                Invalid (the request does not parse: its field), or
                                             Unavailable (the dispatcher's state is lost or its store
                                             away: ask again later)

The upgrader reads them before it accepts an upgrade (which agents are alive, which hosts run
cgroup v1) and in the agents step (each node's wheels follow its runtime).

Size: a reply must stay under NATS' 1 MiB payload. One host's facts are bounded (a hostname of
253 characters, a time, a runtime whose every field has a maximum length): under 1 KiB, so
MAX_HOSTS of them stay under half of it (tests/contract holds that). A caller with more hosts asks
in chunks of MAX_HOSTS, side by side.
"""
from __future__ import annotations

from typing import Annotated, Final, Literal, Union

from pydantic import AwareDatetime, Field, TypeAdapter

from .agent import AgentRuntime
from .base import Message
from .channel import Channel
from .status import StatusError

__all__ = ["AGENT_FACTS_GET", "AGENT_FACTS_QUEUE", "AGENT_FACTS_VERSION", "CHANNELS", "MAX_HOSTS", "AgentFacts",
           "GetAgentFacts", "HostFacts", "parse_agent_facts_reply"]

AGENT_FACTS_GET = "bke.v1.agent-facts.get"
AGENT_FACTS_QUEUE = "dispatcher-agent-facts"  # dispatcher replicas share the requests
AGENT_FACTS_VERSION: Final = "bke.v1/AgentFacts"
MAX_HOSTS = 500  # per request: see the module docstring

Hostname = Annotated[str, Field(min_length=1, max_length=253)]


class GetAgentFacts(Message):
    """Request: the facts of these hosts of `cluster`."""

    cluster: str = Field(min_length=1, max_length=253)
    hosts: list[Hostname] = Field(min_length=1, max_length=MAX_HOSTS)


class HostFacts(Message):
    hostname: str
    # when its agent was last heard (a heartbeat, or an answer to a health command), with its
    # zone; None: never, or the node is not of the cluster
    last_heartbeat: AwareDatetime | None = None
    # the host's cgroup version as its agent reports it; None: not reported (an older agent, a lab node)
    cgroup_version: Literal[1, 2] | None = None
    # what its agent runs and runs on; None: not reported (an agent older than that report)
    runtime: AgentRuntime | None = None


class AgentFacts(Message):
    api_version: Literal["bke.v1/AgentFacts"] = AGENT_FACTS_VERSION
    cluster: str
    hosts: list[HostFacts]  # one per host asked, in the order asked


AgentFactsReply = Annotated[Union[AgentFacts, StatusError], Field(discriminator="api_version")]
_REPLY: TypeAdapter[AgentFacts | StatusError] = TypeAdapter(AgentFactsReply)


def parse_agent_facts_reply(data: bytes) -> AgentFacts | StatusError:
    return _REPLY.validate_json(data)


CHANNELS: tuple[Channel, ...] = (
    Channel(AGENT_FACTS_GET, GetAgentFacts, "request", f"Each named host's agent facts as the dispatcher recorded them from heartbeats: the last one's time, the cgroup version and the runtime it reports (queue group dispatcher-agent-facts; core NATS, not stored); the upgrader asks before an upgrade and for its agents step, in chunks of at most {MAX_HOSTS} hosts.", ("upgrader",), ("dispatcher",), (AgentFacts, StatusError)),
)
