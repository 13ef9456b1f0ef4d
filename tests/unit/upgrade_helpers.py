"""Plans for the upgrade tests: the repository's examples with their versions replaced."""
from __future__ import annotations

from pathlib import Path

from bke.plan import Plan, plan_spec_text

__all__ = ["SEED", "SPLIT", "plan_of"]

EXAMPLES = Path(__file__).parent.parent.parent / "examples"
SEED = EXAMPLES / "seed-3m1w.yaml"
SPLIT = EXAMPLES / "split-etcd.yaml"


def plan_of(example: Path, kubernetes: str = "v1.33.2", etcd: str = "v3.5.1", containerd: str = "v2.1.1",
            extra: tuple[str, str] | None = None) -> Plan:
    text = (example.read_text()
            .replace("kubernetesVersion: v1.33.2", f"kubernetesVersion: {kubernetes}")
            .replace("etcdVersion: v3.5.1", f"etcdVersion: {etcd}")
            .replace("containerdVersion: v2.1.1", f"containerdVersion: {containerd}"))
    if extra:
        assert extra[0] in text
        text = text.replace(*extra)
    outcome = plan_spec_text(text, str(example))
    assert outcome.plan is not None, outcome.errors
    return outcome.plan
