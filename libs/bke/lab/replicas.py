"""N processes of every service in one lab: what a deployment with `replicas: N` runs.

Replicas of a service share everything but their process: the same NATS identity and Redis
ACL user, the same durable JetStream consumers (so the server splits the messages between
them), the same leases (so one of them drives a cluster's operation at a time). The first
replica is the service's usual process (key `dispatcher` in processes.json, logs/dispatcher.log);
replica i > 1 is keyed `dispatcher.<i>` (logs/dispatcher.<i>.log), so everything that knows one
process per service (`stop_service("dispatcher")`, the e2e helpers) keeps working and `bke lab
down` stops them all by PID. The other replicas serve HTTP (bke.adapters.http) on a free port each.

The count comes from `bke lab install --replicas N` or BKE_LAB_REPLICAS.
"""
from __future__ import annotations

import os

from bke.adapters.runtime import RuntimeInfo
from bke.adapters.runtime.processes import pid_alive
from .supervisor import SERVICES, LabSupervisor, lab_env

__all__ = ["MAX_REPLICAS", "REPLICAS_ENV", "ensure_replicas", "replica_count", "replica_key", "replica_keys"]

REPLICAS_ENV = "BKE_LAB_REPLICAS"
MAX_REPLICAS = 8  # a lab on one machine: more would only measure the machine's cores


def replica_key(service: str, index: int) -> str:
    """The replica's name in processes.json and its log file's stem (index from 1)."""
    return service if index == 1 else f"{service}.{index}"


def replica_keys(service: str, pids: dict[str, int]) -> list[str]:
    """The keys of `service`'s processes recorded in processes.json's "services", first one first."""
    others = sorted((k for k in pids if k.startswith(f"{service}.") and k[len(service) + 1:].isdigit()),
                    key=lambda k: int(k[len(service) + 1:]))
    return ([service] if service in pids else []) + others


def replica_count(value: str | int | None = None) -> int:
    """The validated count: `value` (an option), else BKE_LAB_REPLICAS, else 1. A bad one is a
    ValueError naming where it came from."""
    where = "--replicas"
    if value is None:
        value, where = os.environ.get(REPLICAS_ENV, "1"), REPLICAS_ENV
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: {value!r} is not a whole number of replicas") from None
    if not 1 <= n <= MAX_REPLICAS:
        raise ValueError(f"{where}: {n} replicas; a lab runs 1 to {MAX_REPLICAS} of each service")
    return n


def ensure_replicas(sup: LabSupervisor, info: RuntimeInfo, count: int,
                    only: tuple[str, ...] = SERVICES) -> dict[str, int]:
    """`count` running processes of each service in `only`: the first through
    `ensure_services`, the others started here unless alive (idempotent: a dead replica is
    started again). Returns processes.json's "services"."""
    sup.ensure_services(info, only)
    if count <= 1:
        return sup.pids()["services"]
    pids = sup.pids()
    # HTTP on any free port: the first replica has the service's port (bke.adapters.http.ports), a second
    # process asking for it would fail its start
    env = dict(lab_env(info, sup.fetch, sup.mode), BKE_HTTP_PORT="0")
    for service in only:
        for index in range(2, count + 1):
            key = replica_key(service, index)
            pid = pids["services"].get(key)
            if pid and pid_alive(pid):
                continue
            pids["services"][key] = sup.start_service_process(info, env, service, key)
    sup._save(pids)
    return pids["services"]
