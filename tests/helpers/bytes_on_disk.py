"""What a tree's files hold: their digests (proof that nothing was written), and whether they are the bytes
the wheel's RECORD lists (read here apart from the tool's reader, so a wrong reader cannot make a test agree)."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path


def tree_digest(directory: Path) -> dict[str, str]:
    """Every file under ``directory`` and its sha256: proof that nothing was written."""
    return {
        str(path.relative_to(directory)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def record_hashes(package_dir: Path) -> dict[str, str]:
    """``{path relative to vllm/: "algorithm=urlsafe-b64"}`` from the RECORD of the dist-info beside
    ``package_dir`` that installed it (``top_level.txt`` names it): the installer's own hashes.

    Written apart from the tool's reader, so a wrong reader cannot make a test agree with it."""
    (record,) = [
        dist_info / "RECORD"
        for dist_info in package_dir.parent.glob("*.dist-info")
        if (dist_info / "top_level.txt").is_file()
        and package_dir.name in (dist_info / "top_level.txt").read_text().split()
    ]
    hashes = {}
    for line in record.read_text().splitlines():
        path, digest, _ = line.rsplit(",", 2)
        if path.startswith(f"{package_dir.name}/") and digest:
            hashes[path.split("/", 1)[1]] = digest
    return hashes


def hash_matches(digest: str, data: bytes) -> bool:
    """Whether ``data`` hash to a RECORD digest ``algorithm=urlsafe-b64``."""
    algorithm, expected = digest.split("=", 1)
    return base64.urlsafe_b64encode(hashlib.new(algorithm, data).digest()).rstrip(b"=").decode() == expected


def record_mismatches(package_dir: Path) -> list[str]:
    """Files of ``vllm/`` whose bytes differ from the wheel's RECORD (compiled extensions, which
    the corpus leaves out, are not looked for)."""
    return [
        f"{package_dir.name}/{relative}"
        for relative, digest in record_hashes(package_dir).items()
        if not relative.endswith(".so") and not hash_matches(digest, (package_dir / relative).read_bytes())
    ]
