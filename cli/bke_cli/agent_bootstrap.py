"""What `bke agent bootstrap` does once its options are read (bke_cli.agent_cmd declares them):
check the options, pick the nodes and each node's parameters, then print the installers, print
the dry run, or bootstrap the nodes over SSH with the pinned command-signing key.

The order of the checks is the command's contract: every bad input is refused (exit 2) before
anything is contacted, and the key the bus answers is checked against the pin before any node
is (exit 1).
"""
from __future__ import annotations

import asyncio
import json
import tempfile
from dataclasses import asdict, dataclass, replace
from enum import Enum
from pathlib import Path
from typing import NoReturn

import httpx
from nats.aio.client import Client as NatsClient
from rich.console import Console
from rich.table import Table

from bke.adapters.auth.permissions import identity_name
from bke.adapters.bus.connect import connect_nats
from bke.adapters.ssh import (
    BootstrapParams,
    NodeOutcome,
    SshOptions,
    SshTarget,
    StandaloneSource,
    WheelBuildError,
    bootstrap_nodes,
    bootstrap_steps,
    build_wheel,
    describe_steps,
    expected_wheel_name,
    installer_files,
    installer_line,
    load_identity,
    open_session,
    policy_from_options,
    policy_problems,
    project_root,
    standalone_source,
    validate_nats_url,
)
from bke.adapters.ssh.hostkeys import HostKeyPolicy
from bke.core.errors import PermanentError
from bke.core.plan import Plan
from bke.core.secrets.command_key_pin import CommandKeyPin

from .connect import resolve_nats
from .output import EXIT_FAILURE, EXIT_INVALID, EXIT_OK, Fmt, die, error_lines, warn_lines
from .provision import KeyRecorder, command_key_pin, fetch_command_key, trusted_command_key
from .spec_input import plan_or_exit

__all__ = ["BootstrapOptions", "PythonChoice", "run_bootstrap"]


class PythonChoice(str, Enum):
    auto = "auto"
    system = "system"
    bundled = "bundled"


@dataclass(frozen=True)
class BootstrapOptions:
    """The command's options, as typer read them (their help: bke_cli.agent_cmd.bootstrap)."""
    spec: Path
    nats: str
    identity: Path | None
    known_hosts: Path | None
    fingerprints: list[str]
    nodes: str | None
    dry_run: bool
    print_installer: bool
    concurrency: int
    wheel: Path | None
    requirements: Path | None
    remote_python: str
    python: PythonChoice
    python_from: str | None
    wheelhouse: str | None
    output: Fmt
    creds_dir: Path | None
    command_key_fingerprint: str | None
    command_key_file: Path | None
    command_key_unsafe: bool


@dataclass(frozen=True)
class _Ssh:
    """How every node is reached: the client's key and the host-key policy."""
    options: SshOptions
    policy: HostKeyPolicy


def run_bootstrap(o: BootstrapOptions) -> NoReturn:
    """Check the options, then print the installers, the dry run, or bootstrap the nodes; exits."""
    _check_exclusive(o)
    plan = plan_or_exit(o.spec)
    targets, params = _node_params(o, plan)
    if o.print_installer:
        _print_installers(plan, targets, params)
    if o.dry_run:
        _print_dry_run(targets, params)
    ssh = _ssh_access(o, targets)
    try:
        pin = command_key_pin(o.command_key_fingerprint, o.command_key_file, o.command_key_unsafe)
    except (ValueError, PermanentError) as exc:
        die(str(exc), EXIT_INVALID)
    with tempfile.TemporaryDirectory(prefix="bke-wheel-") as tmp:
        if o.wheel is None:
            params = _with_built_wheel(params, Path(tmp))
        outcomes = asyncio.run(_bootstrap_all(o, plan, targets, params, ssh, pin))
    _report(outcomes, o.output)
    raise SystemExit(EXIT_OK if all(x.ok for x in outcomes) else EXIT_FAILURE)


def _check_exclusive(o: BootstrapOptions) -> None:
    if o.dry_run and o.print_installer:
        die("--dry-run and --print-installer exclude each other", EXIT_INVALID)
    if o.print_installer and o.creds_dir is not None:
        # The line would carry the node's NATS seed into a terminal and a shell history.
        die("--print-installer cannot carry --creds-dir: copy the node's creds file with the wheel and "
            "write it to /etc/bke-agent/nats.creds (0600) yourself", EXIT_INVALID)


