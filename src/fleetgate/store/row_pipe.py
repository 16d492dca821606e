"""The request log's rows as they go through the writer process's pipe: each row its length,
then the row in `marshal`'s format.

Both ends run the same interpreter (the writer is started with the serving process's own
`sys.executable`), so marshal's format, which may change between Python versions, is the
same on both. It needs no import, and a row of the log (about 610 bytes this way, 740 as
JSON) is written in about a quarter and read in about half of orjson's time; the writer
process then loads no JSON library for its rows (orjson, with what it imports, held 1.6 MB
of it).
"""

from __future__ import annotations

import marshal
import struct

# `typing` is for the type checker alone: the writer process holds none (`outage.py`)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

_LENGTH = struct.Struct("=I")  # a row's bytes, before them


def encode_row(row: Sequence[Any]) -> bytes:
    """`row` (ints, floats, strings, booleans and None) as it goes through the pipe."""
    try:
        data = marshal.dumps(row)
    except ValueError:  # a value of a type marshal does not write (a str subclass, say)
        import json  # (the serving process's side only, and rarely: not in the writer)

        data = marshal.dumps(json.loads(json.dumps(row, default=str)))
    return _LENGTH.pack(len(data)) + data


def encode_settings(settings: dict[str, str | int | bool]) -> bytes:
    """The writer's settings, the first frame of its pipe (read as a row is)."""
    data = marshal.dumps(settings)
    return _LENGTH.pack(len(data)) + data


def decode_rows(buf: bytes | bytearray, limit: int) -> tuple[list[Any], int, int]:
    """The first whole rows of `buf`, at most `limit`; the bytes they took; how many rows
    among them could not be read (left out: cannot happen unless the pipe broke one)."""
    rows: list[Any] = []
    at = 0
    broken = 0
    end = len(buf)
    head = _LENGTH.size
    with memoryview(buf) as view:
        while len(rows) < limit and at + head <= end:
            (size,) = _LENGTH.unpack_from(view, at)
            if at + head + size > end:
                break
            try:
                rows.append(marshal.loads(view[at + head : at + head + size]))
            except (EOFError, ValueError, TypeError):
                broken += 1
            at += head + size
    return rows, at, broken
