"""Plan.node looks a node up by hostname through an index made once (not a scan per call)."""
from __future__ import annotations

import pytest

from bke.core.plan import Plan

from ..upgrade_helpers import SEED, plan_of


def test_every_node_is_found_and_an_unknown_one_is_a_key_error():
    plan = plan_of(SEED)
    for n in plan.nodes:
        assert plan.node(n.hostname) is n
    with pytest.raises(KeyError):
        plan.node("nowhere")


def test_the_index_is_neither_dumped_nor_compared_and_a_copy_with_other_nodes_does_not_reuse_it():
    plan = plan_of(SEED)
    plan.node(plan.nodes[0].hostname)  # the index exists now
    again = Plan.model_validate_json(plan.to_json())
    assert again == plan and again.to_json() == plan.to_json()
    fewer = plan.model_copy(update={"nodes": plan.nodes[:1]})
    assert fewer.node(plan.nodes[0].hostname) is plan.nodes[0]
    with pytest.raises(KeyError):
        fewer.node(plan.nodes[1].hostname)
