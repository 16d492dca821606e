"""The client's model name put back into an answer that comes through the pick's own call.

A gateway's single ext_proc filter sends the response to the picker in full-duplex mode and
forwards what the picker sends back, cut as the picker cuts it. So when a deployment names
another model upstream (`upstream_model`), the answer is renamed as the proxy renames it:
a stream's events are sent back as soon as each is whole (the end of a read that splits an
event waits for the rest of it), and a whole answer, one JSON document, when it is whole.
"""

from __future__ import annotations

from fleetgate.epp.evidence import WHOLE_LIMIT
from fleetgate.execute.framing import Framing
from fleetgate.execute.rewrite import ModelRewriter


class AnswerRename:
    """One answer's renaming: `chunk` takes each body chunk Envoy shows, and gives what to
    send back now (empty while an event or the document is not whole yet). What is held
    is bounded: past `WHOLE_LIMIT` bytes (a whole answer that large, an event that never
    ends), the rest of the answer goes back as it comes, not renamed."""

    __slots__ = ("framing", "held", "held_size", "passing", "rewriter")

    def __init__(self, rewriter: ModelRewriter, framing: Framing | None) -> None:
        self.rewriter = rewriter
        self.framing = framing  # a stream's; None: one whole document
        self.held: list[bytes] = []  # what is not sent back yet
        self.held_size = 0
        self.passing = False  # past the bound: sent back as it comes

    def chunk(self, data: bytes, end: bool) -> bytes:
        held = self.held
        if self.passing:
            return data
        self.held_size += len(data)
        if self.held_size > WHOLE_LIMIT:
            self.passing = True
            self.held = []
            return b"".join((*held, data))
        framing = self.framing
        if framing is None:  # a whole answer: renamed once it is all here
            held.append(data)
            if not end:
                return b""
            self.held = []
            return self.rewriter.json(b"".join(held))
        block = b"".join((*held, data)) if held else data
        held.clear()
        if end:  # whatever is left goes now, a last event without its separator too
            return framing.rewrite(self.rewriter, block) if block else b""
        cut = block.rfind(framing.separator)
        if cut < 0:
            if block:
                held.append(block)
            return b""  # held_size already counts it
        cut += len(framing.separator)
        self.held_size = len(block) - cut
        if self.held_size:
            held.append(block[cut:])
        return framing.rewrite(self.rewriter, block[:cut])
