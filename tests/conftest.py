"""Shared fixtures: one real NATS + Redis per test session, started from the venv binaries.

Server fixtures are session-scoped and synchronous on purpose: a session-scoped *async* fixture
is bound to one event loop and breaks function-scoped async tests (pytest-asyncio 1.x). Clients
are function-scoped async fixtures, created and closed on each test's own loop.

``TEST_NATS_URL`` / ``TEST_REDIS_URL`` point the suite at servers you run yourself; then nothing
is started for that server. Never point them at a shared server: ``redis_client`` runs FLUSHDB.
"""
from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import nats
import pytest
import redis.asyncio as aioredis
from nats.aio.client import Client as NatsClient

from bke.adapters.runtime.declare import declare_streams
from bke.adapters.runtime import EmbeddedRuntime
from bke.adapters.state.epoch import ensure_epoch, new_epoch
from bke.core.secrets import create_key_file, key_file_env
from bke.core.secrets.record_signing import WRITERS

from .workers import ModuleScheduling, isolate_worker, order


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, every worker but the first takes a loopback of its own (tests/workers.py)."""
    if worker := getattr(config, "workerinput", {}).get("workerid", ""):
        isolate_worker(worker)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if getattr(config, "workerinput", None) is not None:
        order(items)


@pytest.hookimpl(tryfirst=True)  # before xdist's own choice by --dist
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> ModuleScheduling:
    return ModuleScheduling(config, log)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def record_key_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The plan and render writers' at-rest key files (bke.core.secrets.record_signing), one each
    for the session: the keys they open are stored in the shared Redis, made by the first writer."""
    folder = tmp_path_factory.mktemp("record-keys")
    files = {w: folder / f"{w}.key" for w in WRITERS}
    for path in files.values():
        create_key_file(path)
    return {w: str(p) for w, p in files.items()}


@pytest.fixture(autouse=True)
def record_writer_keys(record_key_files: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's processes are given the writers' key files, as the lab gives the planner, the
    upgrader and the renderer theirs: every plan or file set a test stores is signed."""
    for writer, path in record_key_files.items():
        monkeypatch.setenv(key_file_env(writer), path)


@pytest.fixture(scope="session")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRuntime]:
    """A started EmbeddedRuntime in a temp dir; ``runtime.info`` has the URLs. Stopped by PID."""
    rt = EmbeddedRuntime(tmp_path_factory.mktemp("runtime"), auth=False)  # handler tests: an open bus
    rt.ensure_started()
    try:
        yield rt
    finally:
        rt.stop()


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRuntime]:
    """A runtime of the module's own with NATS in operator mode (every client needs an identity),
    its streams declared; ``secure.nats_auth.authority`` mints the identities. Stopped by PID."""
    rt = EmbeddedRuntime(tmp_path_factory.mktemp("secure"), auth=True)
    rt.ensure_started()
    try:
        yield rt
    finally:
        rt.stop()


@pytest.fixture(scope="session")
def nats_url(request: pytest.FixtureRequest) -> str:
    """TEST_NATS_URL, else the session runtime's NATS (started only when needed), with the streams declared."""
    url = os.environ.get("TEST_NATS_URL")
    if not url:
        rt: EmbeddedRuntime = request.getfixturevalue("runtime")
        assert rt.info is not None
        url = rt.info.nats_url
    if os.environ.get("TEST_NATS_URL"):  # the session runtime declared its own at start
        declare_streams(url, None)  # the deploy step: services only check the streams
    return url


@pytest.fixture(scope="session")
def redis_url(request: pytest.FixtureRequest) -> str:
    """TEST_REDIS_URL, else the session runtime's Redis (started only when needed)."""
    if url := os.environ.get("TEST_REDIS_URL"):
        return url
    rt: EmbeddedRuntime = request.getfixturevalue("runtime")
    assert rt.info is not None
    return rt.info.redis_url


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    """redis.asyncio client (str responses) on an emptied database that holds a new state epoch
    (what `bke state init` writes, as the admin: services wait without one, bke.adapters.state.epoch)."""
    client = aioredis.from_url(redis_url, decode_responses=True)
    await client.flushdb()
    await ensure_epoch(client, new_epoch())
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def nats_client(nats_url: str) -> AsyncIterator[NatsClient]:
    """A connected nats-py client, closed after the test."""
    nc = await nats.connect(nats_url, connect_timeout=5)
    try:
        yield nc
    finally:
        await nc.close()
