"""The authority's side of an agent's renewal: a new JWT for the key the agent already holds.

Who runs it: whoever holds the NATS authority (the `authority` at-rest key and the Redis admin
user): `bke identities serve-renewals`, as the `renewer` bus identity, which may hear the renewal
requests and answer each once, nothing else. No service holds the authority, so none answers.

A request is answered only when all of these hold (`refusal`, pure; the reason otherwise):

    the subject is the node's own     the body names the node of the subject it came on (the
                                      server lets only that node's identity publish there)
    the reply is the node's inbox     else no answer at all: an answer is never sent elsewhere
    signed by the key it renews       the nkey's signature over the request (its seed is the
                                      proof; the seed itself never travels)
    fresh                             asked within MAX_AGE_S of the renewer's clock
    the node's live, recorded key     the registry's record for `agent.<cluster>.<node>` is not
                                      revoked and holds this key; the authority has no
                                      revocation for it (bke.adapters.auth.registry.renew_same_key)
    due, or behind                    in the last third of its life, or the agent holds an older
                                      JWT than the record (a renewal whose answer it missed)
"""
from __future__ import annotations

import asyncio
import base64
import binascii
import logging
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from bke.contracts.agent import token_node
from bke.contracts.identity import AGENT_IDENTITY_RENEW, AgentIdentityRenewed, RenewAgentIdentity, renew_identity_subject
from .jwt import verify_nkey
from .permissions import identity_name, inbox_prefix
from .registry import IdentityRecord, IdentityRegistry, UnknownIdentity

__all__ = ["MAX_AGE_S", "QUEUE", "RENEW_ALL", "AgentRenewalResponder", "refusal"]

log = logging.getLogger(__name__)
MAX_AGE_S = 300  # how far the request's `at` may be from the renewer's clock (either way)
QUEUE = "renewer"  # replicas of the renewer share the requests
RENEW_ALL = AGENT_IDENTITY_RENEW.replace("{cluster}", "*").replace("{node}", "*")


def _signed(req: RenewAgentIdentity) -> bool:
    try:
        sig = base64.b64decode(req.signature, validate=True)
    except (binascii.Error, ValueError):
        return False
    return verify_nkey(req.public_key, req.signed_bytes(), sig)


def refusal(req: RenewAgentIdentity, subject: str, record: IdentityRecord | None, now: int) -> str | None:
    """Why this request is not answered with a new JWT (None: it is). Pure: `record` is the
    registry's record of the node's identity, `now` the renewer's clock."""
    if subject != renew_identity_subject(req.cluster, req.node):
        return f"asked on {subject} for another node ({req.cluster}/{req.node})"
    if not _signed(req):
        return "not signed by the key it renews"
    if abs(now - req.at) > MAX_AGE_S:
        return f"asked at {req.at}, more than {MAX_AGE_S}s from now ({now})"
    if record is None or not record.active:
        return f"identity {identity_name('agent', req.cluster, req.node)}: never issued, or revoked"
    if record.public != req.public_key:
        return "the key is not the one provisioned for this node"
    if record.jti == req.jti and not record.due(now):
        return "not due: more than a third of its lifetime is left"
    return None


class AgentRenewalResponder:
    """Answers renewal requests on the bus until stopped; the registry (blocking Redis) is used
    from a thread, one request at a time."""

    def __init__(self, nc: Any, registry: IdentityRegistry, clock: Callable[[], int]) -> None:
        self.nc, self.registry, self.clock = nc, registry, clock
        self._sub: Any = None
        self.answered = 0  # renewals issued by this process
        self.refused = 0

    async def start(self) -> None:
        self._sub = await self.nc.subscribe(RENEW_ALL, queue=QUEUE, cb=self._on_request)
        await self.nc.flush()

    async def stop(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()
            self._sub = None

    async def _on_request(self, msg: Any) -> None:
        try:
            req = RenewAgentIdentity.model_validate_json(msg.data)
        except ValidationError as exc:
            log.warning("renewal request on %s: malformed (%d errors); not answered", msg.subject, exc.error_count())
            return
        # the inbox of the node whose subject it came on (only that node could publish there),
        # whatever node the body names (a body naming another node is refused in the answer)
        _, _, _, cluster, token, _ = msg.subject.split(".")
        own_inbox = inbox_prefix(identity_name("agent", cluster, token_node(token))) + "."
        if not msg.reply or not msg.reply.startswith(own_inbox):
            log.warning("renewal request on %s: its reply is not the node's inbox; not answered", msg.subject)
            return
        answer = await asyncio.to_thread(self.answer, req, msg.subject)
        await msg.respond(answer.to_bytes())

    def answer(self, req: RenewAgentIdentity, subject: str) -> AgentIdentityRenewed:
        """The reply to one request (blocking: reads and writes the registry)."""
        name, now = identity_name("agent", req.cluster, req.node), self.clock()
        ids = {"cluster": req.cluster, "node": req.node}
        reason = refusal(req, subject, self.registry.get(name), now)
        if reason is None:
            try:
                record, token = self.registry.renew_same_key(name, req.public_key)
            except UnknownIdentity as exc:
                reason = str(exc)
            else:
                self.answered += 1
                log.info("renewed %s until %s (same key %s)", name, record.expires_at, record.public, extra=ids)
                return AgentIdentityRenewed(cluster=req.cluster, node=req.node, ok=True, jwt=token,
                                            expires_at=record.expires_at)
        self.refused += 1
        log.warning("renewal of %s refused: %s", name, reason, extra=ids)
        return AgentIdentityRenewed(cluster=req.cluster, node=req.node, ok=False, reason=reason)
