"""The client's model name put back into an answer shown on the pick's call, however the
data plane cuts it into chunks."""

from __future__ import annotations

import orjson
import pytest

from fleetgate.epp.evidence import WHOLE_LIMIT
from fleetgate.epp.rename import AnswerRename
from fleetgate.execute.framing import NDJSON, SSE
from fleetgate.execute.rewrite import rewriter_for

REWRITER = rewriter_for("org/served-name-of-m", "m")


def _sse(n: int) -> bytes:
    events = [
        b"data: "
        + orjson.dumps(
            {"model": "org/served-name-of-m", "choices": [{"delta": {"content": f"w{i}"}}]}
        )
        + b"\n\n"
        for i in range(n)
    ]
    return b"".join(events) + b"data: [DONE]\n\n"


def _cut(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)] or [b""]


@pytest.mark.parametrize("size", [1, 7, 40, 10_000])
def test_a_stream_cut_anywhere_comes_back_whole_and_renamed(size: int):
    data = _sse(12)
    rename = AnswerRename(REWRITER, SSE)
    chunks = _cut(data, size)
    sent = [rename.chunk(c, i == len(chunks) - 1) for i, c in enumerate(chunks)]
    out = b"".join(sent)
    assert out == data.replace(b"org/served-name-of-m", b"m")
    # each piece sent before the end is whole events: none waits for more than its own end
    for piece in sent[:-1]:
        assert not piece or piece.endswith(b"\n\n")


def test_an_event_whole_in_its_chunk_goes_back_at_once():
    rename = AnswerRename(REWRITER, SSE)
    first = b'data: {"model":"org/served-name-of-m","n":1}\n\n'
    assert rename.chunk(first, False) == b'data: {"model":"m","n":1}\n\n'


@pytest.mark.parametrize("size", [3, 50, 10_000])
def test_a_whole_answer_is_renamed_once_it_is_whole(size: int):
    body = orjson.dumps({"id": "x", "model": "org/served-name-of-m", "choices": []})
    rename = AnswerRename(REWRITER, None)
    chunks = _cut(body, size)
    sent = [rename.chunk(c, i == len(chunks) - 1) for i, c in enumerate(chunks)]
    assert all(piece == b"" for piece in sent[:-1])
    assert orjson.loads(sent[-1])["model"] == "m"


def test_ndjson_lines_are_renamed_line_by_line():
    lines = b"".join(
        orjson.dumps({"model": "org/served-name-of-m", "n": i}) + b"\n" for i in range(3)
    )
    rename = AnswerRename(REWRITER, NDJSON)
    out = rename.chunk(lines[:30], False) + rename.chunk(lines[30:], True)
    assert [orjson.loads(line)["model"] for line in out.splitlines()] == ["m"] * 3


def test_what_is_held_is_bounded_and_nothing_is_lost_past_the_bound():
    """A whole answer larger than the bound goes back as it comes, every byte of it, in
    order, not renamed: the picker never holds more than the bound."""
    body = orjson.dumps({"model": "org/served-name-of-m", "data": "x" * (WHOLE_LIMIT + 10)})
    rename = AnswerRename(REWRITER, None)
    chunks = _cut(body, 1 << 20)
    sent = [rename.chunk(c, i == len(chunks) - 1) for i, c in enumerate(chunks)]
    assert b"".join(sent) == body
    assert max(map(len, sent)) <= WHOLE_LIMIT + (1 << 20)
    # an event that never ends is let go the same way
    rename = AnswerRename(REWRITER, SSE)
    endless = [b"data: " + b"y" * (1 << 20) for _ in range(6)]
    assert b"".join(rename.chunk(c, False) for c in endless) == b"".join(endless)
