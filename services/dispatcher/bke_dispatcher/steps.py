"""The per-node steps of each phase live in `bke.core.node_steps` (the upgrader builds its node
commands from the same functions); re-exported here for the dispatcher's modules."""
from bke.core.node_steps import (  # noqa: F401
    FILE_PHASES,
    artefacts_of,
    binaries,
    component_ports,
    file_phase,
    health_steps,
    kernel_steps,
    node_env_steps,
    plan_artefacts,
    swap_steps,
    write_steps,
)

__all__ = [
    "FILE_PHASES",
    "artefacts_of",
    "binaries",
    "component_ports",
    "file_phase",
    "health_steps",
    "kernel_steps",
    "node_env_steps",
    "plan_artefacts",
    "swap_steps",
    "write_steps",
]
