"""The two files a node receives besides the wheel: the systemd unit and the agent's environment.

Why validate so strictly: both files are parsed by systemd on the node, where a newline or a quote
inside a value would start another directive or variable. The unit takes no user input at all
(paths are constants); the environment file takes the cluster name, the node name and the NATS
URL, and each must match a conservative pattern, so that a plain ``KEY=value`` line means exactly
that value to systemd's ``EnvironmentFile=`` parser. The rendered unit is parsed back and checked
before it leaves this module.
"""
from __future__ import annotations

import configparser
import re
from dataclasses import dataclass
from functools import lru_cache

import jinja2
from pydantic import BaseModel, ConfigDict

from bke.adapters.auth.permissions import identity_name, inbox_prefix
from bke.core.secrets.signing import parse_public_line
from .layout import CREDS_PATH, ENV_PATH, LAUNCHER_BIN

__all__ = [
    "AGENT_RUN_ARGS",
    "AgentFiles",
    "UnitParams",
    "render_env",
    "render_unit",
    "validate_name",
    "validate_nats_url",
]

AGENT_RUN_ARGS: tuple[str, ...] = ("run",)  # `bke-agent run`: the daemon
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# RFC 3986 characters minus ' and $ (systemd may read either specially); no whitespace, no
# backslash, no control characters.
_URL = re.compile(r"^(nats|tls|ws|wss)://[A-Za-z0-9\-._~:/?#\[\]@!&()*+,;=%]+$")
_UNIT_KEYS = {
    "Unit": {"Description", "Wants", "After"},
    "Service": {"Type", "EnvironmentFile", "ExecStart", "Restart", "RestartSec"},
    "Install": {"WantedBy"},
}


def validate_name(kind: str, value: str) -> str:
    """A cluster or node name as the spec allows it (DNS-1123), or ValueError."""
    if len(value) > 253 or not _DNS1123.match(value):
        raise ValueError(f"{kind} name {value!r} is not a DNS-1123 name")
    return value


def validate_nats_url(url: str) -> str:
    """A NATS URL safe to write unquoted in an environment file, or ValueError (URL not echoed)."""
    if not _URL.match(url):
        raise ValueError(
            "the NATS URL must look like nats://host:port (schemes nats, tls, ws, wss) and contain no "
            "spaces, quotes, dollar signs or backslashes"
        )
    return url


class UnitParams(BaseModel):
    """What the unit template may use; nothing else reaches it (StrictUndefined)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    env_path: str
    agent_bin: str
    run_args: tuple[str, ...] = AGENT_RUN_ARGS
    restart_sec: int = 5


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    # Created on first use, not at import time.
    return jinja2.Environment(
        loader=jinja2.PackageLoader("bke.adapters.ssh", "templates"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def render_unit(params: UnitParams) -> str:
    """The unit text, parsed back and checked against the directives the template may emit."""
    text = _environment().get_template("bke-agent.service.j2").render(**params.model_dump())
    _check_unit(text, params)
    return text


def _check_unit(text: str, params: UnitParams) -> None:
    parser = configparser.ConfigParser(interpolation=None, strict=True, delimiters=("=",), comment_prefixes=("#",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # systemd keys are case-sensitive
    parser.read_string(text)
    sections = {s: set(parser[s]) for s in parser.sections()}
    if sections != _UNIT_KEYS:
        raise ValueError(f"rendered unit has unexpected sections or keys: {sections}")
    exec_start = parser["Service"]["ExecStart"].split()
    if exec_start != [params.agent_bin, *params.run_args] or not exec_start[0].startswith("/"):
        raise ValueError(f"rendered ExecStart {exec_start} is not {params.agent_bin} {params.run_args}")
    if parser["Service"]["EnvironmentFile"] != params.env_path:
        raise ValueError("rendered EnvironmentFile does not match")


def render_env(cluster: str, node: str, nats_url: str, creds: bool = False, command_key: str = "") -> str:
    """The agent's environment file (installed 0600: the URL may hold credentials). With `creds`,
    the agent connects as its node's identity: the creds file shipped to CREDS_PATH and the
    inbox prefix that identity may use (bke.adapters.auth.permissions). With `command_key` (the
    dispatcher's public line, bke.core.secrets.signing), the agent runs only commands signed with that
    key: it is provisioned here, never learned from the bus."""
    # bare base64 (no space for an EnvironmentFile to mis-read); refuse a key the agent could not read
    key_line = [f"BKE_AGENT_COMMAND_KEY={parse_public_line(command_key).public_line.split()[1]}"] if command_key else []
    lines = [
        "# Written by `bke agent bootstrap`. Keep 0600: the NATS URL may carry credentials.",
        f"BKE_NATS_URL={validate_nats_url(nats_url)}",
        f"BKE_AGENT_CLUSTER={validate_name('cluster', cluster)}",
        f"BKE_AGENT_NODE={validate_name('node', node)}",
        "BKE_AGENT_BACKEND=host",
    ]
    if creds:
        lines += [f"BKE_NATS_CREDS={CREDS_PATH}",
                  f"BKE_NATS_INBOX_PREFIX={inbox_prefix(identity_name('agent', cluster, node))}"]
    lines += key_line
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class AgentFiles:
    """The rendered unit and environment for one node."""

    unit: str
    env: str

    @classmethod
    def for_node(cls, cluster: str, node: str, nats_url: str, creds: bool = False, command_key: str = "") -> AgentFiles:
        # the launcher, not bke-agent itself: an agent update restarts into a new venv and is
        # rolled back by it (bke_agent.launcher); it runs `bke-agent run`
        return cls(unit=render_unit(UnitParams(env_path=ENV_PATH, agent_bin=LAUNCHER_BIN, run_args=())),
                   env=render_env(cluster, node, nats_url, creds, command_key))
