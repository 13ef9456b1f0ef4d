"""What a creds file lets its holder publish (bke.adapters.auth.creds)."""
from __future__ import annotations

from pathlib import Path

import pytest

from bke.adapters.auth.authority import new_authority
from bke.adapters.auth.creds import creds_claims, may_publish, subject_matches
from bke.adapters.auth.permissions import Permissions, agent_permissions
from bke.contracts.agent import agent_subject


@pytest.mark.parametrize(("pattern", "subject", "matches"), [
    ("a.b.c", "a.b.c", True),
    ("a.b.c", "a.b", False),
    ("a.b", "a.b.c", False),
    ("a.*.c", "a.x.c", True),
    ("a.*.c", "a.x.y.c", False),
    ("a.>", "a.b", True),
    ("a.>", "a.b.c.d", True),
    ("a.>", "a", False),
    ("*", "a", True),
    ("bke.v1.agent.c1.n1.result", "bke.v1.agent.c1.n1.upgrader-result", False),
])
def test_subject_patterns_match_as_the_server_reads_them(pattern: str, subject: str, matches: bool) -> None:
    assert subject_matches(pattern, subject) is matches


def test_no_allow_list_allows_all_and_a_deny_entry_wins() -> None:
    assert may_publish({"nats": {}}, "x.y")
    assert may_publish({"nats": {"pub": {"allow": ["x.*"]}}}, "x.y")
    assert not may_publish({"nats": {"pub": {"allow": ["x.*"]}}}, "z.y")
    assert not may_publish({"nats": {"pub": {"allow": ["x.>"], "deny": ["x.y"]}}}, "x.y")
    assert not may_publish({"nats": {"pub": {"deny": ["x.y"]}}}, "x.y")


def _creds(tmp_path: Path, perms: Permissions) -> Path:
    user = new_authority().user("agent-c1-n1", perms, iat=1)
    path = tmp_path / "agent.creds"
    path.write_text(user.creds)
    return path


def test_an_agent_identity_may_publish_its_own_deprecated_upgrader_result_subject(tmp_path: Path) -> None:
    creds = _creds(tmp_path, agent_permissions("c1", "n1.example"))
    claims = creds_claims(creds.read_text())
    own = agent_subject("c1", "n1.example", "upgrader-result")
    assert may_publish(claims, own)
    assert not may_publish(claims, agent_subject("c1", "n2.example", "upgrader-result"))  # another node's


def test_a_creds_file_without_a_user_jwt_is_refused() -> None:
    with pytest.raises(ValueError, match="no user JWT"):
        creds_claims("-----BEGIN NATS USER JWT-----\nnot.a-jwt!\n")
