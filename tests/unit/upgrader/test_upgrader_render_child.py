"""What the render process hands back (bke_upgrader.render_child.changed_only): only the files
that differ, read by node_commands exactly as the whole renders are."""
from __future__ import annotations

from bke.core.upgrade import resolve_target
from bke.core.upgrade.node_commands import changed_files
from bke.core.upgrade.target_plan import target_plan
from bke_upgrader.render_child import changed_only, render_by_node

from ..upgrade_helpers import SPLIT, plan_of


def test_only_changed_files_are_kept_and_give_each_node_the_same_changes_as_the_whole_renders():
    old_plan = plan_of(SPLIT)
    new_plan = target_plan(old_plan, resolve_target(old_plan, "1.34.1", "3.5.21"))
    old, _ = render_by_node(old_plan)
    new, _ = render_by_node(new_plan)
    old_c, new_c = changed_only(old, new)
    assert set(new_c) == set(new)
    kept = dropped = 0
    for host in new:
        assert changed_files(old_c[host], new_c[host]) == changed_files(old[host], new[host]), host
        kept += len(new_c[host])
        dropped += len(new[host]) - len(new_c[host])
        for path, f in new_c[host].items():  # each kept file differs, and its old side is the old render's
            assert path not in old[host] or old[host][path].content != f.content or old[host][path].mode != f.mode
            assert old_c[host].get(path) == old[host].get(path)
    assert kept and dropped  # a minor upgrade changes some files of every node, not all of them


def test_equal_contents_are_one_object_so_they_are_pickled_once():
    old_plan = plan_of(SPLIT)
    new_plan = target_plan(old_plan, resolve_target(old_plan, "1.34.1", "3.5.21"))
    _, new_c = changed_only(*(render_by_node(p)[0] for p in (old_plan, new_plan)))
    by_content: dict[bytes, set[int]] = {}
    uses: dict[bytes, int] = {}
    for files in new_c.values():
        for f in files.values():
            by_content.setdefault(f.content, set()).add(id(f.content))
            uses[f.content] = uses.get(f.content, 0) + 1
    assert max(uses.values()) > 1  # several nodes get the same bytes (every worker's containerd config)
    assert all(len(ids) == 1 for ids in by_content.values())
