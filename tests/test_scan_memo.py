"""A search of the tree reads again only the files whose identity changed since the last command's scan, and
answers exactly what a scan reading every file answers: edits (even ones keeping the size and the modification
time), files added, removed or renamed, a new literal, a damaged or unwritable memo, new code of this tool."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vllm_eagle3_patch.eagle3.tree import Tree
from vllm_eagle3_patch.verdict_cache import ScanFile

pytestmark = pytest.mark.unit  # a small tree on disk, no release

FILES = {
    "v1/worker/runner.py": "model.set_aux(x)\n",
    "models/a.py": "class A: pass\n",
    "models/b.py": "import x\nmodel.set_aux(y)\n",
}


def tree_with(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    return root


def search(root: Path, cache: Path, literal: str = "set_aux(", fingerprint: str = "tool-1") -> tuple[str, ...]:
    """A fresh command's search (a new Tree, as each command makes), with what it read noted in ``READ``."""
    tree = Tree(root, memo=ScanFile(cache, root, fingerprint=lambda: fingerprint), expected=("set_aux(",))
    raw = tree._raw

    def reading(relative: str) -> bytes | None:
        READ.append(relative)
        return raw(relative)

    tree._raw = reading
    return tree.search(literal)


READ: list[str] = []


@pytest.fixture(autouse=True)
def nothing_read_yet():
    READ.clear()


def test_a_second_command_reads_no_unchanged_file_and_answers_the_same(tmp_path: Path) -> None:
    root, cache = tree_with(tmp_path / "vllm", FILES), tmp_path / "cache"
    assert search(root, cache) == ("models/b.py", "v1/worker/runner.py")
    assert sorted(READ) == sorted(FILES)
    READ.clear()
    assert search(root, cache) == ("models/b.py", "v1/worker/runner.py")
    assert READ == []


def test_an_edit_keeping_size_and_modification_time_is_read_again(tmp_path: Path) -> None:
    root, cache = tree_with(tmp_path / "vllm", FILES), tmp_path / "cache"
    search(root, cache)
    runner = root / "v1/worker/runner.py"
    before = runner.stat()
    runner.write_text("model.get_aux(x)\n")  # same size
    os.utime(runner, ns=(before.st_atime_ns, before.st_mtime_ns))  # the modification time set back
    READ.clear()
    assert search(root, cache) == ("models/b.py",)
    assert READ == ["v1/worker/runner.py"]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda root: (root / "models/c.py").write_text("set_aux(z)\n"),
            ("models/b.py", "models/c.py", "v1/worker/runner.py"),
        ),
        (lambda root: (root / "models/b.py").unlink(), ("v1/worker/runner.py",)),
        (lambda root: (root / "models/b.py").rename(root / "models/d.py"), ("models/d.py", "v1/worker/runner.py")),
        (lambda root: (root / "models/b.py").rename(root / "models/b.py.moved"), ("v1/worker/runner.py",)),
    ],
    ids=["added", "removed", "renamed", "renamed-away"],
)
def test_files_added_removed_or_renamed_change_the_answer(tmp_path: Path, change, expected) -> None:
    root, cache = tree_with(tmp_path / "vllm", FILES), tmp_path / "cache"
    search(root, cache)
    change(root)
    assert search(root, cache) == expected
    assert search(root, tmp_path / "no-memo-yet") == expected  # what a scan reading every file answers


def test_a_literal_never_scanned_for_reads_every_file(tmp_path: Path) -> None:
    root, cache = tree_with(tmp_path / "vllm", FILES), tmp_path / "cache"
    search(root, cache)
    READ.clear()
    assert search(root, cache, "import x") == ("models/b.py",)
    assert sorted(READ) == sorted(FILES)
    READ.clear()
    assert search(root, cache, "import x") == ("models/b.py",)  # now kept too
    assert search(root, cache) == ("models/b.py", "v1/worker/runner.py") and READ == []


def test_a_damaged_or_unwritable_memo_or_new_code_changes_no_answer(tmp_path: Path) -> None:
    root, cache = tree_with(tmp_path / "vllm", FILES), tmp_path / "cache"
    search(root, cache)
    (memo,) = cache.iterdir()
    memo.write_text('{"tool": "tool-1", "literals": ["set_aux("], "files": {"models/a.py": [[1], [7]]}}')
    assert search(root, cache) == ("models/b.py", "v1/worker/runner.py")
    memo.write_text("{not json")
    assert search(root, cache) == ("models/b.py", "v1/worker/runner.py")
    READ.clear()
    assert search(root, cache, fingerprint="tool-2") == ("models/b.py", "v1/worker/runner.py")
    assert sorted(READ) == sorted(FILES)  # another tool's memo is not this one's
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache directory should be")
    for _ in range(2):
        assert search(root, blocked) == ("models/b.py", "v1/worker/runner.py")
