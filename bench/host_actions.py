#!/usr/bin/env python3
"""What the agent's host action checks cost (bke.core.host_actions). A script, not a test.

    .venv/bin/python bench/host_actions.py [--rounds 9]

Per command, process CPU, the median of the rounds: `command_refusal` (what the agent loop
runs on every command before its steps: each write's class and path, programs, units, probes)
on the commands the dispatcher builds for the seed and split examples (install phases, a health
round), and on bench/command_cpu.py's 4.7 KB upgrade command (the one bench/command_binding.py
times the verification of), also inside AgentLoop's whole handling of it. Per file, where the agent opens a file's clear bytes:
`kubeconfig_refusal` on a kubeconfig (parsed) and on a static pod manifest (only looked at).
Per kubeconfig made by the certs service: `render_kubeconfig`, which parses its output back.
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from command_cpu import NOW, _command
from record import add_json_option, save  # bench/record.py (this script's folder is on sys.path)

from bke.adapters.checksums import artefact_urls
from bke.contracts.agent import AgentCommand
from bke.core.host_actions import command_refusal, kubeconfig_refusal
from bke.core.host_actions.kubeconfigs import kubeconfig_problems
from bke.core.pki import node_file_refs
from bke.core.pki.kubeconfig import _TEMPLATE, _b64, _quote, render_kubeconfig
from bke.core.plan import Plan, plan_spec_text
from bke.core.render import RenderInputs, render_cluster
from bke.core.state.nodefiles import NodeFile
from bke_dispatcher.health import HEALTH_COMPONENTS
from bke_dispatcher.phases import PHASES, NodeInputs
from bke.core.node_steps import health_steps

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _per_item_us(work: Callable[[], object], n: int, rounds: int) -> float:
    spent = []
    for _ in range(rounds):
        t0 = time.process_time()
        work()
        spent.append(time.process_time() - t0)
    return statistics.median(spent) / n * 1e6


def _commands(plan: Plan) -> dict[str, list[AgentCommand]]:
    """The plan's install commands by phase, and a health round, as the dispatcher builds them."""
    rendered = {n.hostname: n.files for n in render_cluster(plan, RenderInputs(vrrp_password="x" * 8)).nodes}
    sums = {u: "0" * 64 for u in artefact_urls(plan)}
    out: dict[str, list[AgentCommand]] = {}

    def files(host: str) -> list[NodeFile]:
        return [NodeFile(path=f.path, mode=f.mode, sha256=hashlib.sha256(f.content).hexdigest(),
                         content_b64=base64.b64encode(f.content).decode()) for f in rendered[host]]

    def certs(host: str) -> list[NodeFile]:
        return [NodeFile(path=r.path, mode=r.mode, sha256="0" * 64, sealed_b64="AAAA")
                for r in node_file_refs(plan, [host])[host]]

    for phase in PHASES:
        for node in phase.targets(plan) if phase.build else ():
            inp = NodeInputs(render=files(node.hostname), certs=certs(node.hostname), checksums=sums, seal=lambda b: b)
            out.setdefault(phase.slug, []).append(AgentCommand(command_id=f"c/{phase.slug}/{node.hostname}/0", cluster="c", node=node.hostname,
                                                               phase=phase.slug, issued_at="t",
                                                               steps=phase.build(plan, node, inp)))
    out["health round"] = [AgentCommand(command_id=f"c/health@1/{n.hostname}/0", cluster="c", node=n.hostname, phase="health", issued_at="t",
                                        steps=health_steps(plan, n, HEALTH_COMPONENTS, 10.0)) for n in plan.nodes]
    return out


def _in_the_loop(cmds: list[AgentCommand], rounds: int) -> tuple[float, float]:
    """Per command: the time spent in the agent loop's `command_refusal` call, and the whole
    handling (bench/command_binding.py's, bound commands), medians of the rounds."""
    import bke_agent.loop as agent_loop
    from command_binding import _handling

    from bke.core.secrets.binding import Binding, new_incarnation
    from bke.core.secrets.signing import CommandSigner, signed_command_bytes
    from bke_agent import AgentIdentity

    signer, inc = CommandSigner.generate(), new_incarnation(NOW, "0" * 16)
    idents = [AgentIdentity.ephemeral() for _ in cmds]
    bodies = [signed_command_bytes(c, signer, binding=Binding(i.agent_id, inc)) for c, i in zip(cmds, idents)]
    real, inside = agent_loop.command_refusal, [0.0]

    def timed(cmd: AgentCommand, node_ip: str | None = None) -> str | None:
        t0 = time.perf_counter()
        try:
            return real(cmd, node_ip)
        finally:
            inside[0] += time.perf_counter() - t0

    agent_loop.command_refusal = timed  # type: ignore[assignment]
    calls, wholes = [], []
    try:
        for _ in range(rounds):
            inside[0] = 0.0
            wholes.append(_handling(signer, cmds, idents, bodies))
            calls.append(inside[0])
    finally:
        agent_loop.command_refusal = real
    return statistics.median(calls) / len(cmds) * 1e6, statistics.median(wholes) / len(cmds) * 1e6


