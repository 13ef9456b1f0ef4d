"""Every route in the channel table has a sender and a receiver in the code (events
carry the flow; a failure event nobody consumes leaves an operation waiting forever).

A sender must build the channel's message model; a receiver must name the channel's subject
(its constant, or the subject with its `{...}` parts as wildcards or an f-string). Routes whose
other end lies outside BKE say why in `Channel.external`.
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import pytest

from bke.contracts import CHANNELS, Channel
from bke.contracts.subjects import contract_modules

ROOT = Path(__file__).resolve().parents[2]
# A service's code includes the shared service shape (dead-lettering lives there).
SOURCES = {
    # every service mounts the handler of a deleted cluster's records (bke.adapters.forgetting)
    "planner": ["services/planner", "libs/bke/adapters/bus", "libs/bke/adapters/forgetting.py"],
    "certs": ["services/certs", "libs/bke/adapters/bus", "libs/bke/adapters/forgetting.py"],
    "renderer": ["services/renderer", "libs/bke/adapters/bus", "libs/bke/adapters/forgetting.py"],
    # and the pause handler both operation-running services mount (bke.adapters.pausing)
    "dispatcher": ["services/dispatcher", "libs/bke/adapters/bus", "libs/bke/adapters/pausing.py", "libs/bke/adapters/forgetting.py"],
    "upgrader": ["services/upgrader", "libs/bke/adapters/bus", "libs/bke/adapters/pausing.py", "libs/bke/adapters/forgetting.py"],
    "cli": ["cli"],
    "agent": ["agent"],
    # the owner of the NATS authority answers agents' renewals (`bke identities serve-renewals`)
    "renewer": ["libs/bke/adapters/auth/agent_renewal.py"],
}


@lru_cache(maxsize=None)
def _source(component: str) -> str:
    paths = [p for d in SOURCES[component] for p in ([ROOT / d] if d.endswith(".py") else sorted((ROOT / d).rglob("*.py")))]
    return "\n".join(p.read_text() for p in paths)


def _constants(subject: str) -> list[str]:
    """Names of the module-level constants whose value is this subject."""
    names = []
    for mod in contract_modules().values():
        names += [k for k, v in vars(mod).items() if k.isupper() and v == subject]
    return sorted(set(names))


def _subject_patterns(subject: str) -> list[str]:
    """The subject as code names it: literally, with `*`/`>` wildcards, or as an f-string."""
    head = subject.split("{", 1)[0]
    wild = re.sub(r"\{[^}]+\}", "*", subject)
    pats = [re.escape(subject), re.escape(wild)]
    if "{" in subject:
        pats.append(re.escape(head) + r"(>|\{)")  # "bke.v1.install.>" or f"bke.v1.install.{cluster}..."
        last = subject.rsplit(".", 1)[1]
        if "{" not in last:  # a subject helper: agent_subject(cluster, node, "command")
            pats.append(r"_subject\([^)]*\"" + re.escape(last) + r"\"\)")
    return pats


def _helpers(subject: str) -> list[str]:
    """Contract helpers that build this subject from its placeholders, e.g. rotation_subject."""
    names = []
    for mod in contract_modules().values():
        for name, fn in vars(mod).items():
            if name.endswith("_subject") and callable(fn):
                try:
                    built = fn(*re.findall(r"\{[^}]+\}", subject))
                except TypeError:
                    continue
                if built == subject:
                    names.append(name)
    return names


def _receives(component: str, ch: Channel) -> bool:
    src = _source(component)
    if any(re.search(rf"\b{h}\(", src) for h in _helpers(ch.subject)):
        return True
    if any(re.search(rf"\b{c}\b", src) for c in _constants(ch.subject)):
        return True
    return any(re.search(p, src) for p in _subject_patterns(ch.subject)) or (
        "{" in ch.subject and re.search(rf"\b{ch.model.__name__}\b", src) is not None
        and re.search(re.escape(ch.subject.split("{", 1)[0]), src) is not None
    )


def _sends(component: str, ch: Channel) -> bool:
    return re.search(rf"\b{ch.model.__name__}\(", _source(component)) is not None


@pytest.mark.parametrize("ch", CHANNELS, ids=[c.subject for c in CHANNELS])
def test_every_route_has_a_sender_and_a_receiver_in_the_code(ch: Channel) -> None:
    if not ch.senders or not ch.receivers:
        assert ch.external, f"{ch.subject}: no {'sender' if not ch.senders else 'receiver'} and no reason why"
    for who in ch.senders:
        assert who in SOURCES, f"{ch.subject}: unknown sender {who!r}"
        assert _sends(who, ch), f"{ch.subject}: the table says {who} sends it, but {who} never builds {ch.model.__name__}"
    for who in ch.receivers:
        assert who in SOURCES, f"{ch.subject}: unknown receiver {who!r}"
        assert _receives(who, ch), f"{ch.subject}: the table says {who} receives it, but {who} never names it"


def test_the_checker_itself_can_fail() -> None:
    """A route nobody receives must be caught (the fault this test exists for)."""
    from bke.contracts.render import RenderFailed

    orphan = Channel("bke.v1.nobody.listens", RenderFailed, "event", "x", ("renderer",), ("planner",))
    assert not _receives("planner", orphan)
    assert not _sends("planner", Channel("bke.v1.x", RenderFailed, "event", "x", ("planner",), ()))
