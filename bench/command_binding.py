#!/usr/bin/env python3
"""What binding a command to its receiver costs per command (bke.core.secrets.binding). A script,
not a test.

    .venv/bin/python bench/command_binding.py [--commands 2000] [--redis URL]

On the agent, per command, for the upgrade's worker-like command of bench/command_cpu.py
(4.7 KB on the wire), the median of nine rounds of process CPU, the variants taking turns:

* ``verify before``: what an agent checked before binding: the body read (form check, parse)
  and `CommandVerifier.authentic` + `fresh`, for the same command unbound;
* ``verify after``: the same for the bound body, plus the binding's checks (`receiver_refusal`,
  `unbound_refusal`, `served_after`);
* ``binding checks``: those three alone, on the parsed command;
* ``handling``: one real `AgentLoop` taking the body whole (NullBackend steps, journal, result,
  ack), unbound and bound.

On the signer: `signed_command_bytes` without and with a binding, and with `--redis` what the
dispatcher and upgrader run, `CommandSigning.sign_bytes`: the binding read from Redis then
signed, read for each command (one pipelined round trip) or for 500 at once (`prefetch`, as the
install phases, health rounds and upgrade steps send), against a throwaway cluster's records
that are removed afterwards. Wall time is given too: a round trip is mostly waiting.
"""
from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
import uuid
from collections.abc import Callable
from datetime import timedelta

from command_cpu import NOW, _command, _JetStream, _Msg
from record import add_json_option, save  # bench/record.py (this script's folder is on sys.path)

from bke.adapters.bus.message_version import read_message
from bke.contracts.agent import AgentCommand, ProvisionAgent
from bke.core.secrets import SecretBox
from bke.core.secrets.binding import Binding, new_incarnation, receiver_refusal, served_after, unbound_refusal
from bke.core.secrets.signing import CommandSigner, signed_command_bytes
from bke_agent import AgentIdentity, AgentLoop, AgentSettings, MemoryJournal, NullBackend
from bke_agent.verify import CommandVerifier

ROUNDS = 9
PREFETCH_CHUNK = 500  # as bke_upgrader.batches and the dispatcher's health rounds read them


def _paired_us(works: list[Callable[[], None]], n: int) -> list[float]:
    """Each work's median process CPU per command over ROUNDS, the works taking turns within a
    round: on a shared machine a slow spell then weighs on all of them alike."""
    spent: list[list[float]] = [[] for _ in works]
    for _ in range(ROUNDS):
        for i, work in enumerate(works):
            t0 = time.process_time()
            work()
            spent[i].append(time.process_time() - t0)
    return [statistics.median(s) / n * 1e6 for s in spent]


def _agent_side(signer: CommandSigner, cmds: list[AgentCommand], idents: list[AgentIdentity], inc: str) -> list[dict[str, str]]:
    unbound = [signed_command_bytes(c, signer) for c in cmds]
    bound = [signed_command_bytes(c, signer, binding=Binding(i.agent_id, inc)) for c, i in zip(cmds, idents)]
    verifiers = [CommandVerifier(signer.verify_key, c.cluster, c.node) for c in cmds]
    made = NOW - timedelta(days=1)

    def before() -> None:
        for v, body in zip(verifiers, unbound):
            cmd = read_message(AgentCommand, body, 1)
            assert (v.authentic(cmd, body) or v.fresh(cmd, NOW)) is None

    def after() -> None:
        for v, body, ident in zip(verifiers, bound, idents):
            cmd = read_message(AgentCommand, body, 1)
            why = (v.authentic(cmd, body) or receiver_refusal(cmd, ident.agent_id, None) or v.fresh(cmd, NOW)
                   or unbound_refusal(cmd, ident.agent_id, None, made))
            assert why is None
            served_after(cmd, ident.agent_id, None)

    parsed = [AgentCommand.model_validate_json(b) for b in bound]

    def checks() -> None:
        for cmd, ident in zip(parsed, idents):
            receiver_refusal(cmd, ident.agent_id, None)
            unbound_refusal(cmd, ident.agent_id, None, made)
            served_after(cmd, ident.agent_id, None)

    n = len(cmds)
    b, a, c = _paired_us([before, after, checks], n)
    print(f"agent, {n} commands of {len(unbound[0])} B unbound / {len(bound[0])} B bound (process CPU per command):")
    print(f"  verify before {b:7.1f} us   verify after {a:7.1f} us   (+{a - b:.1f} us)   binding checks {c:6.2f} us")
    spent: dict[str, list[float]] = {"unbound": [], "bound": []}
    for _ in range(ROUNDS):  # taking turns, as above; new agents each round (a journal would replay)
        for name, bodies in (("unbound", unbound), ("bound", bound)):
            spent[name].append(_handling(signer, cmds, idents, bodies))
    u, bd = (statistics.median(spent[k]) / n * 1e6 for k in ("unbound", "bound"))
    print(f"  handling      {u:7.1f} us unbound,   {bd:7.1f} us bound (one AgentLoop per node, whole handling)")
    size = f"{n} commands of {len(unbound[0])} B unbound / {len(bound[0])} B bound"
    return [{"side": "agent", "figure": "verify before", "process CPU per command": f"{b:.1f} us", "of": size},
            {"side": "agent", "figure": "verify after", "process CPU per command": f"{a:.1f} us (+{a - b:.1f} us)", "of": size},
            {"side": "agent", "figure": "binding checks", "process CPU per command": f"{c:.2f} us", "of": size},
            {"side": "agent", "figure": "handling, unbound", "process CPU per command": f"{u:.1f} us", "of": size},
            {"side": "agent", "figure": "handling, bound", "process CPU per command": f"{bd:.1f} us", "of": size}]