def main(rounds: int) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    print("command_refusal per command (process CPU, median of rounds):")
    for example in ("seed-3m1w.yaml", "split-etcd.yaml"):
        plan = plan_spec_text((EXAMPLES / example).read_text()).plan
        assert plan is not None
        for kind, cmds in _commands(plan).items():
            assert all(command_refusal(c) is None for c in cmds)
            steps = sum(len(c.steps) for c in cmds) / len(cmds)
            us = _per_item_us(lambda cmds=cmds: [command_refusal(c) for c in cmds], len(cmds), rounds)
            print(f"  {example:16} {kind:20} {steps:5.1f} steps  {us:7.2f} us")
            rows.append({"check": "command_refusal, per command", "on": f"{example} {kind} ({steps:.1f} steps)",
                         "cost": f"{us:.2f} us"})
    upgrade = [_command(i, random.Random(i)) for i in range(2000)]
    us = _per_item_us(lambda: [command_refusal(c) for c in upgrade], len(upgrade), rounds)
    print(f"  {'command_cpu.py':16} {'upgrade:workers':20} {1:5.1f} steps  {us:7.2f} us   ({len(upgrade[0].to_bytes())} B)")
    rows.append({"check": "command_refusal, per command",
                 "on": f"command_cpu.py upgrade:workers (1.0 steps, {len(upgrade[0].to_bytes())} B)", "cost": f"{us:.2f} us"})
    inside, whole = _in_the_loop(upgrade[:1000], rounds)
    print(f"  the same inside AgentLoop's handling of it: {inside:6.1f} us (wall, the call only) of {whole:6.1f} us "
          "(process CPU, the whole handling: parse, verify, check, NullBackend steps, journal, result, ack)")
    rows.append({"check": "command_refusal inside AgentLoop's handling", "on": "command_cpu.py upgrade:workers",
                 "cost": f"{inside:.1f} us (wall, the call only) of {whole:.1f} us (process CPU, the whole handling)"})

    kubeconfig = render_kubeconfig(cluster="c", server="https://10.0.0.1:6443", ca_pem=b"C" * 700, cert_pem=b"C" * 800,
                                   key_pem=b"K" * 250, user="system:node:master1")
    manifest = next(f.content for n in render_cluster(plan, RenderInputs(vrrp_password="x" * 8)).nodes for f in n.files
                    if f.path.endswith("kube-apiserver.yaml"))
    n = 2000
    kc = _per_item_us(lambda: [kubeconfig_refusal("/etc/kubernetes/kubelet.conf", kubeconfig) for _ in range(n)], n, rounds)
    mf = _per_item_us(lambda: [kubeconfig_refusal("/etc/kubernetes/manifests/kube-apiserver.yaml", manifest)
                               for _ in range(n)], n, rounds)
    print(f"kubeconfig_refusal per file written: {kc:6.1f} us a kubeconfig ({len(kubeconfig)} B, parsed), "
          f"{mf:5.2f} us a manifest ({len(manifest)} B, looked at)")
    rows.append({"check": "kubeconfig_refusal, per file written", "on": f"a kubeconfig ({len(kubeconfig)} B, parsed)",
                 "cost": f"{kc:.1f} us"})
    rows.append({"check": "kubeconfig_refusal, per file written", "on": f"a manifest ({len(manifest)} B, looked at)",
                 "cost": f"{mf:.2f} us"})

    def plain() -> None:
        for _ in range(n):
            _TEMPLATE.format(ca=_b64(b"C" * 700), server="https://10.0.0.1:6443", cluster=_quote("c"),
                             user=_quote("system:node:master1"), cert=_b64(b"C" * 800), key=_b64(b"K" * 250)).encode()

    before = _per_item_us(plain, n, rounds)
    after = _per_item_us(lambda: [render_kubeconfig(cluster="c", server="https://10.0.0.1:6443", ca_pem=b"C" * 700,
                                                    cert_pem=b"C" * 800, key_pem=b"K" * 250, user="system:node:master1")
                                  for _ in range(n)], n, rounds)
    assert kubeconfig_problems(kubeconfig) == []
    print(f"render_kubeconfig per kubeconfig (certs service): {before:6.1f} us without the parse back, {after:6.1f} us with")
    rows.append({"check": "render_kubeconfig, per kubeconfig (certs service)", "on": "without the parse back",
                 "cost": f"{before:.1f} us"})
    rows.append({"check": "render_kubeconfig, per kubeconfig (certs service)", "on": "with it", "cost": f"{after:.1f} us"})
    return rows


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=9)
    add_json_option(ap)
    args = ap.parse_args()
    save(args.json, "host_actions", main(args.rounds))
