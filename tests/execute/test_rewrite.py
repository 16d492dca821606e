"""The model-name rewrite (execute/rewrite.py) when the upstream answers with a name other
than the one it was sent (a dated name, an engine's first served name): every `model` key's
value becomes the client's name in one pass over the bytes, and nothing else changes, not
even text inside a string that looks like a `model` key."""

from __future__ import annotations

import json

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetgate.execute.framing import NDJSON, SSE
from fleetgate.execute.rewrite import ModelRewriter

REWRITER = ModelRewriter("gpt-4o", "smart")

# text that looks like JSON with a model key, so that a match inside a string would show
TRICKY = st.sampled_from(
    ['x"model', '"model":"x"', '{"model": "y"}', ', "model"', "model", '\\"model\\"']
)
TEXT = st.one_of(st.text(max_size=12), TRICKY, st.builds("".join, st.lists(TRICKY, max_size=3)))
NAME = st.one_of(st.sampled_from(["gpt-4o-2024-08-06", "x:1", 'a"b', "é", ""]), st.text())
SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-(2**53), 2**53), TEXT)
OTHER = st.dictionaries(
    st.one_of(TEXT, st.sampled_from(["model_id", "xmodel", "models"])), SCALAR, max_size=4
)


@st.composite
def documents(draw: st.DrawFn) -> dict[str, object]:
    doc: dict[str, object] = dict(draw(OTHER))
    for nest in ("message", "response"):
        if draw(st.booleans()):
            inner = dict(draw(OTHER))
            if draw(st.booleans()):
                inner["model"] = draw(st.one_of(NAME, st.none()))
            doc[nest] = inner
    if draw(st.booleans()):
        doc["model"] = draw(st.one_of(NAME, st.none()))
    return doc


def expected(doc: dict[str, object]) -> dict[str, object]:
    out = json.loads(json.dumps(doc))
    for obj in (out, out.get("message"), out.get("response")):
        if isinstance(obj, dict) and "model" in obj:
            obj["model"] = "smart"
    return out


@settings(max_examples=400, deadline=None)
@given(documents(), st.sampled_from(["orjson", "spaced", "indented"]))
def test_every_model_key_and_nothing_else_is_rewritten(doc: dict[str, object], style: str) -> None:
    body = {
        "orjson": lambda: orjson.dumps(doc),
        "spaced": lambda: json.dumps(doc).encode(),  # `"model": "x"`, `, "model"`
        "indented": lambda: json.dumps(doc, indent=1, ensure_ascii=False).encode(),
    }[style]()
    assert orjson.loads(REWRITER.json(body)) == expected(doc)


def test_a_stream_with_a_dated_name_keeps_its_framing_and_escapes_fall_back() -> None:
    event = b'data: {"id":"c","model":"gpt-4o-2024-08-06","choices":[{"delta":{"content":"'
    block = b"".join(event + b'%d"}}]}\n\n' % i for i in range(3)) + b"data: [DONE]\n\n"
    out = SSE.rewrite(REWRITER, b": keep-alive\n\n" + block)
    assert out == b": keep-alive\n\n" + block.replace(b"gpt-4o-2024-08-06", b"smart")
    escaped = b'event: message_start\ndata: {"message":{"model":"a\\"b"},"type":"x"}\n\n'
    assert orjson.loads(SSE.rewrite(REWRITER, escaped).split(b"data: ")[1]) == {
        "message": {"model": "smart"},
        "type": "x",
    }
    lines = b'{"model":"llama3.2:latest","done":false}\n{"model":null,"done":true}\n'
    assert [orjson.loads(x)["model"] for x in NDJSON.rewrite(REWRITER, lines).split()] == [
        "smart",
        "smart",
    ]
