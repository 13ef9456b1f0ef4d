"""The issuance worker pool as the services and the CLI use it: real processes, real pipes.

* a threaded caller (an asyncio service) gets a fork-server pool, and signs beside its workers
  unless told not to;
* a single-threaded caller (the CLI) forks and signs beside its workers; keys made ahead are used;
* a job's typed error comes back as itself; a worker that dies is a WorkerLost (retry), not a hang.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from datetime import timedelta

import pytest

from tests.unit.core.pki.test_pki_support import NOW, openssl, plan_of

from bke.core.pki import CaIntegrityError, IssueOptions, WorkerLost, cert_info, desired_instances, ensure_pki, issuance
from bke.core.pki.issuance import Validity, _issue_job, _make_keys_ahead, issue, start_fork_server
from bke.core.pki.workers import WorkerPool
from bke.core.spec.synth import synth_spec_text

PLAN = plan_of(synth_spec_text(400))  # ~440 ECDSA instances: enough for a pool


def _check(result, tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert set(result.materials) == {i.id for i in desired_instances(PLAN)}
    assert len({cert_info(m.cert).serial for m in result.materials.values() if b"CERTIFICATE" in m.cert}) == \
        sum(b"CERTIFICATE" in m.cert for m in result.materials.values())
    (tmp_path / "ca.crt").write_bytes(result.materials["ca"].cert)
    (tmp_path / "leaf.crt").write_bytes(result.materials["kubelet.conf@n399"].cert)
    res = openssl("verify", "-CAfile", str(tmp_path / "ca.crt"), "-purpose", "sslclient", str(tmp_path / "leaf.crt"))
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize("in_caller", [False, True])
def test_a_threaded_caller_uses_a_fork_server_pool(in_caller: bool, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    in_process: list[int] = []
    real = issuance._issue_items
    monkeypatch.setattr(issuance, "_issue_items", lambda job: (in_process.append(len(job[2])), real(job))[1])
    out: dict = {}
    stop = threading.Event()
    helper = threading.Thread(target=stop.wait)  # a second thread, as in an asyncio service
    helper.start()
    try:
        start_fork_server()  # what the certs service does at start-up (idempotent)
        start_fork_server()
        assert IssueOptions(procs=2).resolved().start_method == "forkserver"
        out["r"] = ensure_pki(PLAN, {}, NOW, IssueOptions(procs=2, in_caller=in_caller))
    finally:
        stop.set()
        helper.join()
    # The workers come from the fork server, so their chunks do not count into this list.
    if in_caller:
        assert sum(in_process) > 10  # this thread signed leaves too, not only the CAs
    else:
        assert sum(in_process) <= 5  # only the handful of CAs (not worth a round trip)
    _check(out["r"], tmp_path)


def test_the_cli_forks_and_signs_beside_its_workers(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    here: list[int] = []  # appended to in this process only (forked workers have their copy)
    real = issuance._issue_items
    monkeypatch.setattr(issuance, "_issue_items", lambda job: (here.append(len(job[2])), real(job))[1])
    options = IssueOptions(procs=2).resolved()
    assert (options.start_method, options.in_caller) == ("fork", True)
    result = ensure_pki(PLAN, {}, NOW, IssueOptions(procs=2))
    assert sum(here) > 10  # this process took leaf chunks too, not only the CAs
    _check(result, tmp_path)


def test_keys_made_ahead_stop_when_work_arrives_and_are_used() -> None:
    issuance._AHEAD.clear()
    try:
        _make_keys_ahead("ECDSA-P256", 50, until=lambda: False)  # no work yet: up to the cap
        assert len(issuance._AHEAD["ECDSA-P256"]) == 50
        _make_keys_ahead("ECDSA-P256", 10_000, until=lambda: True)  # work is waiting: stop at once
        assert len(issuance._AHEAD["ECDSA-P256"]) == 50
        items = [i for i in desired_instances(PLAN) if i.spec.kind in ("ca", "keypair")]
        issued = issue(items, {}, Validity(NOW, 3650, 365, "ECDSA-P256"), IssueOptions(procs=1))
        assert len(issuance._AHEAD["ECDSA-P256"]) == 50 - len(items)  # taken from the keys ahead
        assert issued["sa"].cert.startswith(b"-----BEGIN PUBLIC KEY-----")
        assert cert_info(issued["ca"].cert).key_algorithm == "ECDSA-P256"
        # A forked child starts with none of them: it would hand out the same keys.
        _make_keys_ahead("ECDSA-P256", 5, until=lambda: False)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.write(write, str(len(issuance._AHEAD.get("ECDSA-P256", []))).encode())
            os._exit(0)
        os.waitpid(pid, 0)
        assert os.read(read, 16) == b"0"
        os.close(read), os.close(write)
    finally:
        issuance._AHEAD.clear()


def test_a_typed_error_in_a_worker_comes_back_as_itself() -> None:
    ca_items = [i for i in desired_instances(PLAN) if i.id == "ca"]
    leaves = [i for i in desired_instances(PLAN) if i.spec.ca == "ca"][:40]
    old = issue(ca_items, {}, Validity(NOW - timedelta(days=30), 10, 365, "ECDSA-P256"), IssueOptions(procs=1))
    ctx = multiprocessing.get_context("fork")
    with WorkerPool(1, ctx, _issue_job, _make_keys_ahead, ("ECDSA-P256", 0)) as pool:
        with pytest.raises(CaIntegrityError, match="expired"):
            issue(leaves, old, Validity(NOW, 3650, 365, "ECDSA-P256"),
                  IssueOptions(procs=1, pool=pool, in_caller=False))
        # The pool survives a failed job: the next one works.
        fresh = issue(ca_items, {}, Validity(NOW, 3650, 365, "ECDSA-P256"), IssueOptions(procs=1))
        ok = issue(leaves, fresh, Validity(NOW, 3650, 365, "ECDSA-P256"), IssueOptions(procs=1, pool=pool, in_caller=False))
        assert set(ok) == {i.id for i in leaves}


def _slow_job(job):  # type: ignore[no-untyped-def]
    time.sleep(30)  # stands for a long chunk: the test kills the worker meanwhile


def test_a_worker_that_dies_is_a_retryable_error_not_a_hang() -> None:
    ctx = multiprocessing.get_context("fork")
    started = time.monotonic()
    with WorkerPool(1, ctx, _slow_job, _make_keys_ahead, ("ECDSA-P256", 0)) as pool:
        pool.send(0, "work")
        os.kill(pool._procs[0].pid, signal.SIGKILL)  # type: ignore[arg-type]
        with pytest.raises(WorkerLost, match="died"):
            list(pool.replies(block=True))
    assert time.monotonic() - started < 10
