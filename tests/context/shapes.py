"""Texts as users paste them, of the layouts whose tokens a count of characters misses: the
whitespace, digits and punctuation that byte-level BPE's pre-tokenizer splits apart."""

from __future__ import annotations

import base64
import json
import random

CELLS = ("Alice", "North", "1,204", "pending", "done", "12.5", "n/a", "Bob")
SENTENCE = "The deployment with the smallest window that holds the request goes first."


def table(rows: int) -> str:
    """A markdown table, each cell padded to its column's width."""
    head = "| Name       | Region     | Total      | Status     |"
    lines = [head, "| ---------- | ---------- | ---------- | ---------- |"]
    for i in range(rows):
        cells = (CELLS[(i + j) % len(CELLS)].ljust(10) for j in range(4))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def columns(rows: int) -> str:
    """A listing of names and values set in columns by spaces."""
    words = SENTENCE.split()
    return "\n".join(
        f"{words[i % len(words)]:<20}{words[(i + 3) % len(words)]:<14}{i * 37 % 1000:>6}"
        for i in range(rows)
    )


def double_spaced(sentences: int) -> str:
    """Prose typed with two spaces after each sentence."""
    return "  ".join([SENTENCE] * sentences)


def numbers(n: int) -> str:
    """Numbers separated by single spaces."""
    return " ".join(str(i * 7 % 100) for i in range(n))


def records(n: int) -> str:
    """JSON records indented by 4 spaces."""
    rows = [{"id": i + 1, "name": "Alice", "active": True, "score": 12} for i in range(n)]
    return json.dumps(rows, indent=4)


def byte_array(n: int) -> str:
    """A C byte array."""
    data = random.Random(n).randbytes(n)
    return ", ".join(f"0x{b:02x}" for b in data)


def encoded(n: int) -> str:
    """Base64 of random bytes, one line."""
    return base64.b64encode(random.Random(n).randbytes(n)).decode()


def said_again(n: int) -> str:
    """One word said again and again, set apart by commas."""
    return ", ".join(["buffalo"] * n)


def short_words(n: int) -> str:
    """A short word said again and again."""
    return " ".join(["go"] * n)


def tab_separated(rows: int) -> str:
    """A table of numbers, tab-separated."""
    return "\n".join("\t".join(str(i * j % 997) for j in range(1, 7)) for i in range(rows))


# name: (builder, a small and a large size)
SHAPES = {
    "padded table": (table, (8, 60)),
    "columns": (columns, (10, 80)),
    "double spaces": (double_spaced, (4, 40)),
    "numbers": (numbers, (40, 400)),
    "records": (records, (4, 40)),
    "byte array": (byte_array, (50, 500)),
    "base64": (encoded, (60, 900)),
    "word, word": (said_again, (20, 300)),
    "short words": (short_words, (30, 600)),
    "tab-separated": (tab_separated, (8, 80)),
}
