"""Each service's entry point refuses bad settings with a clear error and exit 2."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


@pytest.mark.parametrize("service", ["planner", "renderer", "dispatcher"])
def test_missing_connection_settings_name_the_variable(service):
    env = {k: v for k, v in os.environ.items() if not k.startswith("BKE_")}
    res = subprocess.run([str(BIN / f"bke-{service}")], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert f"ERROR bke-{service}: BKE_NATS_URL: Field required" in res.stderr


def test_certs_without_its_key_file_says_so(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("BKE_")}
    env.update(BKE_NATS_URL="nats://127.0.0.1:1", BKE_REDIS_URL="redis://127.0.0.1:1", BKE_SECRET_KEY_FILE=str(tmp_path / "none"))
    res = subprocess.run([str(BIN / "bke-certs")], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "ERROR bke-certs:" in res.stderr and "does not exist" in res.stderr


def test_a_dashboard_exposed_without_a_token_is_a_settings_error(tmp_path):
    # its plan key file kept (the planner reads it at start, before the settings' other checks)
    env = {k: v for k, v in os.environ.items() if not k.startswith("BKE_") or k.startswith("BKE_KEY_FILE_")}
    env.update(BKE_NATS_URL="nats://127.0.0.1:1", BKE_REDIS_URL="redis://127.0.0.1:1", BKE_HTTP_HOST="0.0.0.0")
    res = subprocess.run([str(BIN / "bke-planner")], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stderr
    assert "ERROR bke-planner: BKE_HTTP_HOST=0.0.0.0 exposes the dashboard" in res.stderr
    assert "Traceback" not in res.stderr
