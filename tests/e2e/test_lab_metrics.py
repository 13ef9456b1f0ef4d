"""`bke lab install` as a user runs it: it prints every service's dashboard URL, and those URLs
work while the install runs: each /readyz answers 200, the dispatcher's /metrics shows the
install's phases and nodes moving between scrapes, and the certificates, plans and renders
appear on the other services' /metrics."""
from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import httpx
import pytest

from bke.lab.supervisor import SERVICES, LabSupervisor
from bke.core.plan import plan_spec_text

from ..integration.test_http_side import _sample

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]
SEED = "examples/seed-3m1w.yaml"
DASHBOARD = re.compile(r"^dashboard (\w+): (http://127\.0\.0\.1:\d+)/$")


def _install_figures(text: str, cluster: str) -> tuple:
    """What moves during an install: phases and nodes by state, commands in flight."""
    states = ("Pending", "Running", "Succeeded", "Failed")
    return (tuple(_sample(text, "bke_phases", cluster=cluster, state=s) for s in (*states, "Skipped")),
            tuple(_sample(text, "bke_nodes", cluster=cluster, state=s) for s in states),
            _sample(text, "bke_commands_in_flight", cluster=cluster))


async def _get(http: httpx.AsyncClient, url: str, deadline: float) -> httpx.Response:
    """GET, waiting (with a deadline) for a service that is still starting to listen."""
    while True:
        try:
            return await http.get(url)
        except httpx.TransportError:
            assert asyncio.get_running_loop().time() < deadline, f"{url} never answered"
            await asyncio.sleep(0.1)  # polling under a deadline: the service is starting


async def test_lab_install_prints_dashboards_whose_metrics_move(tmp_path):
    plan = plan_spec_text(Path(SEED).read_text()).plan
    assert plan is not None
    c = plan.cluster
    workdir = tmp_path / "lab"
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "bke"), "lab", "install", SEED, "--workdir", str(workdir), "--timeout", "400",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    assert proc.stdout is not None
    loop = asyncio.get_running_loop()
    try:
        urls: dict[str, str] = {}
        printed: list[str] = []
        while len(urls) < len(SERVICES):
            # the lab starts every process and provisions the agents before it prints: on a
            # loaded 2-core machine that took over 120 s once, so the install's whole bound applies
            line = (await asyncio.wait_for(proc.stdout.readline(), timeout=300)).decode()
            assert line, f"bke lab install ended before printing every dashboard: {printed}"
            printed.append(line)
            if m := DASHBOARD.match(line.strip()):
                urls[m[1]] = m[2]
        assert set(urls) == set(SERVICES)
        assert LabSupervisor(workdir).http_urls() == urls  # the lab's state file records them
        rest = asyncio.create_task(proc.stdout.read())  # the install's progress lines, kept for a failure

        seen: list[tuple] = []
        deadline = loop.time() + 400
        async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
            while not rest.done():  # scrape the dispatcher while the install runs
                text = (await _get(http, f"{urls['dispatcher']}/metrics", deadline)).text
                figures = _install_figures(text, c)
                if not seen or seen[-1] != figures:
                    seen.append(figures)
                assert loop.time() < deadline, f"the install did not finish: {seen[-3:]}"
                await asyncio.sleep(0.05)  # the scrape interval: figures are read, not awaited
            out = printed + [(await rest).decode()]
            assert await proc.wait() == 0, "".join(out)

            # the figures moved: several distinct readings while it ran, one with a phase running
            assert len(seen) >= 3, seen
            assert any((phases[1] or 0) >= 1 for phases, _, _ in seen), seen
            final = (await http.get(f"{urls['dispatcher']}/metrics")).text
            assert _sample(final, "bke_clusters", state="Succeeded") == 1.0
            assert _sample(final, "bke_nodes", cluster=c, state="Succeeded") == float(len(plan.nodes))
            assert _sample(final, "bke_commands_in_flight", cluster=c) == 0.0
            assert (_sample(final, "bke_phases", cluster=c, state="Running") or 0) == 0

            for name, url in urls.items():  # every printed URL works
                ready = await _get(http, f"{url}/readyz", deadline)
                assert ready.status_code == 200, (name, ready.text)
                assert (await http.get(f"{url}/")).status_code == 200, name
                assert (await http.get(f"{url}/asyncapi")).status_code == 200, name

            certs = (await http.get(f"{urls['certs']}/metrics")).text
            assert (_sample(certs, "bke_certificates", cluster=c, expires_within="later") or 0) >= 10
            assert _sample(certs, "bke_certificates", cluster=c, expires_within="expired") == 0.0
            assert c in (await http.get(f"{urls['certs']}/clusters/{c}")).text
            plans = (await http.get(f"{urls['planner']}/metrics")).text
            assert _sample(plans, "bke_plans_total", result="created") == 1.0
            renders = (await http.get(f"{urls['renderer']}/metrics")).text
            assert _sample(renders, "bke_renders_total", kubernetes_version=plan.kubernetes_version, result="rendered") == 1.0
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()
        LabSupervisor(workdir).down()
