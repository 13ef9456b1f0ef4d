"""`bke certs renew ... --cluster C`: ask the certs service over the bus, then follow the
rotation the dispatcher runs until it finishes.

    RenewCerts -> certs: CertsRenewed (or CertsFailed: refused, unknown name, no PKI)
                   -> dispatcher: RotationChanged ... until Succeeded or Failed

Only NATS is needed: every answer is an event (the whole rotation view rides on each
`RotationChanged`). Exit codes: 0 renewed and delivered (or nothing matched), 1 refused,
failed, or no answer before the deadline.
"""
from __future__ import annotations

import uuid
from typing import Any

from rich.console import Console

from bke.adapters.bus.connect import BusAccess
from bke.contracts.certs import CERTS_FAILED, CERTS_RENEWED, RENEW_CERTS, RenewCerts
from bke.contracts.rotation import rotation_subject
from bke.contracts.statuses import NodeStatus

from .follow import Follow, Progress, Views, ended, exit_with, follow, publish, refused
from .output import EXIT_FAILURE, EXIT_OK

__all__ = ["renew_and_follow"]


async def renew_and_follow(nats_url: BusAccess | str, cluster: str, names: list[str], within_days: float | None,
                           timeout: float, console: Console) -> int:
    rid = str(uuid.uuid4())
    req = RenewCerts(request_id=rid, cluster=cluster, names=names, within_days=within_days)

    def renewed(doc: dict[str, Any]) -> int | None:
        certs = doc.get("certificates") or []
        if not certs:
            console.print(f"{cluster}: no certificate matched; nothing renewed")
            return EXIT_OK
        for c in certs:
            console.print(f"renewed {c['instance']} (serial {c['serial']}, expires {c['notAfter']}) for {', '.join(c['nodes'])}")
        return None  # the rotation that delivers them follows

    def gave_up(seen: Progress) -> int:
        what = "the rotation did not finish" if seen.answered else "no answer from the certs service"
        return exit_with(EXIT_FAILURE, [f"{what} within {timeout:.0f}s (cluster {cluster}, request {rid}); "
                                        "`bke status` shows where it is"])

    return await follow(nats_url, Follow(
        request_id=rid, send=publish(RENEW_CERTS, req.to_bytes(), f"renew:{cluster}:{rid}"), gave_up=gave_up,
        answers={CERTS_FAILED: refused(lambda doc: [f"renewal in {cluster} refused: {doc.get('reason')}"], EXIT_FAILURE),
                 CERTS_RENEWED: renewed},
        views=Views(rotation_subject(cluster), "rotation", _progress, console.print,
                    end=ended(lambda rot: [f"rotation in {cluster} failed: {rot.get('message')}"]))), timeout)


def _progress(rot: dict[str, Any]) -> str:
    running = [n["hostname"] for n in rot.get("nodes", []) if n["status"] == NodeStatus.RUNNING]
    where = f", now {', '.join(running)}" if running else ""
    return f"rotation {rot['status']}: {rot['done']}/{rot['total']} nodes{where}"
