#!/usr/bin/env python3
"""The images' HEALTHCHECK (slim images have no curl): standard library only.

    bke-healthcheck http PATH   GET http://127.0.0.1:$BKE_HTTP_PORT/PATH; healthy on 200
    bke-healthcheck lock FILE   healthy while another process holds FILE's flock (the agent
                                holds <state>/agent.lock for its whole life; it serves no HTTP)

Exit 0 healthy, 1 not, with one line on stderr saying why (docker inspect shows it).
"""
from __future__ import annotations

import fcntl
import os
import sys
import urllib.error
import urllib.request

TIMEOUT_S = 3.0


def check_http(path: str) -> str | None:
    port = os.environ.get("BKE_HTTP_PORT", "")
    if not port.isdigit():
        return f"BKE_HTTP_PORT is not a port number: {port!r}"
    url = f"http://127.0.0.1:{port}/{path.lstrip('/')}"
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as resp:
            return None if resp.status == 200 else f"{url}: HTTP {resp.status}"
    except urllib.error.HTTPError as exc:
        return f"{url}: HTTP {exc.code}"
    except OSError as exc:
        return f"{url}: {exc}"


def check_lock(path: str) -> str | None:
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        return f"{path}: {exc.strerror} (the agent has not started)"
    with f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None  # held: the agent runs
        fcntl.flock(f, fcntl.LOCK_UN)
        return f"{path}: no process holds it (the agent is not running)"


def main(argv: list[str]) -> int:
    checks = {"http": check_http, "lock": check_lock}
    if len(argv) != 2 or argv[0] not in checks:
        print("usage: bke-healthcheck http PATH | lock FILE", file=sys.stderr)
        return 2
    problem = checks[argv[0]](argv[1])
    if problem:
        print(f"unhealthy: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
