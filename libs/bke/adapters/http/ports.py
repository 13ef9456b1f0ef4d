"""Default HTTP ports per service: used when `BKE_HTTP_PORT` is not set and the service runs as
its own process (`run_main`). A service built in-process (tests) serves HTTP only when its
settings name a port (0: any free port). The deploy files and probes use the same table."""
from __future__ import annotations

__all__ = ["DEFAULT_HTTP_PORTS", "default_port"]

DEFAULT_HTTP_PORTS: dict[str, int] = {
    "dispatcher": 8080,
    "planner": 8081,
    "certs": 8082,
    "renderer": 8083,
    "upgrader": 8084,
}


def default_port(service: str) -> int:
    return DEFAULT_HTTP_PORTS.get(service, 8090)
