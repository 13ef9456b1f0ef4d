"""`bke agent bootstrap SPEC --nats URL ...`: put bke-agent on the spec's nodes over SSH; `bke agent
provision`: record an agent key made where SSH does not reach.

Thin over :mod:`bke.adapters.ssh`: this module declares the options; bke_cli.agent_bootstrap picks
nodes from the spec, bootstraps them and prints. The step table, host-key policy, SSH session and
installer all live in the library. The command-signing key the agents are given is the
dispatcher's answer on the bus, refused unless it is the key the operator pinned
(bke.core.secrets.command_key_pin). Exit codes: 0 every node ok, 1 any node failed or the bus
answered another key than the pinned one (then no node was contacted), 2 bad input (nothing was
contacted).
"""
from __future__ import annotations

import asyncio
from pathlib import Path

import typer
from rich.console import Console

from bke.adapters.bus.connect import connect_nats
from bke.adapters.ssh import PYTHON_PREFIX
from bke.core.pythons import STANDALONE, supported_text

from .agent_bootstrap import BootstrapOptions, PythonChoice, run_bootstrap
from .connect import resolve_nats
from .output import EXIT_FAILURE, EXIT_INVALID, Fmt, die

__all__ = ["agent_app", "bootstrap", "register"]

agent_app = typer.Typer(no_args_is_help=True, add_completion=False, help="Node agents: put bke-agent on nodes.")


def register(app: typer.Typer) -> None:
    app.add_typer(agent_app, name="agent")


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
    run_bootstrap(BootstrapOptions(
        spec=spec, nats=nats, identity=identity, known_hosts=known_hosts, fingerprints=fingerprints, nodes=nodes,
        dry_run=dry_run, print_installer=print_installer, concurrency=concurrency, wheel=wheel,
        requirements=requirements, remote_python=remote_python, python=python, python_from=python_from,
        wheelhouse=wheelhouse, output=output, creds_dir=creds_dir, command_key_fingerprint=command_key_fingerprint,
        command_key_file=command_key_file, command_key_unsafe=command_key_unsafe))


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
