""" "Did you mean" for a misspelt field name or id in a fleet config."""

from __future__ import annotations

from collections.abc import Iterable


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`; did you mean 'qwen'?` for the closest known name (case first), else ``."""
    # only a config with a problem asks: a serving process that loaded a good one never
    # imports difflib (with heapq)
    import difflib

    names = sorted(set(known))
    folded = {k.casefold(): k for k in names}
    same = folded.get(name.casefold())
    if same is not None and same != name:
        return f"; did you mean {same!r}?"
    cutoff = 0.75 if len(name) > 4 else 0.5  # one letter of a short id weighs more
    close = difflib.get_close_matches(name, names, n=1, cutoff=cutoff)
    if not close:
        lowered = difflib.get_close_matches(name.casefold(), list(folded), n=1, cutoff=cutoff)
        close = [folded[c] for c in lowered]
    return f"; did you mean {close[0]!r}?" if close else ""
