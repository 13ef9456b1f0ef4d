"""Sign the plans and rendered file sets stored before they were signed (`bke state init`).

Why at `bke state init` and not at the writers' next write: a plan is written once per
install, upgrade or apply, so a running cluster's plan may never be written again, and every
reader refuses it unsigned. `bke state init` must run anyway after an upgrade of BKE, to make
the writers' keys (bke.adapters.state.record_keys), and it runs as the admin user with the key
files of the writers it is given: it signs, with them, each record that carries no signature
at all, as its writer would have. A record that carries one, good or bad, is left as it is (a
bad signature stays refused: this never launders a record someone altered after it was signed).

What it trusts: the store as it is at that moment, as the readers did before signatures. Run
it once, right after the upgrade, as the admin.

Each record under WATCH: one its writer rewrites meanwhile is left to that writer (who signs).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from redis.exceptions import WatchError

from bke.core.secrets.record_signing import RecordSigner
from .keys.plan import plan_key, plan_meta_key
from .keys.node_files import node_files_digest_key, node_files_key, node_files_signatures_key
from .nodefiles import sign_node_files
from .plans import GENERATION_FIELD, INCARNATION_FIELD, PLAN_SIGNED_KIND, SIGNATURE_FIELD, plan_binding

__all__ = ["sign_unsigned_sync"]

SCAN_COUNT = 1000


def _text(raw: object) -> str:
    return "" if raw is None else raw.decode() if isinstance(raw, bytes) else str(raw)


def _sign_plan(redis: Any, signer: RecordSigner, cluster: str) -> bool:
    with redis.pipeline() as pipe:
        try:
            pipe.watch(plan_key(cluster), plan_meta_key(cluster))
            raw = pipe.get(plan_key(cluster))
            inc, gen, signature = pipe.hmget(plan_meta_key(cluster), [INCARNATION_FIELD, GENERATION_FIELD,
                                                                      SIGNATURE_FIELD])
            if raw is None or signature is not None or not pipe.exists(plan_meta_key(cluster)):
                return False
            generation = int(_text(gen) or 1)
            data = raw if isinstance(raw, bytes) else str(raw).encode()
            signed = signer.sign(PLAN_SIGNED_KIND, cluster, plan_binding(_text(inc), generation), data)
            pipe.multi()
            pipe.hset(plan_meta_key(cluster), mapping={GENERATION_FIELD: str(generation), SIGNATURE_FIELD: signed})
            pipe.execute()
            return True
        except WatchError:
            return False  # rewritten meanwhile: by its writer, who signed it


def _sign_render(redis: Any, signer: RecordSigner, cluster: str) -> int:
    files, sigs = node_files_key(cluster, "render"), node_files_signatures_key(cluster, "render")
    with redis.pipeline() as pipe:
        try:
            pipe.watch(files, sigs, node_files_digest_key(cluster, "render"))
            raws = {_text(n): _text(v) for n, v in pipe.hgetall(files).items()}
            have = {_text(n) for n in pipe.hkeys(sigs)}
            digest = _text(pipe.get(node_files_digest_key(cluster, "render")))
            todo = {n: sign_node_files(signer, cluster, n, digest, raw) for n, raw in raws.items() if n not in have}
            if not todo:
                return 0
            pipe.multi()
            pipe.hset(sigs, mapping=todo)
            pipe.execute()
            return len(todo)
        except WatchError:
            return 0  # re-rendered meanwhile: the renderer signed it


def _clusters(redis: Any, name: Callable[[str], str]) -> list[str]:
    """The clusters with a key `name(cluster)` (SCAN, never KEYS; a `*` in a glob matches `:` too,
    so the pattern's fixed tail picks the family)."""
    head, tail = name("*").split("*")
    found = (_text(k) for k in redis.scan_iter(match=head + "*" + tail, count=SCAN_COUNT))
    return sorted({k[len(head):len(k) - len(tail)] for k in found})


def sign_unsigned_sync(redis: Any, signers: Mapping[str, RecordSigner]) -> dict[str, int]:
    """Sign what carries no signature, with the writers given: "plan" -> plans signed now,
    "render" -> nodes' file sets signed now."""
    done: dict[str, int] = {}
    if "plan" in signers:
        done["plan"] = sum(_sign_plan(redis, signers["plan"], c) for c in _clusters(redis, plan_meta_key))
    if "render" in signers:
        done["render"] = sum(_sign_render(redis, signers["render"], c)
                             for c in _clusters(redis, lambda c: node_files_key(c, "render")))
    return done
