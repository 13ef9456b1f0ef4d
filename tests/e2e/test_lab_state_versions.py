"""End to end: everything today's services store for a cluster (an install and a certificate
rotation) carries its record's version, so `bke state migrate` on a lab finds nothing to convert.
This is what makes a future conversion sound: a record without its version would be taken for
the previous form and converted twice."""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from redis.asyncio import Redis

from bke.adapters.state.migrate import ensure_current
from bke.core.state.schema import RECORDS

from .test_cert_rotation import _bke, _seed_copy

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # the CI budget (30 minutes): run by `python3 dev.py full`


async def test_a_lab_install_and_rotation_store_every_record_with_its_version(lab_factory, tmp_path: Path):
    lab = lab_factory(_seed_copy(tmp_path))
    assert await lab.install() == 0, lab.out.getvalue()
    c, wd = lab.plan.cluster, str(lab.workdir)
    renewed = await asyncio.to_thread(_bke, "certs", "renew", "apiserver", "--cluster", c, "--workdir", wd,
                                      "--timeout", "240")
    assert renewed.returncode == 0, renewed.stderr

    redis = Redis.from_url(lab.info.redis_url)
    try:
        report = await ensure_current(redis, c, dry_run=True)
    finally:
        await redis.aclose()
    # every record an install and a rotation make is stored at its current version; the records
    # of other operations exist only once they ran (an upgrade, an etcd restore, a reset, a join
    # or removal of workers); the operation slot exists only while one runs: the install and the
    # rotation have freed it
    later = ("upgrade", "etcd-restore", "reset", "operation", "join", "removal")
    made = [k for k in RECORDS if k.name not in later]
    assert [(r.kind, r.found, r.header) for r in report.results if r.kind not in later] == [(k.name, k.current, True) for k in made]
    assert [(r.kind, r.found, r.header) for r in report.results if r.kind in later] == [
        (k.name, None, False) for k in RECORDS if k.name in later]

    migrated = await asyncio.to_thread(_bke, "state", "migrate", "--workdir", wd)
    assert migrated.returncode == 0, migrated.stderr
    assert f"{c}: every record current" in migrated.stdout