def _node_params(o: BootstrapOptions, plan: Plan) -> tuple[list[SshTarget], dict[str, BootstrapParams]]:
    """The chosen nodes and each one's bootstrap parameters; every input checked here."""
    try:
        validate_nats_url(o.nats)
    except ValueError as exc:
        die(f"--nats: {exc}", EXIT_INVALID)
    targets = _select(plan, o.nodes)
    reqs = _requirements(o.requirements)
    if o.wheel is not None and not o.wheel.is_file():
        die(f"{o.wheel}: no such file", EXIT_INVALID)
    # Without --wheel, the wheel is built only for a real run; its name is known in advance.
    wheel_name = o.wheel or Path("<built at run time>") / expected_wheel_name()
    sources = _standalone_sources(plan, targets, o.python, o.python_from)
    params = {t.node: _params(plan, t, o.nats, wheel_name, reqs, o.remote_python,
                              _node_creds(o.creds_dir, plan.cluster, t.node), o.wheelhouse, o.python.value,
                              sources.get(t.node)) for t in targets}
    return targets, params


def _print_installers(plan: Plan, targets: list[SshTarget], params: dict[str, BootstrapParams]) -> NoReturn:
    for t in targets:
        files = " and ".join(installer_files(params[t.node]))
        try:
            line = installer_line(params[t.node])
        except ValueError as exc:
            die(f"node {t.node}: {exc}", EXIT_INVALID)
        print(f"# node {t.node} (cluster {plan.cluster}): as root, in a directory holding {files}, run:")
        print(line)
    raise SystemExit(EXIT_OK)


def _print_dry_run(targets: list[SshTarget], params: dict[str, BootstrapParams]) -> NoReturn:
    for t in targets:
        print(f"# node {t.node}: {t.username}@{t.host}:{t.port}")
        print("\n".join(describe_steps(bootstrap_steps(params[t.node]))))
    raise SystemExit(EXIT_OK)


def _ssh_access(o: BootstrapOptions, targets: list[SshTarget]) -> _Ssh:
    options = _ssh_options(o.identity)
    try:
        policy = policy_from_options(o.known_hosts, o.fingerprints)
    except ValueError as exc:
        die(str(exc), EXIT_INVALID)
    if problems := policy_problems(policy, [t.node for t in targets]):
        error_lines(problems)
        raise SystemExit(EXIT_INVALID)
    return _Ssh(options, policy)


async def _bootstrap_all(o: BootstrapOptions, plan: Plan, targets: list[SshTarget],
                         params: dict[str, BootstrapParams], ssh: _Ssh, pin: CommandKeyPin | None) -> list[NodeOutcome]:
    # trust: each agent is given the dispatcher's public key, and its own key is
    # recorded through the provisioning channel before it starts (bke_cli.provision)
    try:
        nc = await connect_nats(resolve_nats(None, o.nats), name="bke-agent-bootstrap")
    except Exception as exc:  # noqa: BLE001 - any connect failure is one clear line
        die(f"--nats: cannot reach NATS to provision the agents: {type(exc).__name__}: {exc}", EXIT_FAILURE)
    by_node = {t.node: t for t in targets}
    try:
        public_line = await _command_key_line(nc, pin)
        keyed = {n: replace(p, command_key=public_line) for n, p in params.items()}
        return await bootstrap_nodes(
            [(t.node, f"{t.host}:{t.port}") for t in targets],
            lambda node: bootstrap_steps(keyed[node]),
            lambda node: open_session(by_node[node], ssh.policy, ssh.options),
            o.concurrency,
            cluster=plan.cluster,
            on_public_key=KeyRecorder(nc, plan.cluster),
        )
    finally:
        await nc.close()


async def _command_key_line(nc: NatsClient, pin: CommandKeyPin | None) -> str:
    """The public line of the command-signing key the bus answers, refused unless it is the pinned one."""
    try:
        key = trusted_command_key(await fetch_command_key(nc), pin)
    except (RuntimeError, PermanentError) as exc:  # no answer, or not the pinned key
        die(str(exc), EXIT_FAILURE)
    if pin is None:
        warn_lines([f"the agents are given the command-signing key the bus answered, {key.fingerprint}, "
                    "unverified (--command-key-unsafe-skip-verification)"])
    return key.public_line


