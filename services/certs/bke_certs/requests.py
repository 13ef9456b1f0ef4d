"""The certs service's request/reply, served by bke.adapters.bus.responder: certificate expiry
(`bke.v1.certs.expiration.get`, any client) and the recording of an agent key BKE made
(`bke.v1.agents.provision`: the operator only, by NATS permissions). Each answers a malformed
request naming the field. No logic here (expiration.py, handlers.py decide)."""
from __future__ import annotations

from bke.adapters.bus.responder import serve_requests, typed_answer
from bke.adapters.bus.service import Service
from bke.contracts.agent import AGENTS_PROVISION, AgentProvisioned, ProvisionAgent
from bke.contracts.expiration import EXPIRATION_GET, EXPIRATION_QUEUE

from .expiration import ExpirationResponder
from .handlers import CertsHandlers

__all__ = ["PROVISION_QUEUE", "serve_certs_requests"]

PROVISION_QUEUE = "certs-provision"


def _refused(reason: str) -> AgentProvisioned:
    return AgentProvisioned(cluster="", node="", ok=False, reason=reason)


def serve_certs_requests(svc: Service, h: CertsHandlers) -> None:
    expiration = ExpirationResponder(h.store, h.now)
    # core request/reply; the queue group shares requests between replicas
    serve_requests(svc, EXPIRATION_GET, EXPIRATION_QUEUE, lambda subject, body: expiration.answer(body))
    serve_requests(svc, AGENTS_PROVISION, PROVISION_QUEUE, typed_answer(ProvisionAgent, h.on_provision, _refused))
