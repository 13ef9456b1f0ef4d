"""A changed spec travels inline when it fits in one message, else by reference (`specRef`), as an
install's does: the CLI's choice (bke_cli.spec_source) and the contract that carries it."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from bke.adapters.auth.permissions import role_permissions
from bke.adapters.bus.streams import OBJECT_BUCKET
from bke.contracts.apply import MAX_APPLY_SPEC_CHARS, ApplyCluster
from bke_cli.spec_source import INLINE_LIMIT, spec_fields


class _Store:
    def __init__(self) -> None:
        self.put: list[bytes] = []

    async def __call__(self, data: bytes) -> str:
        self.put.append(data)
        return f"{OBJECT_BUCKET}/specs/apply-1.yaml"


async def test_a_spec_that_fits_a_message_goes_inline_and_nothing_is_stored() -> None:
    store = _Store()
    fields = await spec_fields(b"a" * INLINE_LIMIT, store)
    assert fields == {"spec": "a" * INLINE_LIMIT} and store.put == []
    assert ApplyCluster(request_id="r", cluster="c", **fields).spec_ref is None


async def test_a_larger_spec_is_stored_and_sent_by_reference() -> None:
    store = _Store()
    big = b"a" * (INLINE_LIMIT + 1)
    fields = await spec_fields(big, store)
    assert fields == {"spec_ref": f"{OBJECT_BUCKET}/specs/apply-1.yaml"} and store.put == [big]
    req = ApplyCluster(request_id="r", cluster="c", **fields)
    assert req.spec is None and len(req.to_bytes()) < 1024  # the message stays small
    assert b'"specRef"' in req.to_bytes()


def test_the_inline_limit_fits_the_contract() -> None:
    assert INLINE_LIMIT <= MAX_APPLY_SPEC_CHARS


@pytest.mark.parametrize("fields, wrong", [
    ({}, "exactly one of 'spec' and 'specRef'"),
    ({"spec": "x", "spec_ref": "bke-blobs/k"}, "exactly one of 'spec' and 'specRef'"),
    ({"spec_ref": "no-slash"}, "specRef"),
    ({"spec": "x" * (MAX_APPLY_SPEC_CHARS + 1)}, "spec"),
])
def test_a_request_with_no_or_two_sources_or_a_bad_one_is_refused_naming_it(fields: dict[str, str], wrong: str) -> None:
    body = {"requestId": "r", "cluster": "c", **{("specRef" if k == "spec_ref" else k): v for k, v in fields.items()}}
    with pytest.raises(ValidationError) as exc:
        ApplyCluster.model_validate(body)
    assert wrong in str(exc.value)


def test_the_operator_may_put_and_the_upgrader_read_the_blob_bucket() -> None:
    # as for an install (the planner): the operator stores the spec, the readers only read it
    assert f"$O.{OBJECT_BUCKET}.>" in role_permissions("operator").pub_allow
    for role in ("upgrader", "planner"):
        perms = role_permissions(role).pub_allow
        assert f"$O.{OBJECT_BUCKET}.>" not in perms, role
        assert f"$JS.API.DIRECT.GET.OBJ_{OBJECT_BUCKET}.>" in perms and f"$JS.API.CONSUMER.CREATE.OBJ_{OBJECT_BUCKET}" in perms, role
