"""The certs service's domain figure on /metrics, read from its own store when scraped:

    bke_certificates{cluster,expires_within}   certificates (CAs included) by time left:
                                               expired, 7d, 30d, 90d, later (expiry_view.BUCKETS)
"""
from __future__ import annotations

from datetime import datetime
from typing import Any, Callable

from .expiry_view import ExpiryView, expiry_buckets

__all__ = ["CertsFigures", "watch_metrics"]


class CertsFigures:
    def __init__(self, metrics: Any, view: ExpiryView, now: Callable[[], datetime]):
        self.view, self.now = view, now
        self.certs = metrics.gauge("bke_certificates", "Certificates by time left before they expire, per cluster",
                                   ["cluster", "expires_within"])

    async def refresh(self) -> None:
        now = self.now()
        figures = {c: expiry_buckets(rows, now) for c, rows in (await self.view.all_rows(now)).items()}
        self.certs.clear()  # then set, with no await between: a removed cluster's series goes
        for cluster, buckets in figures.items():
            for bucket, n in buckets.items():
                self.certs.labels(cluster, bucket).set(n)


def watch_metrics(svc: Any, view: ExpiryView, now: Callable[[], datetime]) -> CertsFigures:
    figures = CertsFigures(svc.metrics, view, now)
    svc.metrics.refreshers.append(figures.refresh)
    return figures
