"""The client's model name put back into an answer that comes through the pick's own call.

A gateway's single ext_proc filter sends the response to the picker in full-duplex mode and
forwards what the picker sends back, cut as the picker cuts it. So when a deployment names
another model upstream (`upstream_model`), the answer is renamed as the proxy renames it:
a stream's events are sent back as soon as each is whole (the end of a read that splits an
event waits for the rest of it), and a whole answer, one JSON document, when it is whole.
"""

from __future__ import annotations

from fleetgate.execute.framing import Framing
from fleetgate.execute.rewrite import ModelRewriter


class AnswerRename:
    """One answer's renaming: `chunk` takes each body chunk Envoy shows, and gives what to
    send back now (empty while an event or the document is not whole yet)."""

    __slots__ = ("framing", "held", "rewriter")

    def __init__(self, rewriter: ModelRewriter, framing: Framing | None) -> None:
        self.rewriter = rewriter
        self.framing = framing  # a stream's; None: one whole document
        self.held: list[bytes] = []  # what is not sent back yet

    def chunk(self, data: bytes, end: bool) -> bytes:
        held = self.held
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
            return b""
        cut += len(framing.separator)
        if cut < len(block):
            held.append(block[cut:])
        return framing.rewrite(self.rewriter, block[:cut])
