"""`UpdateAgent`: install a new agent beside the running one, then ask the launcher to restart.

Top to bottom, each phase returning early (nothing of the running agent is touched before 5):

1. this agent already runs `version` (the new agent answering the command the old one took):
   `Skipped`;
2. `version` was tried and rolled back by the launcher: fail with its reason (permanent: the
   same wheels would fail the same way);
3. every wheel is fetched into a private staging directory and checked against its sha256 (a
   mismatch installs nothing);
4. a new virtualenv `<state>/venvs/<version>` is made beside the running one, and the wheels are
   installed into it with no package index (`--no-index --find-links <staging>`: the set must
   be complete, nothing else is fetched); a venv left half-made by a crash is made again;
5. the record names the new venv as on trial (bke_agent.venvs) and `RestartRequested` is
   raised: the loop hands the command back unanswered and the agent exits with
   RESTART_EXIT_CODE; the launcher starts the trial, and rolls it back if it does not confirm.

Only an agent started by its launcher (`BKE_AGENT_LAUNCHED=1`) takes the step: nobody else
would start the new venv, or roll it back.
"""
from __future__ import annotations

import asyncio
import hashlib
import shutil
import sys
from dataclasses import replace
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlsplit

import httpx

from bke.contracts.agent_steps import UpdateAgent
from bke.contracts.statuses import StepResultStatus

from .backends.base import StepOutcome
from .errors import PermanentStepError, StepError
from .venvs import Trial, read_record, write_record

__all__ = ["RestartRequested", "SelfUpdater"]

COMPLETE = ".bke-complete"  # written last in a new venv: a venv without it is made again
OUTPUT_TAIL = 2000


class RestartRequested(Exception):
    """Not a failure: the command must be handed back unanswered and the agent restarted."""


def _wheel_name(url: str) -> str:
    name = PurePosixPath(unquote(urlsplit(url).path)).name
    if not name.endswith(".whl") or "/" in name or name.startswith("."):
        raise PermanentStepError(f"{url}: not a wheel file")
    return name


async def _fetch(url: str, dest: Path) -> None:
    parts = urlsplit(url)
    if parts.scheme in ("http", "https"):
        try:
            async with httpx.AsyncClient(trust_env=False, timeout=60.0) as client:
                async with client.stream("GET", url) as r:
                    if r.status_code != 200:
                        raise StepError(f"{url}: HTTP {r.status_code}")
                    with dest.open("wb") as out:
                        async for chunk in r.aiter_bytes(1 << 20):
                            out.write(chunk)
        except httpx.HTTPError as exc:
            raise StepError(f"{url}: {type(exc).__name__}") from None
        return
    if parts.scheme not in ("", "file") or not parts.path.startswith("/"):
        raise PermanentStepError(f"{url}: a wheel is an http(s) URL or an absolute path on the node")
    try:
        await asyncio.to_thread(shutil.copyfile, unquote(parts.path), dest)
    except OSError as exc:
        raise StepError(f"{url}: {exc.strerror or type(exc).__name__}") from None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


async def _run(argv: list[str]) -> None:
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        what = f"{' '.join(argv[:4])} ... exited with {proc.returncode}"
        raise StepError(what, stderr=f"{what}\n{out.decode(errors='replace')[-OUTPUT_TAIL:]}", exit_code=proc.returncode)


class SelfUpdater:
    """`venv`: the prefix this agent runs from; `version`: the version it runs; `launched`:
    whether a launcher started it (else it refuses to update itself)."""

    def __init__(self, state: Path, venv: str, version: str, launched: bool, python: str = sys.executable):
        self.state, self.venv, self.version, self.launched, self.python = state, venv, version, launched, python

    async def update(self, step: UpdateAgent) -> StepOutcome:
        if step.version == self.version:  # 1.
            return StepOutcome(StepResultStatus.SKIPPED, stdout=f"the agent runs {self.version}\n")
        rec = read_record(self.state, self.venv, self.version)
        if step.version in rec.failed:  # 2.
            raise PermanentStepError(f"{rec.failed[step.version]}; the launcher put {rec.current_version} back")
        if not self.launched:
            raise PermanentStepError("this agent was not started by bke-agent-launch: nothing would start the new "
                                     "version or roll it back (bootstrap the node again)")
        venvs = self.state / "venvs"
        staging = venvs / f".{step.version}.wheels"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True, mode=0o700)
        wheels = []
        for w in step.wheels:  # 3.
            dest = staging / _wheel_name(w.url)
            await _fetch(w.url, dest)
            if await asyncio.to_thread(_sha256, dest) != w.sha256:
                shutil.rmtree(staging, ignore_errors=True)
                raise PermanentStepError(f"{dest.name} does not match its sha256: nothing installed")
            wheels.append(str(dest))
        target = venvs / step.version
        if not (target / COMPLETE).is_file():  # 4.
            shutil.rmtree(target, ignore_errors=True)
            await _run([self.python, "-m", "venv", str(target)])
            await _run([str(target / "bin/python"), "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
                        "--no-index", "--find-links", str(staging), *wheels])
            if not (target / "bin/bke-agent").is_file():
                raise PermanentStepError(f"the wheels of {step.version} install no bke-agent")
            (target / COMPLETE).write_text(step.version)
        shutil.rmtree(staging, ignore_errors=True)
        trial = Trial(venv=str(target), version=step.version, confirm_timeout_s=step.confirm_timeout_s)
        write_record(self.state, replace(rec, trial=trial))  # 5.
        raise RestartRequested(f"agent {step.version} installed in {target}; restarting into it")
