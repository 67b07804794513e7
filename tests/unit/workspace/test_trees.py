"""Reading `git diff-tree -z` output: renames name two paths, binary files count no lines, and a
listing cut short ends at its last whole entry."""

from __future__ import annotations

from corral_server.domain.workspace import ChangeKind
from corral_server.workspace.trees import _name_status, _numstat
from corral_server.workspace.worktrees import count_status_entries


def test_name_status_with_a_rename_an_addition_and_a_deletion() -> None:
    text = "R087\0old.txt\0new.txt\0A\0src/a.py\0D\0gone\0M\0kept\0"
    assert _name_status(text) == [
        (ChangeKind.RENAMED, "new.txt", "old.txt"),
        (ChangeKind.ADDED, "src/a.py", ""),
        (ChangeKind.DELETED, "gone", ""),
        (ChangeKind.MODIFIED, "kept", ""),
    ]


def test_numstat_with_a_rename_and_a_binary_file() -> None:
    text = "3\t1\t\0old.txt\0new.txt\0-\t-\tlogo.png\0" + "10\t0\ta b.txt\0"
    assert _numstat(text) == {
        "new.txt": (3, 1, False),
        "logo.png": (0, 0, True),
        "a b.txt": (10, 0, False),
    }


def test_a_listing_cut_short_keeps_its_whole_entries() -> None:
    assert _name_status("A\0one\0R100\0two") == [(ChangeKind.ADDED, "one", "")]
    assert _numstat("1\t0\tone\0" + "2\t2\t\0old") == {"one": (1, 0, False)}


def test_status_entries_count_a_rename_once() -> None:
    assert count_status_entries(" M a\0R  new\0old\0?? c\0") == 3
    assert count_status_entries("") == 0
