"""The dispatcher's dashboard in a real browser during a lab install: headless Chromium (Debian's
`chromium`, driven by Selenium through Debian's `chromium-driver`; never a downloaded browser)
shows the cluster, its phases and its nodes, and the page changes by itself while the install
runs (read at two moments without a reload: a phase changed). Screenshots are saved.

The lab's services take free HTTP ports (BKE_HTTP_PORT=0 reaches them through the lab's
environment); the dispatcher's URL is read from its own log line `http on <url>`, which holds
however the port was chosen.

To see a change for certain, the lab starts without its agents: the install waits in its
`agents` phase (first read), then the agents start and the phases move on (second read).
Missing Chromium, its driver or Selenium skips with the reason; BKE_REQUIRE_REAL_CHECKS=1 (CI)
makes that a failure.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable

import httpx
import pytest

pytestmark = pytest.mark.e2e
SEED = "examples/seed-3m1w.yaml"
CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
REQUIRED = os.environ.get("BKE_REQUIRE_REAL_CHECKS") == "1"
NOTES_SHOT = Path("/work/notes/dashboard.png")


def _unavailable(reason: str) -> None:
    if REQUIRED:
        pytest.fail(f"{reason} (BKE_REQUIRE_REAL_CHECKS=1)")
    pytest.skip(reason)


@pytest.fixture
def browser(tmp_path, monkeypatch):
    for path, package in ((CHROMIUM, "chromium"), (DRIVER, "chromium-driver")):
        if not os.access(path, os.X_OK):
            _unavailable(f"{path} missing: apt-get install {package}")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _unavailable("selenium is not installed (requirements.txt pins it)")
    monkeypatch.setenv("SE_OFFLINE", "true")  # Selenium Manager must never fetch a browser or driver
    opts = Options()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1100",
                f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=opts)
    try:
        yield driver
    finally:
        driver.quit()


def dispatcher_url(lab, timeout: float = 60.0) -> str:
    """The dispatcher's HTTP address from its log line `http on <url>` (bke.adapters.http.server)."""
    log = lab.workdir / "logs" / "dispatcher.log"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines() if log.exists() else ():
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict) and str(doc.get("msg", "")).startswith("http on ") and doc.get("url"):
                return str(doc["url"])
        time.sleep(0.2)  # polling the log under a deadline
    raise AssertionError(f"no 'http on' line in {log} within {timeout:.0f}s")


async def poll(what: str, get: Callable[[], Any], until: Callable[[Any], bool], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = await get()
        if until(last):
            return last
        await asyncio.sleep(0.3)  # polling under a deadline
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def read_page(driver) -> dict[str, Any]:
    """What the page shows now, from the DOM (no reload): install state, phase states, node rows."""
    return driver.execute_script("""
        const cells = (tr) => Array.from(tr.querySelectorAll('td')).map(td => td.textContent.trim());
        const phases = {};
        document.querySelectorAll('#phases tr').forEach(tr => { const c = cells(tr); if (c.length) phases[c[0]] = c[1]; });
        const install = document.querySelector("#install tr:nth-child(2) td");
        const nodes = Array.from(document.querySelectorAll('#grid tr')).slice(1).map(tr => cells(tr)[0]);
        const events = Array.from(document.querySelectorAll('#events tr')).slice(1).map(tr => cells(tr).slice(1, 4).join(' '));
        return {title: document.querySelector('h1').textContent, install: install ? install.textContent : null,
                phases: phases, nodes: nodes, events: events, marker: window.__bkeMarker || null,
                links: Array.from(document.querySelectorAll('#grid a')).map(a => a.getAttribute('href'))};
    """)


async def test_dashboard_follows_a_lab_install(lab_factory, browser, monkeypatch, tmp_path):
    monkeypatch.setenv("BKE_HTTP_PORT", "0")  # every lab service on a free port (the lab passes its env on)
    lab = lab_factory(SEED, agents=False)
    cluster = lab.plan.cluster
    hosts = sorted(n.hostname for n in lab.plan.nodes)
    base = await asyncio.to_thread(dispatcher_url, lab)
    install = asyncio.create_task(lab.install(timeout=300))
    try:
        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            async def api() -> dict | None:
                r = await http.get(f"/api/clusters/{cluster}")
                return r.json() if r.status_code == 200 else None

            # the install waits for its agents (none started yet)
            await poll("the agents phase running", api,
                       lambda d: d is not None and d["phases"][0]["status"] == "Running", 120)

        await asyncio.to_thread(browser.get, f"{base}/clusters/{cluster}")
        # a marker that a reload would erase: both reads below are of this one load
        await asyncio.to_thread(browser.execute_script, "window.__bkeMarker = 'first-load';")
        first = await asyncio.to_thread(read_page, browser)
        assert cluster in first["title"] and first["install"] == "Running"
        assert first["phases"]["agents"] == "Running" and first["phases"]["node-env"] == "Pending"
        assert sorted(first["nodes"]) == hosts  # every node in the grid, linked to its own page
        assert all(href.startswith(f"/clusters/{cluster}/nodes/") for href in first["links"])
        await asyncio.to_thread(browser.save_screenshot, str(tmp_path / "dashboard-waiting.png"))

        lab.sup.ensure_agents(lab.info, lab.plan)  # now the install moves on
        second = await poll("the page to show a phase moving on", lambda: asyncio.to_thread(read_page, browser),
                            lambda p: p["phases"].get("agents") == "Succeeded" and p["phases"].get("node-env") != "Pending",
                            120)
        assert second["marker"] == "first-load", "the page was reloaded"
        assert second["phases"] != first["phases"]

        assert await install == 0, lab.out.getvalue()
        done = await poll("the page to show the install succeeded", lambda: asyncio.to_thread(read_page, browser),
                          lambda p: p["install"] == "Succeeded", 30)
        assert done["marker"] == "first-load"
        assert set(done["phases"].values()) <= {"Succeeded", "Skipped"}, done["phases"]
        # the latest events: what the dispatcher published, newest first
        assert done["events"][0] == "finished  Succeeded" and "phase agents Running" in done["events"], done["events"]
        shot = tmp_path / "dashboard.png"
        await asyncio.to_thread(browser.save_screenshot, str(shot))
        assert shot.stat().st_size > 10_000  # a rendered page, not an empty frame
        if NOTES_SHOT.parent.is_dir():  # for the lead: what the page looks like
            shutil.copyfile(shot, NOTES_SHOT)
        # a node's own page: its commands, one per phase that sent it one
        await asyncio.to_thread(browser.get, f"{base}{done['links'][0]}")
        commands = await asyncio.to_thread(browser.execute_script,
                                           "return document.querySelectorAll('table').length - 1;")
        assert commands >= 3, "the node page lists the node's commands"
    finally:
        if not install.done():
            install.cancel()
            await asyncio.gather(install, return_exceptions=True)
