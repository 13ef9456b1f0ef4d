"""Fixtures shared by the agent's integration tests (`js`, `cluster`), declared once here so that
test modules take them as parameters without importing names they then shadow."""
from tests.trust_helpers import operator_box, operator_key_file

from .agent_helpers import cluster, js

__all__ = ["cluster", "js", "operator_box", "operator_key_file"]
