"""Files served from inside the package (the dashboard's, Swagger UI's), read once and kept
in memory with an ETag each."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".png": "image/png",
    ".svg": "image/svg+xml",
}


@dataclass(frozen=True, slots=True)
class Asset:
    body: bytes
    content_type: str
    etag: str


def load_assets(directory: Path) -> dict[str, Asset]:
    """Every servable file under `directory`, by its path relative to it."""
    out = {}
    for path in sorted(directory.rglob("*")):
        kind = CONTENT_TYPES.get(path.suffix)
        if kind is None or not path.is_file():
            continue
        body = path.read_bytes()
        etag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
        out[path.relative_to(directory).as_posix()] = Asset(body, kind, etag)
    return out
