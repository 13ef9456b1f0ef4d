"""`bke certs renew ... --cluster C`: ask the certs service over the bus, then follow the
rotation the dispatcher runs until it finishes.

    RenewCerts -> certs: CertsRenewed (or CertsFailed: refused, unknown name, no PKI)
                   -> dispatcher: RotationChanged ... until Succeeded or Failed

Only NATS is needed: every answer is an event (the whole rotation view rides on each
`RotationChanged`). Exit codes: 0 renewed and delivered (or nothing matched), 1 refused,
failed, or no answer before the deadline.
"""
from __future__ import annotations

import time
import uuid

from bke.contracts.base import schema_headers
from bke.adapters.bus.connect import BusAccess, connect_nats
from rich.console import Console

from bke.adapters.bus import EventWatch
from bke.adapters.bus.streams import require_streams
from bke.contracts.certs import CERTS_FAILED, CERTS_RENEWED, RENEW_CERTS, RenewCerts
from bke.contracts.rotation import rotation_subject

from .output import EXIT_FAILURE, EXIT_OK, error_lines

__all__ = ["renew_and_follow"]


async def renew_and_follow(nats_url: BusAccess | str, cluster: str, names: list[str], within_days: float | None,
                           timeout: float, console: Console) -> int:
    rid = str(uuid.uuid4())
    req = RenewCerts(request_id=rid, cluster=cluster, names=names, within_days=within_days)
    deadline = time.monotonic() + timeout
    nc = await connect_nats(nats_url)
    try:
        async with EventWatch(nc, [CERTS_RENEWED, CERTS_FAILED, rotation_subject(cluster)]) as watch:
            js = nc.jetstream()
            await require_streams(js)
            await js.publish(RENEW_CERTS, req.to_bytes(), headers=schema_headers({"Nats-Msg-Id": f"renew:{cluster}:{rid}"}))
            seen, renewed, last = 0, False, ""
            while time.monotonic() < deadline:
                for e in watch.seen[seen:]:
                    if e.subject == CERTS_FAILED and e.data.get("requestId") == rid:
                        error_lines([f"renewal in {cluster} refused: {e.data.get('reason')}"])
                        return EXIT_FAILURE
                    if e.subject == CERTS_RENEWED and e.data.get("requestId") == rid:
                        certs = e.data.get("certificates") or []
                        if not certs:
                            console.print(f"{cluster}: no certificate matched; nothing renewed")
                            return EXIT_OK
                        for c in certs:
                            console.print(f"renewed {c['instance']} (serial {c['serial']}, expires {c['notAfter']}) "
                                          f"for {', '.join(c['nodes'])}")
                        renewed = True
                    rot = e.data.get("rotation") or {}
                    if e.subject == rotation_subject(cluster) and rot.get("requestId") == rid:
                        line = _progress(rot)
                        if line != last:
                            console.print(line)
                            last = line
                        if rot["status"] == "Succeeded":
                            return EXIT_OK
                        if rot["status"] == "Failed":
                            error_lines([f"rotation in {cluster} failed: {rot.get('message')}"])
                            return EXIT_FAILURE
                seen = len(watch.seen)
                await watch.wait_more(seen, timeout=max(0.1, min(1.0, deadline - time.monotonic())))
            what = "the rotation did not finish" if renewed else "no answer from the certs service"
            error_lines([f"{what} within {timeout:.0f}s (cluster {cluster}, request {rid}); `bke status` shows where it is"])
            return EXIT_FAILURE
    finally:
        await nc.close()


def _progress(rot: dict) -> str:
    running = [n["hostname"] for n in rot.get("nodes", []) if n["status"] == "Running"]
    where = f", now {', '.join(running)}" if running else ""
    return f"rotation {rot['status']}: {rot['done']}/{rot['total']} nodes{where}"
