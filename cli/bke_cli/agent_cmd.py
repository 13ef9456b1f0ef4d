"""`bke agent bootstrap SPEC --nats URL ...`: put bke-agent on the spec's nodes over SSH.

Thin over :mod:`bke.adapters.ssh`: this module reads options, picks nodes from the spec, prints. The step
table, host-key policy, SSH session and installer all live in the library. The command-signing
key the agents are given is the dispatcher's answer on the bus, refused unless it is the key the
operator pinned (bke.core.secrets.command_key_pin). Exit codes: 0 every node ok, 1 any node failed or
the bus answered another key than the pinned one (then no node was contacted), 2 bad input
(nothing was contacted).
"""
from __future__ import annotations

import asyncio
import json
import tempfile
from dataclasses import asdict, replace
from enum import Enum
from pathlib import Path

import httpx
import typer
from bke.adapters.auth.permissions import identity_name
from bke.core.plan import Plan
from bke.core.pythons import STANDALONE, supported_text
from bke.adapters.ssh import (
    PYTHON_PREFIX,
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
from rich.console import Console
from rich.table import Table

from bke.adapters.bus.connect import connect_nats

from .connect import resolve_nats
from bke.core.errors import PermanentError

from .output import EXIT_FAILURE, EXIT_INVALID, EXIT_OK, Fmt, die, error_lines, warn_lines
from .provision import KeyRecorder, command_key_pin, fetch_command_key, trusted_command_key
from .spec_input import plan_or_exit

__all__ = ["agent_app", "bootstrap", "register"]

agent_app = typer.Typer(no_args_is_help=True, add_completion=False, help="Node agents: put bke-agent on nodes.")


def register(app: typer.Typer) -> None:
    app.add_typer(agent_app, name="agent")


class PythonChoice(str, Enum):
    auto = "auto"
    system = "system"
    bundled = "bundled"


@agent_app.command("bootstrap")
def bootstrap(
    spec: Path = typer.Argument(..., help="the cluster spec; each node's ip, port and username are used"),
    nats: str = typer.Option(..., "--nats", help="NATS URL the agents connect to (written to /etc/bke-agent/env, 0600)"),
    identity: Path | None = typer.Option(None, "--identity", help="private key file (default: ssh-agent, ~/.ssh/id_*)"),
    known_hosts: Path | None = typer.Option(None, "--known-hosts", help="OpenSSH known_hosts file to verify host keys"),
    fingerprints: list[str] = typer.Option(
        [], "--host-key-fingerprint", help="SHA256:... for every node, or NODE=SHA256:...; repeatable"),
    nodes: str | None = typer.Option(None, "--nodes", help="comma-separated hostnames (default: all)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print every command and upload; connect to nothing"),
    print_installer: bool = typer.Option(False, "--print-installer", help="print a one-line installer per node"),
    concurrency: int = typer.Option(20, "--concurrency", min=1, max=1000, help="nodes bootstrapped at once"),
    wheel: Path | None = typer.Option(None, "--wheel", help="BKE wheel to install (default: built now from this checkout)"),
    requirements: Path | None = typer.Option(None, "--requirements", help="pinned requirements (default: the checkout's requirements-agent.txt)"),
    remote_python: str = typer.Option("python3", "--remote-python",
                                      help=f"the nodes' Python interpreter ({supported_text()})"),
    python: PythonChoice = typer.Option(
        PythonChoice.auto, "--python", help=f"auto: the node's --remote-python when it is {supported_text()}, else the "
        f"bundled CPython {STANDALONE.python} (needs --python-from); system: the node's only; bundled: always the "
        f"bundled one (unpacked in {PYTHON_PREFIX})"),
    python_from: str | None = typer.Option(
        None, "--python-from", help="where the bundled CPython is: the bundle's directory on this machine (uploaded "
        "to each node) or its httpRepo URL (each node fetches it with curl or wget); the bundle's .sha256 is checked "
        "on the node"),
    wheelhouse: str | None = typer.Option(
        None, "--wheelhouse", help="install from this wheelhouse with no package index: the bundle's "
        "<httpRepo>/agent/<version>/wheels/index.html (bke bundle build), or a path on the nodes"),
    output: Fmt = typer.Option(Fmt.table, "-o", "--output", help="result as table or json"),
    creds_dir: Path | None = typer.Option(
        None, "--creds-dir", help="folder of each node's NATS identity, <dir>/agent.<cluster>.<node>.creds (made by "
        "`bke identities provision agent --cluster C --node N --out FILE`); shipped 0600 to /etc/bke-agent/nats.creds"),
    command_key_fingerprint: str | None = typer.Option(
        None, "--command-key-fingerprint", help="the dispatcher's command-signing key the agents are to trust: "
        "SHA256:... as `bke state init` prints it, or its public line 'bke-command-ed25519 <base64>'; the key the "
        "bus answers must be this one"),
    command_key_file: Path | None = typer.Option(
        None, "--command-key-file", help="the same pin from a file holding the public line "
        "(`bke state init --command-key-out FILE`; a lab's <lab>/command-key.pub)"),
    command_key_unsafe: bool = typer.Option(
        False, "--command-key-unsafe-skip-verification", help="give the agents whatever key the bus answers, "
        "unverified (its fingerprint is printed): whoever can answer on the bus then commands the nodes"),
) -> None:
    """Install and start bke-agent on the spec's nodes (SSH, public key, verified host key, pinned
    command-signing key)."""
    if dry_run and print_installer:
        die("--dry-run and --print-installer exclude each other", EXIT_INVALID)
    if print_installer and creds_dir is not None:
        # The line would carry the node's NATS seed into a terminal and a shell history.
        die("--print-installer cannot carry --creds-dir: copy the node's creds file with the wheel and "
            "write it to /etc/bke-agent/nats.creds (0600) yourself", EXIT_INVALID)
    plan = plan_or_exit(spec)
    try:
        validate_nats_url(nats)
    except ValueError as exc:
        die(f"--nats: {exc}", EXIT_INVALID)
    targets = _select(plan, nodes)
    reqs = _requirements(requirements)
    if wheel is not None and not wheel.is_file():
        die(f"{wheel}: no such file", EXIT_INVALID)
    # Without --wheel, the wheel is built only for a real run; its name is known in advance.
    wheel_name = wheel or Path("<built at run time>") / expected_wheel_name()
    sources = _standalone_sources(plan, targets, python, python_from)
    params = {t.node: _params(plan, t, nats, wheel_name, reqs, remote_python, _node_creds(creds_dir, plan.cluster, t.node),
                              wheelhouse, python.value, sources.get(t.node)) for t in targets}
    if print_installer:
        for t in targets:
            files = " and ".join(installer_files(params[t.node]))
            try:
                line = installer_line(params[t.node])
            except ValueError as exc:
                die(f"node {t.node}: {exc}", EXIT_INVALID)
            print(f"# node {t.node} (cluster {plan.cluster}): as root, in a directory holding {files}, run:")
            print(line)
        raise SystemExit(EXIT_OK)
    if dry_run:
        for t in targets:
            print(f"# node {t.node}: {t.username}@{t.host}:{t.port}")
            print("\n".join(describe_steps(bootstrap_steps(params[t.node]))))
        raise SystemExit(EXIT_OK)
    options = _ssh_options(identity)
    try:
        policy = policy_from_options(known_hosts, fingerprints)
    except ValueError as exc:
        die(str(exc), EXIT_INVALID)
    if problems := policy_problems(policy, [t.node for t in targets]):
        error_lines(problems)
        raise SystemExit(EXIT_INVALID)
    try:
        pin = command_key_pin(command_key_fingerprint, command_key_file, command_key_unsafe)
    except (ValueError, PermanentError) as exc:
        die(str(exc), EXIT_INVALID)
    by_node = {t.node: t for t in targets}

    async def run_all(params: dict[str, BootstrapParams]) -> list[NodeOutcome]:
        # trust: each agent is given the dispatcher's public key, and its own key is
        # recorded through the provisioning channel before it starts (bke_cli.provision)
        try:
            nc = await connect_nats(resolve_nats(None, nats), name="bke-agent-bootstrap")
        except Exception as exc:  # noqa: BLE001 - any connect failure is one clear line
            die(f"--nats: cannot reach NATS to provision the agents: {type(exc).__name__}: {exc}", EXIT_FAILURE)
        try:
            try:
                key = trusted_command_key(await fetch_command_key(nc), pin)
            except (RuntimeError, PermanentError) as exc:  # no answer, or not the pinned key
                die(str(exc), EXIT_FAILURE)
            if pin is None:
                warn_lines([f"the agents are given the command-signing key the bus answered, {key.fingerprint}, "
                            "unverified (--command-key-unsafe-skip-verification)"])
            keyed = {n: replace(p, command_key=key.public_line) for n, p in params.items()}
            return await bootstrap_nodes(
                [(t.node, f"{t.host}:{t.port}") for t in targets],
                lambda node: bootstrap_steps(keyed[node]),
                lambda node: open_session(by_node[node], policy, options),
                concurrency,
                cluster=plan.cluster,
                on_public_key=KeyRecorder(nc, plan.cluster),
            )
        finally:
            await nc.close()

    with tempfile.TemporaryDirectory(prefix="bke-wheel-") as tmp:
        if wheel is None:
            params = _with_built_wheel(params, Path(tmp))
        outcomes = asyncio.run(run_all(params))
    _report(outcomes, output)
    raise SystemExit(EXIT_OK if all(o.ok for o in outcomes) else EXIT_FAILURE)


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


@agent_app.command("provision")
def provision(
    key_line: str = typer.Argument(..., help="what `bke-agent init` printed on the node: 'bke-agent-x25519 <base64>'"),
    cluster: str = typer.Option(..., "--cluster"),
    node: str = typer.Option(..., "--node", help="the node's hostname in the spec"),
    workdir: Path | None = typer.Option(None, "--workdir", help="a lab's work directory"),
    nats_url: str | None = typer.Option(None, "--nats", help="NATS URL (with BKE_NATS_CREDS: the operator's creds)"),
) -> None:
    """Record an agent key made where `bke agent bootstrap` cannot reach over SSH (a container,
    an image baked elsewhere): the certs service then seals that node's files to it and to no
    other key. Run `bke-agent init` on the node (it prints the line), then this, as the operator."""
    import base64
    import binascii
    from datetime import datetime, timezone

    from bke.contracts.agent import ProvisionAgent
    from bke.adapters.provisioning import ProvisionRefused, provision_agent
    from bke.core.secrets.sealing import agent_key_id, public_key_from_raw

    parts = key_line.split()
    if len(parts) != 2 or parts[0] != "bke-agent-x25519":
        die("KEY_LINE: expected 'bke-agent-x25519 <base64>', as `bke-agent init` prints it", EXIT_INVALID)
    try:
        agent_id = agent_key_id(public_key_from_raw(base64.b64decode(parts[1], validate=True)))
    except (binascii.Error, ValueError) as exc:
        die(f"KEY_LINE: not an X25519 public key: {exc}", EXIT_INVALID)
    try:
        req = ProvisionAgent(cluster=cluster, node=node, agent_id=agent_id, seal_public_key_b64=parts[1],
                             at=datetime.now(timezone.utc).isoformat())
    except ValueError as exc:
        die(" ".join(str(exc).split()), EXIT_INVALID)
    access = resolve_nats(workdir, nats_url)

    async def record() -> None:
        nc = await connect_nats(access)
        try:
            await provision_agent(nc, req)
        finally:
            await nc.close()

    try:
        asyncio.run(record())
    except ProvisionRefused as exc:
        die(str(exc), EXIT_INVALID)
    except (TimeoutError, OSError) as exc:
        die(f"{type(exc).__name__}: {exc}", EXIT_FAILURE)
    Console().print(f"agent {agent_id} recorded for {node} in {cluster}", highlight=False)
