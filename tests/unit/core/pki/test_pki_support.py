"""Shared helpers for the tests/unit/core/pki/test_pki_* modules (no tests here).

Plans come from the committed examples (optionally edited as YAML), "now" is a fixed instant,
and the issued split-etcd PKI is computed once per session (ECDSA-P256, as the example says).
"""
from __future__ import annotations

import functools
import subprocess
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from bke.core.pki import EnsureResult, IssueOptions, ensure_pki
from bke.core.plan import Plan, plan_spec_text

ROOT = Path(__file__).resolve().parents[4]
SPLIT = ROOT / "examples" / "split-etcd.yaml"
SEED = ROOT / "examples" / "seed-3m1w.yaml"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
SERIAL = IssueOptions(procs=1)  # small plans: no pool, deterministic timing


def plan_of(text: str | bytes, source: str = "<test>") -> Plan:
    outcome = plan_spec_text(text, source)
    assert outcome.plan is not None, outcome.errors
    return outcome.plan


def edited(path: Path, edit: Callable[[list[dict[str, Any]]], None]) -> Plan:
    """The plan of ``path`` after ``edit`` changed its YAML documents in place."""
    docs = list(yaml.safe_load_all(path.read_text()))
    edit(docs)
    return plan_of(yaml.safe_dump_all(docs, sort_keys=False), str(path))


def cluster_config(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return docs[0]["spec"]["clusterConfig"]["cluster"]


def node_doc(name: str, ip: str, roles: list[str]) -> dict[str, Any]:
    return {"apiVersion": "bke.bocloud.com/v1beta1", "kind": "BKENode", "metadata": {"name": name},
            "spec": {"hostname": name, "ip": ip, "role": roles}}


@functools.lru_cache(maxsize=None)
def split_plan() -> Plan:
    return plan_of(SPLIT.read_text(), str(SPLIT))


@functools.lru_cache(maxsize=None)
def seed_plan() -> Plan:
    return plan_of(SEED.read_text(), str(SEED))


@functools.lru_cache(maxsize=None)
def split_issued() -> EnsureResult:
    return ensure_pki(split_plan(), {}, NOW, SERIAL)


def openssl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=30, check=False)
