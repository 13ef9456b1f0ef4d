"""Which agent results the dispatcher leaves to the upgrader without parsing them
(bke_dispatcher.results.upgraders_result): only those whose command id is an upgrade's or an
etcd restore's; the mark anywhere else, or bytes that do not read, go the full way."""
from __future__ import annotations

import json

from bke_dispatcher.results import upgraders_result


def _body(cid: object, **more: object) -> bytes:
    return json.dumps({"commandId": cid, "cluster": "c1", "node": "n1", "agentId": "a", "status": "Succeeded",
                       "steps": [], "startedAt": "t0", "finishedAt": "t1", **more}).encode()


def test_an_upgrades_or_a_restores_result_is_the_upgraders():
    assert upgraders_result(_body("c1/upgrade@r1@workers/n1/0"))
    assert upgraders_result(_body("c1/upgrade@r1@etcd.etcd-data/n1/0"))
    assert upgraders_result(_body("c1/restore@x1@etcd-data/n1/0"))


def test_every_other_result_goes_the_full_way():
    assert not upgraders_result(_body("c1/join-workers/n1/0"))
    assert not upgraders_result(_body("c1/health@1/n1/0"))
    # the mark in another field (a step's output) is not the command id's
    assert not upgraders_result(_body("c1/join-workers/n1/0", stderr="see c1/upgrade@r1@workers/n1/0"))
    # a command id of another shape, or none, or bytes that are no JSON object: refused where they were
    assert not upgraders_result(_body("c1/upgrade@r1@workers/n1"))
    assert not upgraders_result(_body(["c1/upgrade@r1@workers/n1/0"]))
    assert not upgraders_result(b'["c1/upgrade@r1@workers/n1/0"]')
    assert not upgraders_result(b'{"commandId": "c1/upgrade@r1@workers/n1/0"')
    assert not upgraders_result(b"[" * 100_000 + b'"/upgrade@"')
