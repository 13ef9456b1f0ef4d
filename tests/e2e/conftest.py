"""Every e2e test gets its own lab, always taken down (by PID) afterwards; before that, Redis is
asked whether it refused any service anything (`ACL LOG`), and nats-server's logs whether it
refused any process a publish or a subscription: each process runs under its own ACL user and
NATS identity, so a refusal is a table that does not cover what the code does."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis

from .lab_helpers import Lab


def service_refusals(lab: Lab) -> list[dict[str, Any]]:
    """What Redis refused the lab's services (commands, keys, channels), read as the admin."""
    r = redis.Redis.from_url(lab.info.redis_url, decode_responses=True, socket_timeout=5.0)
    try:
        log = r.acl_log()
    except redis.RedisError:  # the lab's Redis is gone already (a test stopped it): nothing to ask
        return []
    finally:
        r.close()
    return [e for e in log if str(e.get("username", "")).startswith("bke-") and e.get("reason") != "auth"
            and e.get("username") != "bke-admin"]


def bus_violations(lab: Lab) -> list[str]:
    """What nats-server refused any of the lab's processes (its logs: `Publish Violation`,
    `Subscription Violation`): each process runs under its own identity (bke.adapters.auth.permissions),
    so a refusal is a grant table that does not cover what the code does."""
    out = []
    for log in sorted((lab.workdir / "runtime").rglob("nats-server*.log")):
        out += [line.strip()[:300] for line in log.read_text(errors="replace").splitlines()
                if "Publish Violation" in line or "Subscription Violation" in line]
    return out


@pytest.fixture
def lab_factory(tmp_path):
    labs = []

    def make(spec: str, agents: bool = True, fetch: bool = False):
        lab = Lab(tmp_path / f"lab{len(labs)}", Path(spec), fetch=fetch).start(agents=agents)
        labs.append(lab)
        return lab

    yield make
    refused: list[Any] = []
    violations: list[str] = []
    for lab in labs:
        refused += service_refusals(lab)
        violations += bus_violations(lab)
        lab.down()
    assert not refused, f"Redis refused a service: {refused}"
    assert not violations, "nats-server refused a lab process:\n" + "\n".join(violations[:20])
