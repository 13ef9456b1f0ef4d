"""Dispatcher wiring: the composition root, a list of registrations, each in the module of
`wiring/` named after what it wires (the operations beside the install register themselves,
ops/wiring.py). No logic here (ops/install and decide.py run the install, ops/ the operations,
results.py and service_events.py decide what an answer changes, status.py what a client reads)."""
from __future__ import annotations

from bke.adapters.bus.responder import serve_requests
from bke.adapters.bus.service import Service
from bke.adapters.forgetting import serve_deleted
from bke.contracts.agent import AGENTS_COMMAND_KEY
from bke.contracts.status import STATUS_GET, STATUS_QUEUE

from .command_key import CommandKeyCarrier
from .known import KnownTargets
from .settings import DispatcherSettings
from .wiring.answers import wire_answers
from .wiring.basics import basics
from .wiring.cluster_api import cluster_api
from .wiring.forgotten import Forgotten
from .wiring.heartbeats import serve_heartbeats
from .wiring.lifecycle import run_loops, watch_state
from .wiring.loops import wire_loops
from .wiring.node_commands import serve_node_commands
from .wiring.reads import COMMAND_KEY_QUEUE, command_key_answer, wire_reads

__all__ = ["create_service"]


def create_service(settings: DispatcherSettings | None = None) -> Service:
    # the service, its store and the records over it, its signing key, its clock
    b = basics(settings or DispatcherSettings())
    # the install's local phases, node marks and drains: the cluster's API, or the lab's stand-ins
    api = cluster_api(b)
    # the install's loop, the health rounds, the operations beside the install; the pause over them
    loops = wire_loops(b, api)
    # a command-key rollover's announcements to every accepted agent, and their acknowledgements
    command_keys = CommandKeyCarrier(b.redis, b.signing.sign_bytes, b.svc.publish, b.now,
                                     b.settings.command_key_announce_s)
    # state lost (bke.adapters.state.epoch): the loops stop, the running installs fail; restored: resumed
    epoch = watch_state(b, loops)
    status = wire_reads(b, epoch)  # /metrics, the dashboard, the status reader
    known, forgotten = KnownTargets(b.state, b.plans), Forgotten(b.redis)
    # the planner's, renderer's and certs service's events, the agents' results and refusals, retries
    wire_answers(b, loops, command_keys, known, forgotten)
    # the upgrader's node commands: signed and sent here, their answers sent back on (results.py)
    serve_node_commands(b, forgotten)
    # a deleted cluster's agents still beat until their identities are revoked: no key comes back
    serve_deleted(b.svc, b.redis, b.now, after=forgotten.add)
    serve_heartbeats(b, known, forgotten, epoch)
    # core request/reply; the queue group shares requests between replicas
    serve_requests(b.svc, STATUS_GET, STATUS_QUEUE, lambda subject, body: status.answer(body))
    serve_requests(b.svc, AGENTS_COMMAND_KEY, COMMAND_KEY_QUEUE, command_key_answer(b.signing))
    # once started: the loops resume, the rollover's announcements run; at stop, both end first
    run_loops(b, loops, ("command-key", command_keys.run))
    return b.svc
