"""The installed vLLM tree: its Python files listed, read and searched, each at most once a command.

A release's facts are found by searching the tree (which files call the interface, where the
protocol lives), not by assuming paths, because a tool that patches site-packages always meets a
release newer than itself.  Every fact goes through one :class:`Tree`, and a search is a read like
any other: a view (:meth:`Tree.through`) reads files through another function and reports each search
it answers, so the verdict cache keeps what a search found beside the digests of the files read, and
a verdict goes stale when a file is added, removed or renamed, not only when a file read changes.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import Any, Callable, Hashable, Mapping, Optional, Protocol, TypeVar

ReadFile = Callable[[str], Optional[str]]
"""Reads a file of one vLLM tree by its path relative to ``vllm/`` (None: absent)."""
ListFiles = Callable[[], "tuple[str, ...]"]
"""Every Python file of the tree, relative to ``vllm/``, sorted."""
T = TypeVar("T")
Searched = Callable[[str, "tuple[str, ...]"], None]
"""Told each search a view answered: the literal and the files found."""
Identity = tuple[int, ...]
"""A file as the disk knows it: device, inode, size, modification and change times in ns.  Any write, rename over
it or touch changes one of them (the change time cannot be set back): the test git's index relies on."""
Held = dict[str, "tuple[Identity, frozenset[str]]"]
"""Per file (relative to ``vllm/``): its identity when it was scanned, and the literals it held."""


class ScanMemo(Protocol):
    """What an earlier command's scan found in each file, kept between commands (``verdict_cache.ScanFile``)."""

    def recall(self) -> tuple[frozenset[str], Held]:
        """The literals every kept file was scanned for, and what each held; (frozenset(), {}) where none is kept."""

    def keep(self, literals: frozenset[str], held: Held) -> None:
        """Keep this scan's answer for the next command (silently not, where it cannot be written)."""


def file_reader(package_dir: Path) -> ReadFile:
    """A reader of ``package_dir``'s files that reads each at most once."""

    @cache
    def read(relative: str) -> Optional[str]:
        try:
            return (package_dir / relative).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    return read


def python_files(package_dir: Path) -> ListFiles:
    """The ``.py`` files under ``package_dir`` (this tool's state directory left out), listed once."""

    @cache
    def listed() -> tuple[str, ...]:
        found = []
        for directory, subdirectories, names in os.walk(package_dir):
            subdirectories[:] = [d for d in subdirectories if not d.startswith(".") and d != "__pycache__"]
            prefix = os.path.relpath(directory, package_dir)
            for name in names:
                if name.endswith(".py"):
                    found.append(name if prefix == "." else f"{prefix}/{name}".replace(os.sep, "/"))
        return tuple(sorted(found))

    return listed