def _handling(signer: CommandSigner, cmds: list[AgentCommand], idents: list[AgentIdentity], bodies: list[bytes]) -> float:
    """Process CPU for one agent per command taking its body (the agents are made untimed)."""
    loops = [AgentLoop(None, _JetStream(), AgentSettings(cluster=c.cluster, node=c.node, heartbeat_s=0),  # type: ignore[arg-type]
                       NullBackend(), MemoryJournal(), ident,
                       verifier=CommandVerifier(signer.verify_key, c.cluster, c.node), now=lambda: NOW)
             for c, ident in zip(cmds, idents)]

    async def run() -> float:
        t0 = time.process_time()
        for loop, body in zip(loops, bodies):
            await loop._on_msg(_Msg(body))  # type: ignore[arg-type]
        spent = time.process_time() - t0
        assert sum(loop.executed for loop in loops) == len(cmds)
        return spent

    return asyncio.run(run())


def _signer_side(signer: CommandSigner, cmds: list[AgentCommand], idents: list[AgentIdentity], inc: str,
                 redis_url: str | None) -> list[dict[str, str]]:
    n = len(cmds)
    plain, bound = _paired_us([lambda: [signed_command_bytes(c, signer) for c in cmds],  # type: ignore[func-returns-value]
                               lambda: [signed_command_bytes(c, signer, binding=Binding(i.agent_id, inc))
                                        for c, i in zip(cmds, idents)]], n)
    print(f"signer (process CPU per command): signed_command_bytes {plain:6.1f} us unbound, {bound:6.1f} us bound")
    rows = [{"side": "signer", "figure": "signed_command_bytes, unbound", "process CPU per command": f"{plain:.1f} us"},
            {"side": "signer", "figure": "signed_command_bytes, bound", "process CPU per command": f"{bound:.1f} us"}]
    if redis_url:
        for name, (cpu, wall) in asyncio.run(_signing(redis_url, signer, cmds, idents)).items():
            how = "one read per command" if name == "each" else f"read for {PREFETCH_CHUNK} commands at once (prefetch)"
            print(f"  CommandSigning.sign_bytes, binding {how}: {cpu:6.1f} us process CPU, {wall:6.1f} us wall")
            rows.append({"side": "signer", "figure": f"CommandSigning.sign_bytes, binding {how}",
                         "process CPU per command": f"{cpu:.1f} us", "wall": f"{wall:.1f} us"})
    return rows


async def _signing(redis_url: str, signer: CommandSigner, cmds: list[AgentCommand],
                   idents: list[AgentIdentity]) -> dict[str, tuple[float, float]]:
    from redis.asyncio import Redis

    from bke.adapters.state.command_signing import CommandSigning
    from bke.adapters.state.keys.common import cluster_key
    from bke.adapters.state.keys.plan import plan_meta_key
    from bke.adapters.state.keys.certs import provisioned_agents_key

    cluster = cmds[0].cluster
    r = Redis.from_url(redis_url)
    try:
        await r.hset(plan_meta_key(cluster), mapping={"digest": "bench", "incarnation": new_incarnation(NOW, "0" * 16)})
        await r.hset(provisioned_agents_key(cluster), mapping={
            c.node: ProvisionAgent(cluster=cluster, node=c.node, agent_id=i.agent_id,
                                   seal_public_key_b64=i.public_key_b64).to_bytes() for c, i in zip(cmds, idents)})
        signing = CommandSigning(r, lambda: SecretBox(b"\0" * 32))
        signing._signer = signer  # the deployment key is not needed: no key is stored here
        spent: dict[str, tuple[list[float], list[float]]] = {"each": ([], []), "prefetched": ([], [])}
        for _ in range(ROUNDS):  # taking turns
            for name in spent:
                t0, w0 = time.process_time(), time.perf_counter()
                for i, c in enumerate(cmds):
                    if name == "prefetched" and i % PREFETCH_CHUNK == 0:  # as the engine and upgrader send
                        await signing.prefetch(cluster, [x.node for x in cmds[i:i + PREFETCH_CHUNK]])
                    await signing.sign_bytes(c)
                spent[name][0].append(time.process_time() - t0)
                spent[name][1].append(time.perf_counter() - w0)
        return {name: (statistics.median(cpu) / len(cmds) * 1e6, statistics.median(wall) / len(cmds) * 1e6)
                for name, (cpu, wall) in spent.items()}
    finally:
        await r.delete(*[k async for k in r.scan_iter(match=cluster_key(cluster, "*"))])
        await r.aclose()


def main(n: int, redis_url: str | None) -> list[dict[str, str]]:
    signer = CommandSigner.generate()
    cluster = f"bench-binding-{uuid.uuid4().hex[:8]}"
    cmds = [_command(i, random.Random(i)).model_copy(update={"cluster": cluster}) for i in range(n)]
    idents = [AgentIdentity.ephemeral() for _ in cmds]
    inc = new_incarnation(NOW, "0" * 16)
    return _agent_side(signer, cmds, idents, inc) + _signer_side(signer, cmds, idents, inc, redis_url)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commands", type=int, default=2000)
    ap.add_argument("--redis", default=None, help="a Redis URL (a user that may write bke:*): also time the Redis read")
    add_json_option(ap)
    args = ap.parse_args()
    save(args.json, "command_binding", main(args.commands, args.redis))
