"""Keeping a file under a second name (``fileio.link_all``): what ``apply`` keeps of vLLM's files before it
replaces them, the backups and the installer's bytecode."""

from __future__ import annotations

import os

import pytest

from vllm_eagle3_patch.install import fileio

pytestmark = pytest.mark.unit


def test_a_kept_file_is_a_second_name_and_keeps_its_bytes_once_the_file_is_replaced(tmp_path):
    existing, kept = tmp_path / "model.py", tmp_path / "kept" / "model.py"
    existing.write_bytes(b"original\n")
    kept.parent.mkdir()
    fileio.link_all([(existing, kept, b"original\n")])
    assert kept.stat().st_ino == existing.stat().st_ino  # no byte written
    fileio.write_atomically(existing, b"patched\n")  # what apply does: a rename over the file
    assert kept.read_bytes() == b"original\n" and existing.read_bytes() == b"patched\n"


def test_a_file_changed_since_it_was_judged_is_kept_as_judged(tmp_path):
    existing, kept = tmp_path / "model.py", tmp_path / "model.py.kept"
    existing.write_bytes(b"edited meanwhile\n")
    fileio.link_all([(existing, kept, b"original\n")])
    assert kept.read_bytes() == b"original\n" and kept.stat().st_ino != existing.stat().st_ino


def test_where_no_link_can_be_made_the_file_is_copied(tmp_path, monkeypatch):
    def refused(*args, **kwargs):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(fileio.os, "link", refused)
    existing, kept = tmp_path / "model.cpython-311.pyc", tmp_path / "kept.pyc"
    existing.write_bytes(b"bytecode")
    fileio.link_all([(existing, kept, None)])
    assert kept.read_bytes() == b"bytecode" and kept.stat().st_ino != existing.stat().st_ino


def test_a_file_that_cannot_be_kept_is_named(tmp_path):
    missing, kept = tmp_path / "gone.py", tmp_path / "kept.py"
    with pytest.raises(OSError) as raised:
        fileio.link_all([(missing, kept, None)])
    assert raised.value.filename == str(kept) and not kept.exists() and not os.listdir(tmp_path)
