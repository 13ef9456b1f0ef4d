"""Where the agent lives on a node. One place, read by the step table, the unit and the docs."""
from __future__ import annotations

__all__ = [
    "AGENT_BIN",
    "AGENT_PREFIX",
    "CONFIG_DIR",
    "CREDS_PATH",
    "LAUNCHER_BIN",
    "ENV_PATH",
    "PYTHON_PREFIX",
    "STAGING_DIR",
    "UNIT_NAME",
    "UNIT_PATH",
]

AGENT_PREFIX = "/opt/bke-agent"  # the agent's virtualenv
AGENT_BIN = f"{AGENT_PREFIX}/bin/bke-agent"
# What the unit runs: it starts AGENT_BIN (or the venv an agent update selected, beside this one)
# and rolls a new agent back that does not come up (bke_agent.launcher). It always runs from
# AGENT_PREFIX: the code that decides a rollback is never the new code.
LAUNCHER_BIN = f"{AGENT_PREFIX}/bin/bke-agent-launch"
# The bundled CPython (bke.core.pythons.STANDALONE), unpacked for nodes whose python3 cannot run the agent;
# the agent's virtualenv is made from it. Holds `.bke-sha256`: the digest of the archive it came from.
PYTHON_PREFIX = "/opt/bke-python"
CONFIG_DIR = "/etc/bke-agent"
ENV_PATH = f"{CONFIG_DIR}/env"
CREDS_PATH = f"{CONFIG_DIR}/nats.creds"  # the node's NATS identity (0600)
UNIT_NAME = "bke-agent.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT_NAME}"
# Relative, so it is under the SSH user's home: never a predictable path in a shared /tmp.
STAGING_DIR = ".bke-bootstrap"
