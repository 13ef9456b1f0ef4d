"""The journal keeps completed results across restarts (atomic files) and a log of real
executions; the identity is made once, 0600, and the same key is read back."""
from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from bke.contracts.agent import CommandResult, StepResult
from bke_agent import AgentIdentity, DiskJournal, ExecutionRecord, MemoryJournal, execution_counts, read_executions
from bke_agent.identity import KEY_FILE


def _result(cid: str, status: str = "Succeeded") -> CommandResult:
    return CommandResult(command_id=cid, cluster="c1", node="n1", agent_id="abc", status=status,  # type: ignore[arg-type]
                         steps=[StepResult(id="s", status="Succeeded")], started_at="t0", finished_at="t1")


def test_disk_journal_survives_a_new_instance(tmp_path: Path) -> None:
    j = DiskJournal(tmp_path)
    assert j.get("c1/etcd/n1/0") is None
    j.put(_result("c1/etcd/n1/0").model_copy(update={"replayed": True}))
    again = DiskJournal(tmp_path)  # as after a restart
    stored = again.get("c1/etcd/n1/0")
    assert stored is not None and stored.status == "Succeeded" and stored.replayed is False
    assert again.get("c1/etcd/n1/1") is None
    files = list((tmp_path / "results").iterdir())
    assert len(files) == 1 and (files[0].stat().st_mode & 0o777) == 0o600
    assert not [f for f in files if f.name.endswith(".tmp")]


def test_executions_log_counts_runs(tmp_path: Path) -> None:
    j = DiskJournal(tmp_path)
    for cid in ("a", "b", "a"):
        j.record_execution(ExecutionRecord.of(_result(cid), "etcd"))
    records = read_executions(tmp_path)
    assert [r.commandId for r in records] == ["a", "b", "a"] and records[0].phase == "etcd"
    assert execution_counts(tmp_path) == {"a": 2, "b": 1}
    assert read_executions(tmp_path / "nowhere") == []


def test_prune_drops_old_results_only(tmp_path: Path) -> None:
    j = DiskJournal(tmp_path, keep_days=1)
    j.put(_result("old"))
    j.put(_result("new"))
    old = next(p for p in (tmp_path / "results").iterdir() if j.get("old") and p == j._path("old"))
    os.utime(old, (1_000_000, 1_000_000))
    assert j.prune() == 1
    assert j.get("old") is None and j.get("new") is not None


def test_memory_journal() -> None:
    j = MemoryJournal()
    j.put(_result("x"))
    j.record_execution(ExecutionRecord.of(_result("x"), "p"))
    assert j.get("x") is not None and len(j.executions) == 1


def test_identity_created_once_0600_and_reloaded(tmp_path: Path) -> None:
    first, created = AgentIdentity.load_or_create(tmp_path / "state")
    second, created_again = AgentIdentity.load_or_create(tmp_path / "state")
    assert created and not created_again
    assert first.agent_id == second.agent_id and first.public_key_b64 == second.public_key_b64
    assert ((tmp_path / "state" / KEY_FILE).stat().st_mode & 0o777) == 0o600
    assert first.public_line.startswith("bke-agent-x25519 ")
    assert "PRIVATE" not in repr(first) and first.agent_id in repr(first)


def test_identity_concurrent_creation_agrees(tmp_path: Path) -> None:
    """`bke agent bootstrap` runs `init` while the daemon starts: both must end with one key."""
    ids: list[str] = []
    barrier = threading.Barrier(8)

    def make() -> None:
        barrier.wait()
        ids.append(AgentIdentity.load_or_create(tmp_path)[0].agent_id)

    threads = [threading.Thread(target=make) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(ids)) == 1 and len(ids) == 8
    assert AgentIdentity.load(tmp_path).agent_id == ids[0]


def test_identity_refuses_an_open_key_file(tmp_path: Path) -> None:
    AgentIdentity.load_or_create(tmp_path)
    (tmp_path / KEY_FILE).chmod(0o644)
    with pytest.raises(PermissionError, match="0600"):
        AgentIdentity.load(tmp_path)


def test_unreadable_result_is_moved_aside(tmp_path: Path) -> None:
    j = DiskJournal(tmp_path)
    j.put(_result("c"))
    j._path("c").write_bytes(b"{not json")
    assert j.get("c") is None  # run again rather than block the node's queue
    assert j._path("c").with_suffix(".corrupt").exists() and not j._path("c").exists()


def test_executions_log_rotates_and_stays_bounded(tmp_path: Path) -> None:
    j = DiskJournal(tmp_path, fsync=False, max_log_bytes=2000)
    for i in range(100):
        j.record_execution(ExecutionRecord(f"c/etcd/n{i}/1", "etcd", "c", f"n{i}", "Succeeded", "t0", "t1", "agent"))
    current, rotated = tmp_path / "executions.jsonl", tmp_path / "executions.jsonl.1"
    assert rotated.exists() and current.stat().st_size <= 2000 and rotated.stat().st_size <= 2000
    seen = read_executions(tmp_path)
    # the two newest generations, oldest first, each line whole; the rest is gone
    assert 0 < len(seen) < 100 and seen[-1].commandId == "c/etcd/n99/1"
    numbers = [int(r.node[1:]) for r in seen]
    assert numbers == list(range(numbers[0], 100))
    assert set(execution_counts(tmp_path).values()) == {1}
