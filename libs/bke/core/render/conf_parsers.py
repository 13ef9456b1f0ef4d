"""Parsers and typed models for the three text formats we render that have no library here:
haproxy.cfg, keepalived.conf and systemd unit files.

Each parser reads back what a template produced and returns a small typed model; anything it does
not recognise (an unknown section or directive, a malformed bind or server line, an unbalanced
brace) raises ValueError. The allowed directives are the ones our templates use: a new directive
must be added here on purpose, which is the point.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from bke.core.netaddr import is_ip

__all__ = [
    "HaproxyConfig",
    "KeepalivedConfig",
    "SystemdUnit",
    "parse_haproxy",
    "parse_keepalived",
    "parse_systemd_unit",
]

# --- haproxy -------------------------------------------------------------------------------
_HAPROXY_DIRECTIVES = {
    "global": {"log", "maxconn", "stats"},
    "defaults": {"mode", "log", "option", "timeout", "retries"},
    "frontend": {"bind", "mode", "option", "default_backend", "monitor-uri", "log"},
    "backend": {"mode", "option", "http-check", "balance", "server", "default-server", "timeout"},
}


@dataclass(frozen=True)
class HaproxyServer:
    name: str
    host: str
    port: int
    options: tuple[str, ...]


@dataclass
class HaproxySection:
    kind: str
    name: str
    lines: list[tuple[str, str]] = field(default_factory=list)

    def values(self, directive: str) -> list[str]:
        return [v for d, v in self.lines if d == directive]


@dataclass
class HaproxyConfig:
    sections: list[HaproxySection]

    def named(self, kind: str) -> dict[str, HaproxySection]:
        return {s.name: s for s in self.sections if s.kind == kind}

    def bind_ports(self) -> list[tuple[str, int]]:
        out = []
        for s in self.sections:
            for b in s.values("bind"):
                host, _, port = b.split()[0].rpartition(":")
                out.append((host, int(port)))
        return out

    def servers(self, backend: str) -> list[HaproxyServer]:
        out = []
        for line in self.named("backend")[backend].values("server"):
            name, addr, *opts = line.split()
            host, _, port = addr.rpartition(":")
            out.append(HaproxyServer(name, host.strip("[]"), int(port), tuple(opts)))
        return out


def parse_haproxy(text: str) -> HaproxyConfig:
    sections: list[HaproxySection] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        if not raw[0].isspace():
            kind, _, name = line.partition(" ")
            if kind not in _HAPROXY_DIRECTIVES:
                raise ValueError(f"line {n}: unknown section {kind!r}")
            if kind in ("frontend", "backend") and not name.strip():
                raise ValueError(f"line {n}: {kind} without a name")
            sections.append(HaproxySection(kind, name.strip()))
            continue
        if not sections:
            raise ValueError(f"line {n}: directive outside a section")
        directive, _, value = line.strip().partition(" ")
        if directive not in _HAPROXY_DIRECTIVES[sections[-1].kind]:
            raise ValueError(f"line {n}: {directive!r} is not expected in a {sections[-1].kind} section")
        sections[-1].lines.append((directive, value.strip()))
    cfg = HaproxyConfig(sections)
    _check_haproxy(cfg)
    return cfg


def _check_haproxy(cfg: HaproxyConfig) -> None:
    backends = cfg.named("backend")
    for name, fe in cfg.named("frontend").items():
        for b in fe.values("default_backend"):
            if b not in backends:
                raise ValueError(f"frontend {name}: default_backend {b!r} is not defined")
        if not fe.values("bind"):
            raise ValueError(f"frontend {name}: no bind line")
    for host, port in cfg.bind_ports():
        if host not in ("*", "") and not is_ip(host.strip("[]")):
            raise ValueError(f"bind address {host!r} is not an IP")
        if not 1 <= port <= 65535:
            raise ValueError(f"bind port {port} out of range")
    for name in backends:
        seen = set()
        for s in cfg.servers(name):
            if s.name in seen:
                raise ValueError(f"backend {name}: server {s.name!r} listed twice")
            seen.add(s.name)
            if not is_ip(s.host) or not 1 <= s.port <= 65535:
                raise ValueError(f"backend {name}: bad server address {s.host}:{s.port}")


# --- keepalived ----------------------------------------------------------------------------
_TOKEN = re.compile(r'"[^"]*"|\{|\}|[^\s{}"]+')


@dataclass
class KeepalivedConfig:
    """The parts of keepalived.conf BKE renders and checks."""

    scripts: dict[str, dict[str, list[str]]]
    instances: dict[str, dict[str, object]]


def parse_keepalived(text: str) -> KeepalivedConfig:
    """Parse the line-oriented keepalived syntax: `keyword args...` or `keyword args { ... }`."""
    stack: list[dict[str, object]] = [{}]
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].split("!", 1)[0].strip()
        if not line:
            continue
        if line == "}":
            if len(stack) == 1:
                raise ValueError(f"line {n}: unbalanced '}}'")
            stack.pop()
            continue
        words = [w.strip('"') for w in _TOKEN.findall(line)]
        if words[-1] == "{":
            block: dict[str, object] = {}
            stack[-1][" ".join(words[:-1])] = block
            stack.append(block)
        elif "{" in words or "}" in words:
            raise ValueError(f"line {n}: braces must end a line or stand alone")
        else:
            stack[-1].setdefault(words[0], [])
            stack[-1][words[0]] += words[1:] or [""]  # type: ignore[operator]
    if len(stack) != 1:
        raise ValueError("missing '}'")
    top = stack[0]
    scripts = {k.split(" ", 1)[1]: v for k, v in top.items() if k.startswith("vrrp_script ")}
    instances = {k.split(" ", 1)[1]: v for k, v in top.items() if k.startswith("vrrp_instance ")}
    unknown = [k for k in top if k != "global_defs" and not k.startswith(("vrrp_script ", "vrrp_instance "))]
    if unknown:
        raise ValueError(f"unknown top-level blocks {unknown}")
    for name, inst in instances.items():
        _check_instance(name, inst, scripts)  # type: ignore[arg-type]
    return KeepalivedConfig(scripts, instances)  # type: ignore[arg-type]


def _one(block: dict[str, object], key: str, where: str) -> str:
    val = block.get(key)
    if not isinstance(val, list) or len(val) != 1:
        raise ValueError(f"{where}: needs exactly one {key!r}")
    return val[0]


def _check_instance(name: str, inst: dict[str, object], scripts: dict[str, object]) -> None:
    where = f"vrrp_instance {name}"
    if _one(inst, "state", where) not in ("MASTER", "BACKUP"):
        raise ValueError(f"{where}: state must be MASTER or BACKUP")
    if not 1 <= int(_one(inst, "virtual_router_id", where)) <= 255:
        raise ValueError(f"{where}: virtual_router_id must be 1-255")
    if not 1 <= int(_one(inst, "priority", where)) <= 254:
        raise ValueError(f"{where}: priority must be 1-254")
    _one(inst, "interface", where)
    vips = inst.get("virtual_ipaddress")
    if not isinstance(vips, dict) or not vips or not all(is_ip(k.split("/")[0]) for k in vips):
        raise ValueError(f"{where}: virtual_ipaddress must list IP addresses")
    auth = inst.get("authentication")
    if any(":" in k for k in vips):
        # An IPv6 instance runs VRRP v3, and keepalived refuses authentication there.
        if auth is not None:
            raise ValueError(f"{where}: an IPv6 VIP runs VRRP v3, which has no authentication")
    else:
        if not isinstance(auth, dict) or _one(auth, "auth_type", where) != "PASS":
            raise ValueError(f"{where}: authentication with auth_type PASS is required")
        if not 1 <= len(_one(auth, "auth_pass", where)) <= 8:
            raise ValueError(f"{where}: auth_pass must be 1-8 characters (keepalived truncates longer ones)")
    _check_unicast(where, inst, [k.split("/")[0] for k in vips])
    tracked = inst.get("track_script", {})
    for s in tracked if isinstance(tracked, dict) else ():
        if s not in scripts:
            raise ValueError(f"{where}: track_script {s!r} is not defined")


def _check_unicast(where: str, inst: dict[str, object], vips: list[str]) -> None:
    """Unicast VRRP: both keywords or neither; our own address is no peer; one address family."""
    if "unicast_src_ip" not in inst and "unicast_peer" not in inst:
        return
    src = _one(inst, "unicast_src_ip", where)
    peers = inst.get("unicast_peer")
    if not isinstance(peers, dict) or not peers:
        raise ValueError(f"{where}: unicast_src_ip needs a unicast_peer block listing the other nodes")
    if any(v != [""] for v in peers.values()):
        raise ValueError(f"{where}: unicast_peer lists each address once, one per line")
    addrs = [src, *peers]
    if not all(is_ip(a) for a in addrs):
        raise ValueError(f"{where}: unicast_src_ip and unicast_peer must be IP addresses")
    if src in peers:
        raise ValueError(f"{where}: unicast_peer lists this node's own address {src}")
    if len({":" in a for a in addrs + vips}) != 1:
        raise ValueError(f"{where}: unicast addresses and the VIP must be of one address family")


# --- systemd -------------------------------------------------------------------------------
@dataclass
class SystemdUnit:
    sections: dict[str, dict[str, list[str]]]

    def exec_start(self) -> list[str]:
        return self.sections["Service"]["ExecStart"][-1].split()


def parse_systemd_unit(text: str) -> SystemdUnit:
    """INI with backslash continuations; [Unit], [Service] with one ExecStart, [Install]."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    logical: list[str] = []
    for raw in text.splitlines():
        if logical:
            logical.append(raw.strip())
        else:
            logical = [raw.strip()]
        if logical[-1].endswith("\\"):
            logical[-1] = logical[-1][:-1].strip()
            continue
        line, logical = " ".join(p for p in logical if p), []
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            if not line.endswith("]"):
                raise ValueError(f"bad section header {line!r}")
            current = sections.setdefault(line[1:-1], {})
        elif current is None or "=" not in line:
            raise ValueError(f"line outside a section or without '=': {line!r}")
        else:
            key, _, value = line.partition("=")
            current.setdefault(key.strip(), []).append(value.strip())
    for needed in ("Unit", "Service", "Install"):
        if needed not in sections:
            raise ValueError(f"missing [{needed}] section")
    unit = SystemdUnit(sections)
    starts = [v for v in sections["Service"].get("ExecStart", []) if v]
    if len(starts) != 1:
        raise ValueError("[Service] needs exactly one ExecStart")
    argv = unit.exec_start()
    if not argv[0].startswith("/"):
        raise ValueError(f"ExecStart binary {argv[0]!r} is not an absolute path")
    names = [a.split("=", 1)[0] for a in argv[1:]]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"ExecStart repeats {dupes}")
    return unit