def _select(plan: Plan, names: str | None) -> list[SshTarget]:
    specs = {n.spec.hostname: n.spec for n in plan.spec.nodes}
    wanted = list(specs) if names is None else [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in specs]
    if unknown or not wanted:
        die(f"--nodes: not in the spec: {', '.join(unknown) or '(none given)'}", EXIT_INVALID)
    return [SshTarget(n, specs[n].ip, specs[n].port, specs[n].username) for n in dict.fromkeys(wanted)]


def _requirements(path: Path | None) -> Path:
    if path is None:
        root = project_root()
        if root is None:
            die("not running from a source checkout: pass --requirements FILE and --wheel FILE", EXIT_INVALID)
        path = root / "requirements-agent.txt"  # the agent's own set, not the services' and tests'
    if not path.is_file():
        die(f"{path}: no such file", EXIT_INVALID)
    return path


def _node_creds(creds_dir: Path | None, cluster: str, node: str) -> str | None:
    """The node's creds file text, or None without --creds-dir (a NATS without authentication)."""
    if creds_dir is None:
        return None
    path = creds_dir / f"{identity_name('agent', cluster, node)}.creds"
    try:
        return path.read_text()
    except OSError as exc:
        die(f"--creds-dir: {path}: {exc.strerror}; make it with `bke identities provision agent --cluster {cluster} "
            f"--node {node} --out {path}`", EXIT_INVALID)


def _standalone_sources(plan: Plan, targets: list[SshTarget], mode: PythonChoice,
                        location: str | None) -> dict[str, StandaloneSource]:
    """Each node's bundled CPython (by its spec's arch), read once per arch; none for --python system."""
    if mode is PythonChoice.system or location is None:
        return {}
    arch = {n.spec.hostname: n.spec.arch for n in plan.spec.nodes}
    by_arch: dict[str, StandaloneSource] = {}
    try:
        for a in sorted({arch[t.node] for t in targets}):
            by_arch[a] = standalone_source(location, a, _read_url)
    except ValueError as exc:
        die(f"--python-from: {exc}", EXIT_INVALID)
    return {t.node: by_arch[arch[t.node]] for t in targets}


def _read_url(url: str) -> str:
    try:
        resp = httpx.get(url, timeout=30.0, follow_redirects=True)
    except httpx.HTTPError as exc:
        raise ValueError(f"GET {url}: {type(exc).__name__}: {exc}") from None
    if resp.status_code != 200:
        raise ValueError(f"GET {url}: HTTP {resp.status_code}")
    return resp.text


def _params(plan: Plan, t: SshTarget, nats: str, wheel: Path, reqs: Path, python: str,
            creds: str | None = None, wheelhouse: str | None = None, python_mode: str = "auto",
            standalone: StandaloneSource | None = None) -> BootstrapParams:
    params = BootstrapParams(cluster=plan.cluster, node=t.node, nats_url=nats, wheel=wheel,
                             requirements=reqs, username=t.username, python=python, nats_creds=creds,
                             wheelhouse=wheelhouse, python_mode=python_mode, standalone=standalone)
    try:
        bootstrap_steps(params)  # validates names, the NATS URL and the wheel name
    except ValueError as exc:
        die(f"node {t.node}: {exc}", EXIT_INVALID)
    return params


def _ssh_options(identity: Path | None) -> SshOptions:
    if identity is None:
        return SshOptions()
    try:
        return SshOptions(identity=load_identity(identity))
    except ValueError as exc:
        die(str(exc), EXIT_INVALID)


def _with_built_wheel(params: dict[str, BootstrapParams], work: Path) -> dict[str, BootstrapParams]:
    root = project_root()
    if root is None:
        die("not running from a source checkout: pass --wheel FILE", EXIT_INVALID)
    try:
        built = build_wheel(root, work)
    except WheelBuildError as exc:
        die(str(exc), EXIT_FAILURE)
    return {n: replace(p, wheel=built) for n, p in params.items()}


def _report(outcomes: list[NodeOutcome], output: Fmt) -> None:
    error_lines(f"node {o.node} ({o.address}): {o.status}: {o.message}" for o in outcomes if not o.ok)
    if output is Fmt.json:
        print(json.dumps([asdict(o) for o in outcomes], indent=2))
        return
    table = Table("node", "address", "status", "step", "agent public key / reason")
    for o in outcomes:
        table.add_row(o.node, o.address, o.status, o.step or "", o.public_key if o.ok else o.message)
    Console().print(table)
    ok = sum(o.ok for o in outcomes)
    print(f"{ok}/{len(outcomes)} nodes ok")