class Tree:
    """One vLLM tree's files: listed, read, and searched for literals.

    ``read`` and ``files`` default to the disk under ``package_dir``; tests hand in a dict's ``get`` and its
    keys.  A search scans the files' own bytes once for every literal asked of this tree or of any view of it.
    """

    def __init__(
        self,
        package_dir: Path,
        read: Optional[ReadFile] = None,
        files: Optional[ListFiles] = None,
        expected: tuple[str, ...] = (),
        keeps: Optional[Mapping[str, Callable[[str], bool]]] = None,
        memo: Optional[ScanMemo] = None,
    ) -> None:
        self.package_dir = package_dir
        self.expected = expected
        """Literals to look for in the same pass as the first search (the release's searches): one pass in all."""
        self.keeps: Mapping[str, Callable[[str], bool]] = keeps or {}
        """Per literal, which of the files holding it the search answers (given the file's text): a search whose
        answer is a fact (the files *calling* the setter) stays the same when a patch adds lines that only name it."""
        self.memo = memo if read is None else None
        """Where a scan of the disk finds what each file unchanged since the last command held, without reading it."""
        self.read: ReadFile = read or file_reader(package_dir)
        self.files: ListFiles = files or (python_files(package_dir) if read is None else (lambda: ()))
        self._found: dict[str, tuple[str, ...]] = {}
        self._derived: dict[Hashable, Any] = {}
        self._searched: Optional[Searched] = None
        self._raw: Callable[[str], Optional[bytes]] = (
            self._disk_bytes if read is None else lambda relative: _encoded(self.read(relative))
        )

    def through(self, read: ReadFile, searched: Optional[Searched] = None) -> Tree:
        """A view reading files through ``read`` (a recorder, the backups of patched files), sharing this tree's
        listing and searches: the views this tool makes change what a file says, never which files there are,
        and only add marked lines to those a search may find."""
        view = Tree(self.package_dir, read, self.files, self.expected, self.keeps)
        view._found, view._raw, view._searched, view.memo = self._found, self._raw, searched, self.memo
        view._derived = self._derived
        return view

    def derived(self, key: Hashable, compute: Callable[[], T]) -> T:
        """What ``compute`` makes of a file's text, once for this tree and its views: ``key`` must name that text
        (its path and the text itself), since a view may read other bytes for the same path.  ``compute`` must read
        nothing through the tree or the release: a view recording what a cached verdict read (``verdict_cache``)
        would see those reads only the first time."""
        if key not in self._derived:
            self._derived[key] = compute()
        return self._derived[key]

    def search(self, literal: str) -> tuple[str, ...]:
        """The files whose text holds ``literal``, in path order."""
        if literal not in self._found:
            self._found.update(self._scan({literal, *self.expected} - set(self._found)))
        found = self._found[literal]
        if self._searched is not None:
            self._searched(literal, found)
        return found

    def search_all(self) -> dict[str, tuple[str, ...]]:
        """Every search asked of this tree so far and every expected one, answered (one pass): what another
        process's copy of the tree takes with :meth:`take_searches`."""
        self._found.update(self._scan(set(self.expected) - set(self._found)))
        return dict(self._found)

    def take_searches(self, found: Mapping[str, tuple[str, ...]]) -> None:
        """Answers :meth:`search_all` gave in another process for this same tree: not searched again here."""
        self._found.update(found)

    def _scan(self, literals: set[str]) -> dict[str, tuple[str, ...]]:
        """One pass over the files for every literal of ``literals``.  With a memo, a file whose identity is the
        one it had when last scanned for all of them is not read: what it held then, it holds now."""
        if not literals:
            return {}
        scanned, before = self.memo.recall() if self.memo is not None else (frozenset(), {})
        if not literals <= scanned:  # a literal no kept answer covers: every file is read, for all of them
            scanned, before = frozenset(literals) | scanned, {}
        needles = {literal: literal.encode("utf-8") for literal in scanned}
        held: Held = {}
        for relative in self.files():
            identity = self._identity(relative) if self.memo is not None else ()
            kept = before.get(relative)
            held[relative] = (
                kept if kept is not None and kept[0] == identity else (identity, self._held(relative, needles))
            )
        if self.memo is not None and held != before:
            self.memo.keep(scanned, held)
        return {
            literal: tuple(relative for relative, (_, has) in held.items() if literal in has) for literal in literals
        }

    def _held(self, relative: str, needles: dict[str, bytes]) -> frozenset[str]:
        data = self._raw(relative) or b""
        return frozenset(
            literal
            for literal, needle in needles.items()
            if needle in data and (literal not in self.keeps or self.keeps[literal](data.decode("utf-8", "replace")))
        )

    def _identity(self, relative: str) -> Identity:
        try:
            found = os.stat(os.path.join(self.package_dir, relative))
        except OSError:
            return ()
        return (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns)

    def _disk_bytes(self, relative: str) -> Optional[bytes]:
        try:  # a path joined as a string: a first look reads some 3,600 files, and pathlib's join is a tenth of it
            with open(os.path.join(self.package_dir, relative), "rb") as handle:
                return handle.read()
        except OSError:
            return None


def _encoded(text: Optional[str]) -> Optional[bytes]:
    return None if text is None else text.encode("utf-8", "surrogatepass")
