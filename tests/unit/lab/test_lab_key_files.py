"""The lab's at-rest keys (bke.lab.key_files): one file per kind, a legacy `secret.key` carried
into each kind's file, and each service given the files of its kinds only."""
from __future__ import annotations

import stat
from pathlib import Path

from bke.lab.key_files import ensure_lab_key_files, lab_key_file, service_key_env
from bke.core.secrets.at_rest import create_key_file, load_secret_box
from bke.core.secrets.key_kinds import KIND_NAMES


def test_a_new_lab_gets_a_key_of_its_own_per_kind_kept_across_starts(tmp_path: Path) -> None:
    files = ensure_lab_key_files(tmp_path)
    assert sorted(files) == sorted(KIND_NAMES)
    ids = {kind: load_secret_box(path).key_id for kind, path in files.items()}
    assert len(set(ids.values())) == len(KIND_NAMES)  # no two kinds share a key
    assert stat.S_IMODE((tmp_path / "keys").stat().st_mode) == 0o700
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in files.values())
    again = ensure_lab_key_files(tmp_path)
    assert {kind: load_secret_box(path).key_id for kind, path in again.items()} == ids


def test_a_lab_made_with_one_key_keeps_opening_what_it_encrypted(tmp_path: Path) -> None:
    legacy = create_key_file(tmp_path / "secret.key")
    files = ensure_lab_key_files(tmp_path)
    assert {load_secret_box(p).key_id for p in files.values()} == {legacy.key_id}
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in files.values())


def test_each_service_is_given_its_kinds_only(tmp_path: Path) -> None:
    assert service_key_env(tmp_path, "planner") == {"BKE_KEY_FILE_PLAN": str(lab_key_file(tmp_path, "plan"))}
    assert service_key_env(tmp_path, "renderer") == {"BKE_KEY_FILE_RENDER": str(lab_key_file(tmp_path, "render"))}
    assert service_key_env(tmp_path, "certs") == {"BKE_KEY_FILE_PKI": str(lab_key_file(tmp_path, "pki")),
                                                  "BKE_KEY_FILE_API": str(lab_key_file(tmp_path, "api"))}
    assert set(service_key_env(tmp_path, "upgrader")) == {"BKE_KEY_FILE_SNAPSHOT",
                                                          "BKE_KEY_FILE_API", "BKE_KEY_FILE_PLAN"}
    assert set(service_key_env(tmp_path, "dispatcher")) == {"BKE_KEY_FILE_SIGNING", "BKE_KEY_FILE_API"}
