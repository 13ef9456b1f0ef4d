"""Fixtures shared by the integration tests (the agent's `js` and `cluster`; `kube_api`, a real
kube-apiserver on its own etcd), declared once here so that test modules take them as parameters
without importing names they then shadow."""
from tests.trust_helpers import operator_box, operator_key_file

from .agent_helpers import cluster, js
from .kube_api import kube_api

__all__ = ["cluster", "js", "kube_api", "operator_box", "operator_key_file"]
