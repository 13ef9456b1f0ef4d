"""The command id a sender gives a command of a given phase (bke.core.host_actions.origins): for
tests that build commands the agent checks, so that each is refused or run for what it does,
not for an id no sender uses."""
from __future__ import annotations

__all__ = ["command_id_for"]


def command_id_for(phase: str, cluster: str = "c", node: str = "n", n: int = 0) -> str:
    """`<cluster>/<slug>/<node>/<n>` with the slug the phase's operation uses: the install phase
    itself, the rotation's, reset's or removal's phase, `upgrade@r@<step>`, `restore@r@<stage>`."""
    if phase.startswith("upgrade:"):
        slug = f"upgrade@r@{phase.partition(':')[2]}"
    elif phase.startswith("etcd-restore:"):
        slug = f"restore@r@{phase.partition(':')[2]}"
    else:
        slug = phase
    return f"{cluster}/{slug}/{node}/{n}"
