"""Fault scenarios run whole labs (real NATS, Redis, etcd; every service and agent a process),
one per test, always taken down by PID: the e2e fixture."""
from __future__ import annotations

from ..e2e.conftest import lab_factory

__all__ = ["lab_factory"]
