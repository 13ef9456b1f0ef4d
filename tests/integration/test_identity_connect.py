"""Every service's and the operator's identity connects to the lab's nats-server: a user JWT
lists every subject of its role's channels, and the dispatcher's outgrew the server's default
4 KB protocol line once (the server answered `maximum control line exceeded` and the dispatcher
never started); `max_control_line` in the generated nats.conf is what lets it in."""
from __future__ import annotations

from pathlib import Path

import nats
import pytest

from bke.adapters.auth.permissions import SERVICE_ROLES, identity_name, inbox_prefix
from bke.adapters.bus.connect import BusAccess, connect_options
from bke.lab.identities import creds_path
from bke.lab.supervisor import LabSupervisor

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def test_every_role_connects_whatever_its_jwt_size(tmp_path: Path) -> None:
    sup = LabSupervisor(tmp_path / "lab")
    info = sup.ensure_runtime()
    keeper = sup.identities(info)
    assert keeper is not None
    try:
        sizes = {}
        for role in (*SERVICE_ROLES, "operator"):
            keeper.ensure(role)
            path = creds_path(sup.workdir, identity_name(role))
            sizes[role] = len(path.read_text().split("-----END NATS USER JWT-----")[0])
            opts = connect_options(BusAccess(info.nats_url, path, inbox_prefix(identity_name(role))))
            opts.update(allow_reconnect=False, max_reconnect_attempts=0)
            nc = await nats.connect(**opts)
            await nc.flush()
            await nc.close()
        assert max(sizes.values()) > 3500, sizes  # the case this guards: JWTs near or past 4 KB
    finally:
        keeper.close()
        sup.down()
