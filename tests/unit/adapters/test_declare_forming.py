"""The deploy step tells a NATS cluster that is still forming from a declaration that is wrong."""
from __future__ import annotations

import nats.js.errors as js_errors
import pytest

from bke.adapters.bus.declare import cluster_forming


@pytest.mark.parametrize("exc, forming", [
    (js_errors.ServiceUnavailableError(code=503, err_code=10039, description="JetStream not enabled for account"), True),
    (js_errors.BadRequestError(code=400, err_code=10005, description="no suitable peers for placement, peer offline"), True),
    (js_errors.NotFoundError(code=404, err_code=10059, description="stream not found"), False),
    (js_errors.BadRequestError(code=400, err_code=10058, description="stream name already in use with a different configuration"), False),
    (RuntimeError("not a JetStream answer"), False),
])
def test_only_the_answers_of_a_forming_cluster_are_tried_again(exc, forming):
    assert cluster_forming(exc) is forming
