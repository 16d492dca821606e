"""One walk over a request body: what it holds, counted by the classes tokenizers cost.

The walk gathers every piece of text that reaches the model (message contents, tool calls,
reasoning, system, instructions, prompt, input, suffix) and counts,
in one pass of C-level byte operations over their UTF-8 bytes:

* digits, ASCII punctuation, newlines, tabs, other whitespace and words (runs of letters: ASCII
  and the alphabetic scripts below), each by count (the words of a text over `_WORDS_WHOLE`
  bytes on a sample of it, as the runs below);
* non-Latin characters by the script block their UTF-8 lead byte names: Latin extensions,
  Greek, Cyrillic, Hebrew and Armenian, Arabic, Indic and Thai, other 3-byte scripts,
  symbols, kana and CJK punctuation, CJK ideographs, Hangul, full-width forms, and 4-byte
  characters (emoji);
* runs, where a byte-level BPE pre-tokenizer splits what the classes above cannot see
  (`count_runs`): runs of spaces, of tabs, of punctuation and line breaks, a space before a
  digit, a capital after a small letter, each full 8 letters of a long word, a punctuation
  character a word takes along, runs of digits and their groups of three, pairs of the
  characters rule lines are drawn with, and pairs of spaces. Such a field's weight is what
  a tokenizer's rules make of it (a group of three digits is a token on Llama 3, three on
  Qwen2; a run of spaces one token, or one a space on GPT-2's vocabulary), which a fit
  learns (`fit.py`). Runs take a pass over a view of the text each, so they are counted on
  a sample of at most 1,024 bytes spread over the text and scaled up: their cost does not
  grow with the text;

and, by structure: token ids, messages, replies, tool turns, the characters of tool calls,
whether a chat has no system turn (Qwen2.5's template then writes its own default system
prompt, about 20 tokens), tools, their schemas' JSON apart from the text (a template
renders or drops them its own way), images and audio parts.
A tokenizer family (`families.py`) turns the tally into tokens with a dot product, so
estimating for several deployments costs one walk. No text is kept but a sample of it
(512 bytes at most, in four pieces), from which `says_again` tells, when asked, whether the
text says one thing again and again.

Tokenizers merge a run of one repeated character (`====`, `----`, blank lines, `────`) into
a token or a few, while the tally still costs each of its characters (`punct`, `symbols`,
`newlines`) besides the run. Such runs are rare in the text the families were fitted on, so
the estimate keeps costing them so (an over-estimate: safe for placement); what must hold for
every text is the fewest tokens a request can be, which `tally_body(..., collapsed=True)`
tallies with each run counted as one character.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field
from typing import Any

import orjson

_IMAGE_PARTS = frozenset({"image_url", "input_image", "image"})
_AUDIO_PARTS = frozenset({"input_audio", "audio"})

# the tally's fields, in the order of a family's parameter vector
FIELDS = (
    "chars",  # characters of text (one per UTF-8 sequence)
    "upper",  # ASCII capitals (mixed case, as in base64 and CamelCase, splits words)
    "words",  # runs of letters (ASCII or an alphabetic script)
    "long_runs",  # each full 8 letters of a run: long and unusual words split into pieces
    # (counted on a sample of the text, as the run fields below)
    "digits",
    "punct",  # ASCII punctuation and symbols
    "newlines",
    "latin_ext",  # U+0080-02FF: accented Latin, IPA
    "greek",  # U+0300-03FF (with combining marks)
    "cyrillic",  # U+0400-052F
    "hebrew",  # U+0530-05FF (with Armenian)
    "arabic",  # U+0600-07FF (with Syriac, Thaana)
    "indic",  # U+0800-0FFF but Thai: Devanagari ... Sinhala, Lao, Tibetan
    "thai",  # U+0E00-0E7F
    "other3",  # U+1000-1FFF: Myanmar, Georgian, Jamo, Latin and Greek extended
    "symbols",  # U+2000-2FFF: typographic punctuation, arrows, math, box drawing
    "kana",  # U+3000-3FFF: CJK punctuation, hiragana, katakana
    "han",  # U+4000-9FFF: CJK ideographs
    "hangul",  # U+A000-DFFF: Hangul syllables (and Yi)
    "fullwidth",  # U+E000-FFFF: full-width forms, compatibility ideographs, private use
    "four_byte",  # U+10000 and above: emoji, rare ideographs
    "tabs",  # tab characters: a token or so each where spaces of indentation merge
    # where byte-level BPE's pre-tokenizer splits text that the classes above cannot see
    # (counted on a sample of the text, see `_sample`):
    "space_runs",  # runs of two or more spaces: a token each, however long
    "tab_runs",  # runs of tabs (a tab before a word may share its token: `\treturn`)
    "punct_runs",  # runs of ASCII punctuation and line breaks: a token each (`",`, `});`)
    "space_digits",  # a space before a digit: a token of its own (words take theirs along)
    "case_changes",  # a capital after a small letter (`camelCase`, base64): BPE splits there
    # a punctuation character just before a small letter (`-the`, `.append`, `"id`,
    # `_name`): a pre-tokenizer that lets a word take one such character along (Llama 3's,
    # Qwen2's) makes the two one piece, where one that does not (SentencePiece) makes two
    "punct_words",
    # runs of digits: a tokenizer that splits digits in groups (of three: Llama 3, o200k)
    # costs a number by its runs as much as by its digits (`1234` two tokens, `1 2 3 4` four)
    "digit_runs",
    # each full three digits of a run after its first: a run of L digits is 1 + (L - 1) // 3
    # groups of up to three, so its cost is linear in these and the runs
    "digit_triples",
    # pairs of the characters rule lines and tables are drawn with (`-=*#_.~`: `----` is
    # two): a rule line or a table's `|---|` costs a token or two a run on a vocabulary
    # that merges such runs, where `punct` costs each of its characters
    "punct_pairs",
    # pairs of spaces (a run of eight spaces has four): a vocabulary without tokens for runs
    # of spaces (GPT-2's) costs indentation and padding by their length, not their number
    "space_pairs",
    "token_ids",  # prompts given as token ids: one token each
    "messages",  # chat turns (each costs the template's per-message scaffolding)
    "replies",  # assistant turns (a template may wrap a reply in more than a question)
    "tool_turns",  # tool results turns
    # the pieces of tool results' text (words, ASCII punctuation, digits, other characters),
    # also counted as text above: a template may drop the results (Phi-3.5's does), and what
    # that saves is about what the text costs, which its characters alone do not tell
    "tool_text",
    "call_chars",  # characters of tool calls' JSON, also counted as text above
    "tools",  # tool schemas (each costs the template's per-tool wrapping)
    "tool_blocks",  # 1 when the request carries tools (the template's tools preamble)
    # the tool schemas' JSON, apart from the text: a template may render them as JSON, in
    # another layout, or not at all
    "schema_chars",
    "schema_words",
    "schema_punct",
    "schema_punct_runs",
    "default_system",  # 1 when a chat has no system turn (a template may add its own)
    "requests",  # always 1: the template's fixed cost (the generation prompt)
)
N_FIELDS = len(FIELDS)
LAYOUT = ",".join(FIELDS)  # what a stored tally's numbers mean (another layout: dropped)
CHARS, UPPER, WORDS, LONG_RUNS, DIGITS, PUNCT, NEWLINES = range(7)
INDIC = FIELDS.index("indic")
THAI = FIELDS.index("thai")
LATIN_EXT = FIELDS.index("latin_ext")
OTHER3 = FIELDS.index("other3")
_SCRIPT_FIELDS = tuple(i for i, f in enumerate(FIELDS) if f not in ("thai",))[7:20]
FOUR_BYTE = FIELDS.index("four_byte")
TOKEN_IDS = FIELDS.index("token_ids")
MESSAGES = FIELDS.index("messages")
REPLIES = FIELDS.index("replies")
TOOL_TURNS = FIELDS.index("tool_turns")
TOOL_TEXT = FIELDS.index("tool_text")
CALL_CHARS = FIELDS.index("call_chars")
TOOLS = FIELDS.index("tools")
TOOL_BLOCKS = FIELDS.index("tool_blocks")
_SCHEMA_FIELDS = tuple(
    FIELDS.index(f) for f in ("schema_chars", "schema_words", "schema_punct", "schema_punct_runs")
)
TABS = FIELDS.index("tabs")
SPACE_RUNS = FIELDS.index("space_runs")
PUNCT_RUNS = FIELDS.index("punct_runs")
SPACE_DIGITS = FIELDS.index("space_digits")
CASE_CHANGES = FIELDS.index("case_changes")
TAB_RUNS = FIELDS.index("tab_runs")
PUNCT_WORDS = FIELDS.index("punct_words")
DIGIT_RUNS = FIELDS.index("digit_runs")
DIGIT_TRIPLES = FIELDS.index("digit_triples")
PUNCT_PAIRS = FIELDS.index("punct_pairs")
SPACE_PAIRS = FIELDS.index("space_pairs")
_RUN_FIELDS = (
    LONG_RUNS,
    CASE_CHANGES,
    SPACE_DIGITS,
    TAB_RUNS,
    SPACE_RUNS,
    PUNCT_RUNS,
    PUNCT_WORDS,
    DIGIT_RUNS,
    DIGIT_TRIPLES,
    PUNCT_PAIRS,
    SPACE_PAIRS,
)
DEFAULT_SYSTEM = FIELDS.index("default_system")
REQUESTS = FIELDS.index("requests")

# byte -> class code; UTF-8 continuation bytes are deleted, so one code per character
_CLASS = bytearray(b" " * 256)
for _b in range(128):
    _c = chr(_b)
    if _c.isupper():
        _CLASS[_b] = ord("A")
    elif _c.isalpha():
        _CLASS[_b] = ord("a")
    elif _c.isdigit():
        _CLASS[_b] = ord("0")
    elif _c in "\n\t":
        _CLASS[_b] = _b
    elif 33 <= _b <= 126:
        _CLASS[_b] = ord(".")
# lead byte ranges -> script code, in the order of FIELDS from latin_ext on
_LEADS = (
    (0xC0, 0xCB),
    (0xCC, 0xCF),
    (0xD0, 0xD4),
    (0xD5, 0xD7),
    (0xD8, 0xDF),
    (0xE0, 0xE0),
    (0xE1, 0xE1),
    (0xE2, 0xE2),
    (0xE3, 0xE3),
    (0xE4, 0xE9),
    (0xEA, 0xED),
    (0xEE, 0xEF),
    (0xF0, 0xFF),
)
_SCRIPT_CODES = bytes(range(0x10, 0x10 + len(_LEADS)))  # codes no text class uses
for _code, (_lo, _hi) in zip(_SCRIPT_CODES, _LEADS, strict=True):
    for _b in range(_lo, _hi + 1):
        _CLASS[_b] = _code
_CLASS_TABLE = bytes(_CLASS)
_CONTINUATION = bytes(range(0x80, 0xC0))
# byte -> word view: letters of ASCII and of the alphabetic scripts (by lead byte) are `a`
_ALPHABETIC = b"aA" + _SCRIPT_CODES[:5]  # ASCII, latin_ext, greek, cyrillic, hebrew, arabic
_WORD_TABLE = bytes(ord("a") if _CLASS[b] in _ALPHABETIC else ord(" ") for b in range(256))
# the bytes whose class is a lower-case letter or a space: deleted from the short copy
_COMMON = bytes(b for b in range(256) if _CLASS[b] in b"a " and b not in _CONTINUATION)
_COMMON_OR_CONTINUATION = _COMMON + _CONTINUATION
# the views of a sample the run fields are counted on (see `count_runs`): small letters,
# capitals, digits, spaces, line breaks and tabs, the glue (`_GLUE`), and the rest; of
# that, letters (`a`) and the glue alone, the rest a space (title case marks where each word
# starts); tabs and spaces as letters, the rest not (where each run starts); the same of
# ASCII punctuation and line breaks; of digits (in the first view)
_SHAPE_TABLE = bytes(
    ord("A")
    if _CLASS[b] == ord("A")
    else ord("a")
    if _WORD_TABLE[b] == ord("a")
    else ord("0")
    if _CLASS[b] == ord("0")
    else ord(" ")
    if b == 32
    else ord("#")
    if b == 0
    else ord("n")
    if b in (9, 10, 13)
    else ord("x")
    for b in range(256)
)
_LETTERS_TABLE = bytes(ord("a") if b in b"aA" else b if b == ord("#") else 32 for b in range(256))
_WS_TABLE = bytes(ord("a") if b == 9 else ord("b") if b == 32 else ord(".") for b in range(256))
_PUNCT_TABLE = bytes(ord("a") if _CLASS[b] in b".\n" else ord(" ") for b in range(256))
# the punctuation a rule line or a table is drawn with, as one character (`--` in this view
# is a pair of one of them, or, rarely, of two: `=-`)
_PAIR_TABLE = bytes(ord("-") if chr(b) in "-=*#_.~" else ord(" ") for b in range(256))
_DIGIT_TABLE = bytes(ord("a") if b == ord("0") else ord(" ") for b in range(256))
# the run fields' sample (see `count_runs`): 1,024 bytes of text in 16 pieces of 64
_SAMPLE, _PIECES = 1024, 16
# the sample `says_again` looks at: 512 bytes in 4 pieces, where its thresholds were set
_REPEAT_SAMPLE, _REPEAT_PIECES = 512, 4
# the byte between two pieces of a sample: a break in every view (a code of its own in the
# shape view, no letter, digit, space or punctuation in the others), so that no piece's edge is
# joined to its neighbour's into a run that the text does not have (a space that ends one
# piece and one that starts the next were a run of spaces, a count that changed with the
# text's length, not its kind)
_GLUE = b"\0"
_GLUED = (_PIECES - 1) * len(_GLUE)  # bytes of glue in a sample of `_PIECES` pieces
# a text longer than this has its words counted on the run fields' sample, scaled up by its
# characters, not on the whole: a view of the whole text and a search of it for a two-byte
# pattern cost 15 µs of a 10 KB chat's 70 µs estimate. Replayed on twelve real vocabularies
# (three orders of the answers), the share of held-out requests within 10 % of their count
# went from 0.931 to 0.929 after 50 answers and from 0.953 to 0.951 after 300 (0.898 with
# the fingerprint alone, as before); the estimate of a 10 KB chat for two fitted deployments
# costs 16 % fewer instructions. A shorter text is counted whole: a sample is most of it
_WORDS_WHOLE = 4 * _SAMPLE
# four or more of one character that is no letter, digit or space (`_` included)
_RUN = re.compile(r"([^\w ]|_)\1{3,}")


def collapse_runs(text: str) -> str:
    """`text` with each run of one repeated non-word character cut to that one character:
    a tokenizer makes a run a token or a few, so this text costs no more than the run."""
    return _RUN.sub(r"\1", text)


# U+1E00-1EFF (Vietnamese, among others): accented Latin letters, priced as such, which
# share their lead byte with scripts of about a token and a half a character
_LATIN_EXTENDED_ADDITIONAL = (b"\xe1\xb8", b"\xe1\xb9", b"\xe1\xba", b"\xe1\xbb")


def _sample(data: bytes, size: int = _SAMPLE, pieces: int = _PIECES) -> bytes:
    """`data` when it is no longer than such a sample (`size` bytes and the glue between its
    pieces: a sample is its own sample, as `says_again` takes a `Tally`'s), else `pieces`
    pieces of it, one from the middle of each equal part (a text's first lines, often
    unlike the rest, are no part of it).
    Many short pieces, not a few long ones: a chat of several kinds of text (a system
    prompt, turns of code, a table, a log) has each of them sampled, and a rare shape (a
    rule line, padding) is seen about as often as it occurs. Replayed on ten real
    vocabularies (three orders of the answers), 16 pieces of 64 bytes put more requests
    within 10 % of their count than the 8 of 64 before: with the fingerprint alone 0.879 →
    0.888 of the held-out corpus, after 50 answers 0.918 → 0.927, and of text unlike the
    corpus (source, docs, JSON) 0.760 → 0.788; they cost 8 µs more on a 10 KB chat."""
    if len(data) <= size + (pieces - 1) * len(_GLUE):  # a sample is its own sample
        return data
    step, w = len(data) // pieces, size // pieces
    return _GLUE.join([data[i : i + w] for i in range(step // 2, step * pieces, step)])


def count_runs(
    data: bytes, ascii: bool, chars: int, counts: list[int], words: bool = False
) -> None:
    """Add the fields about runs (long letter runs, spaces, punctuation) of UTF-8 `data`,
    which holds `chars` characters; and, with `words`, its words (see `_WORDS_WHOLE`).

    Byte-level BPE tokenizers (Qwen2, Llama 3, o200k) first split text by a pattern: a word
    takes the one space or punctuation character before it along, digits stand alone, a
    run of punctuation is one piece, and whitespace but a word's leading space is a piece
    of its own. So `a, a, a` costs two tokens a word, `1 2 3` two a digit, a padded table
    cell one more for its padding however wide it is, and `": 1,` as many as `": "x",`.
    Counts of characters cannot tell these apart; runs can. Each run field takes a pass
    over a view of the text, so they are counted on a sample (`_sample`) and scaled up to
    the whole: their cost stays flat however long the text."""
    sample = _sample(data)
    # one character a byte in `shape`, as in the words view
    shape = sample.translate(_SHAPE_TABLE, b"" if ascii else _CONTINUATION)
    spaces = sample.translate(_WS_TABLE).title()  # `A`, `B` start a run of tabs, spaces
    punct = sample.translate(_PUNCT_TABLE).title()
    # a field whose characters the sample lacks is not searched for (the same counts,
    # fewer passes: prose often has no digit, a text with no two spaces side by side no
    # run of them)
    if b"0" in shape:
        digits = shape.translate(_DIGIT_TABLE).title()  # `A` starts a run of digits
        space_digits, digit_runs = shape.count(b" 0"), digits.count(b"A")
        digit_triples = digits.count(b"aaa")
    else:
        space_digits = digit_runs = digit_triples = 0
    space_pairs = sample.count(b"  ")
    runs = (
        shape.count(b"aaaaaaaa"),
        shape.count(b"aA"),
        space_digits,
        spaces.count(b"A"),
        spaces.count(b"Bb") if space_pairs else 0,
        punct.count(b"A"),
        shape.count(b"xa"),
        digit_runs,
        digit_triples,
        sample.translate(_PAIR_TABLE).count(b"--"),
        space_pairs,
    )
    # characters in all / sampled (the glue between the pieces is none of them)
    scale = 1.0 if sample is data else chars / (len(shape) - _GLUED)
    for index, n in zip(_RUN_FIELDS, runs, strict=True):
        if n:
            counts[index] += round(n * scale)
    if words:
        # the words that start inside a piece: a piece's first letter may be a word's
        # middle, so a letter at a piece's start (the sample's own, or after the glue) is
        # none; the whole has as many per character as the pieces have after their first
        titled = shape.translate(_LETTERS_TABLE).title()
        n = titled.count(b"A") - titled.count(b"#A") - (titled[:1] == b"A")
        counts[WORDS] += round(n * chars / (len(shape) - _GLUED - _PIECES))


# a text whose sample's last three quarters compress to under this share of their size says
# one thing again and again: a phrase repeated compresses to 0.03-0.16 of its size (each of
# the sample's pieces starts it at another place), prose, code and data to 0.4-0.6, JSON
# records and markdown tables to 0.19-0.3; log lines to 0.11-0.3, the most alike of which
# (one line again and again, its timestamp aside) are taken too
REPEATED = 0.2
_ECHO = 16  # bytes at the sample's end that must recur in it before it is compressed
# ... this many times at least: a unit said again and again recurs 512 / its length times in
# the sample, and one over 64 bytes long (8 times) compresses to 0.2 and more there anyway
_ECHOES = 8


def says_again(text: bytes) -> bool:
    """Whether a text says one thing again and again over most of its length (a phrase, a
    line, a separator and a counter), by a sample of it in four pieces (`_sample`: the
    middle of each quarter, where its thresholds were set; a text of 512 bytes or less, as
    a `Tally`'s sample is, is its own sample): the last three
    quarters of the sample compressed (raw deflate, its window as long as the sample) under
    `REPEATED` of their size. (The first quarter is left out: a chat's system prompt comes
    first, and a phrase said over four times its length cost 0.82 of its fitted estimate
    on Phi-3 all the same.) Such text costs what its few pieces cost on a tokenizer, which a
    fit's average over varied text does not tell. The sample's last bytes must recur in it
    `_ECHOES` times first: one cheap search spares the compression for the text that does
    not repeat, or repeats a unit too long to be taken (5 % of the corpus's requests are
    compressed). The compressor's tables are sized for 512 bytes (memory level 2): about
    57,000 instructions, half those of its defaults, almost all of them its set-up."""
    sample = _sample(text, _REPEAT_SAMPLE, _REPEAT_PIECES)
    if len(sample) < 4 * _ECHO or sample.count(sample[-_ECHO:]) < _ECHOES:
        return False
    latter = sample[len(sample) // 4 :]
    deflate = zlib.compressobj(1, zlib.DEFLATED, -9, 2)
    size = len(deflate.compress(latter)) + len(deflate.flush())
    return size < REPEATED * len(latter)


def _schema_counts(data: bytes) -> tuple[int, int, int, int]:
    """The characters, words, ASCII punctuation and runs of it of tool schemas' JSON."""
    ascii = data.isascii()
    words = data.translate(_WORD_TABLE) if ascii else data.translate(_WORD_TABLE, _CONTINUATION)
    punct = data.translate(_PUNCT_TABLE)
    n_words = words.count(b" a") + (words[:1] == b"a")
    return len(words), n_words, punct.count(b"a"), punct.title().count(b"A")


# the class codes of characters outside ASCII (`_SCRIPT_CODES`), kept by deleting the rest
_NOT_SCRIPT = bytes(b for b in range(256) if b not in _SCRIPT_CODES)


def count_pieces(data: bytes) -> int:
    """The pieces of UTF-8 `data` a pre-tokenizer splits at the least, by rule: its words,
    ASCII punctuation, digits and characters outside ASCII, one each. Counted on a sample
    (`_sample`) and scaled up by bytes, as the run fields are: the cost stays flat."""
    sample = _sample(data)
    ascii = sample.isascii()
    words = sample.translate(_WORD_TABLE, b"" if ascii else _CONTINUATION)
    rare = sample.translate(_CLASS_TABLE, _COMMON if ascii else _COMMON_OR_CONTINUATION)
    pieces = words.count(b" a") + (words[:1] == b"a") + rare.count(b".") + rare.count(b"0")
    if not ascii:
        pieces += len(rare.translate(None, _NOT_SCRIPT))
    return pieces if sample is data else round(pieces * len(data) / (len(sample) - _GLUED))


def count_text(data: bytes, counts: list[int], whole_words: bool = False) -> bool:
    """Add the character classes of UTF-8 `data` to `counts` (a tally vector). Its words
    are counted on the run fields' sample when it is over `_WORDS_WHOLE` bytes, unless
    `whole_words` (what a rule bounds a need with from below must be counted, not scaled
    up); returns whether they were counted whole."""
    ascii = data.isascii()
    # every class but lower-case letters and spaces, in one short copy: counted there
    rare = data.translate(_CLASS_TABLE, _COMMON if ascii else _COMMON_OR_CONTINUATION)
    if not ascii:
        for i, code in enumerate(_SCRIPT_CODES):
            n = rare.count(code)
            if n:
                counts[_SCRIPT_FIELDS[i]] += n
        if counts[INDIC]:  # Thai shares its lead byte with the Indic scripts
            thai = data.count(b"\xe0\xb8") + data.count(b"\xe0\xb9")
            counts[INDIC] -= thai
            counts[THAI] += thai
        if counts[OTHER3]:  # so do Vietnamese letters (U+1E00-1EFF) and Myanmar, Georgian…
            latin = sum(map(data.count, _LATIN_EXTENDED_ADDITIONAL))
            counts[OTHER3] -= latin
            counts[LATIN_EXT] += latin
    counts[UPPER] += rare.count(b"A")
    counts[DIGITS] += rare.count(b"0")
    counts[PUNCT] += rare.count(b".")
    counts[NEWLINES] += rare.count(b"\n")
    counts[TABS] += rare.count(b"\t")
    if len(data) > _WORDS_WHOLE and not whole_words:
        chars = len(data) if ascii else len(data.translate(None, _CONTINUATION))
        counts[CHARS] += chars
        count_runs(data, ascii, chars, counts, words=True)
        return False
    # letters and the rest, one character a byte
    words = data.translate(_WORD_TABLE) if ascii else data.translate(_WORD_TABLE, _CONTINUATION)
    counts[CHARS] += len(words)
    counts[WORDS] += words.count(b" a") + (words[:1] == b"a")
    count_runs(data, ascii, len(words), counts)
    return True


class _Walk:
    """Collects the text pieces and structure counts of one body."""

    __slots__ = (
        "audio",
        "blobs",
        "counts",
        "images",
        "parts",
        "sample",
        "token_ids",
        "tool_parts",
        "whole_words",
    )

    def __init__(self) -> None:
        self.parts: list[str] = []  # text, joined and encoded once
        self.tool_parts: list[str] = []  # the text of tool results (also in `parts`)
        self.blobs: list[bytes] = []  # JSON of tool calls, schemas and other parts
        self.token_ids = 0
        self.images = 0
        self.audio = 0
        self.counts = [0] * N_FIELDS
        self.sample = b""  # what `says_again` looks at of the text, once counted
        self.whole_words = True  # whether the text's words were counted whole, not sampled

    def json(self, value: Any) -> bool:
        """Add `value`'s JSON to the text; False when it has none."""
        try:
            self.blobs.append(orjson.dumps(value))
        except TypeError:
            return False
        return True

    def content(self, value: Any) -> None:
        """A message `content` (string or parts), a prompt, an input or a system value."""
        if isinstance(value, str):
            self.parts.append(value)
        elif isinstance(value, list):
            for part in value:
                if isinstance(part, str):
                    self.parts.append(part)
                elif isinstance(part, int):
                    self.token_ids += 1  # a prompt given as token ids
                elif isinstance(part, dict):
                    self.part(part)
                elif isinstance(part, list):
                    self.content(part)  # a batch of prompts / token-id arrays
        elif value is not None:
            self.json(value)

    def part(self, part: dict[str, Any]) -> None:
        kind = part.get("type")
        if kind in _IMAGE_PARTS:
            self.images += 1
            return
        if kind in _AUDIO_PARTS:
            self.audio += 1
            return
        text = part.get("text")
        if isinstance(text, str):
            self.parts.append(text)
            return
        if "role" in part:  # a message inside a Responses `input` array
            self.message(part)
            return
        content = part.get("content")
        if content is not None:  # e.g. an Anthropic tool_result
            self.content(content)
            return
        # anything else (tool calls and their outputs, documents): its JSON
        self.json(part)

    def message(self, message: dict[str, Any]) -> None:
        counts = self.counts
        counts[MESSAGES] += 1
        role = message.get("role")
        content = message.get("content")
        if role == "assistant":
            counts[REPLIES] += 1
        elif role == "tool" or role == "function":
            counts[TOOL_TURNS] += 1
            start = len(self.parts)
            self.content(content)
            self.tool_parts.extend(self.parts[start:])
            content = None  # gathered
        if type(content) is str:
            self.parts.append(content)
        elif content is not None:
            self.content(content)
        if len(message) <= 2:  # role and content: the common case
            return
        for key in ("tool_calls", "function_call"):
            calls = message.get(key)
            if calls and self.json(calls):
                counts[CALL_CHARS] += len(self.blobs[-1])
        for key in ("reasoning_content", "thinking"):  # chat's reasoning, Ollama's
            reasoning = message.get(key)
            if isinstance(reasoning, str):
                self.parts.append(reasoning)
        images = message.get("images")  # Ollama: base64 images next to the content
        if isinstance(images, list):
            self.images += len(images)

    def size(self) -> int:
        """About the bytes of text gathered (to pick a batch's longest item)."""
        return sum(len(p) for p in self.parts) + sum(len(b) for b in self.blobs)

    def finish(self, collapse: bool = False) -> list[int]:
        counts = self.counts
        if self.parts or self.blobs:
            joined = " ".join(self.parts)
            text = (collapse_runs(joined) if collapse else joined).encode()
            blobs = self.blobs
            if collapse:
                blobs = [collapse_runs(b.decode()).encode() for b in blobs]
            if blobs:
                text = b" ".join((text, *blobs)) if self.parts else b" ".join(blobs)
            self.whole_words = count_text(text, counts, whole_words=collapse)
            # a sample, not the text: a long prompt's bytes are not held for the request's life
            self.sample = _sample(text, _REPEAT_SAMPLE, _REPEAT_PIECES)
        if self.tool_parts:
            counts[TOOL_TEXT] += count_pieces(" ".join(self.tool_parts).encode())
        counts[TOKEN_IDS] += self.token_ids
        counts[REQUESTS] = 1
        return counts


def _is_batch(value: Any) -> bool:
    return isinstance(value, list) and len(value) > 1 and isinstance(value[0], (str, list))


def _longest(batch: list[Any], walk: _Walk) -> None:
    """Each sequence of a batch needs the window alone: keep the longest one."""
    best: _Walk | None = None
    best_size = -1
    for item in batch:
        one = _Walk()
        one.content(item)
        size = one.size() // 4 + one.token_ids
        if size > best_size:
            best, best_size = one, size
    if best is not None:
        walk.parts.extend(best.parts)
        walk.blobs.extend(best.blobs)
        walk.token_ids += best.token_ids


_SYSTEM_ROLES = frozenset({"system", "developer"})
# the roles of a turn of text alone: `_Walk.message` counts it as a message (and, for
# `assistant`, a reply) and nothing else (a tool's result is also tool text), and every
# template renders it as it is (`need._plain`)
PLAIN_ROLES = frozenset({"system", "developer", "user", "assistant"})
# endpoints whose list-valued `prompt` / `input` is a batch of separate sequences
_BATCHED = frozenset({"completions", "embeddings", "ollama.embed"})


@dataclass(frozen=True, slots=True)
class Tally:
    """What one body holds: the counts of FIELDS, and its media parts; the sample of its
    text `says_again` looks at (asked only where a band is in question); and whether its
    words were counted whole (a long text's come from a sample: an estimate, no bound)."""

    counts: tuple[int, ...]
    images: int = 0
    audio: int = 0
    sample: bytes = field(default=b"", compare=False, repr=False)
    whole_words: bool = field(default=True, compare=False)


def tally_body(body: dict[str, Any], endpoint: str, collapsed: bool = False) -> Tally:
    """The tally of a request body (pure; one walk). With `collapsed`, each run of one
    repeated character in its text counts as one character, and its words are counted
    whole (for the fewest tokens)."""
    walk = _walk_body(body, endpoint)
    counts = tuple(walk.finish(collapsed))
    return Tally(counts, walk.images, walk.audio, walk.sample, walk.whole_words)


def variety(body: dict[str, Any], endpoint: str) -> float:
    """How little of the body's text says again what it said before: its size compressed
    (zlib, whose window is 32 KB) over its size, from near 0 (one phrase said again and
    again) to about 0.3-0.6 for prose, code or data. A text that says the same thing over
    and over costs what its few pieces cost, not the average its classes say, so a fit's
    residuals, measured on varied text, say nothing of it. One more walk of the body:
    asked only where a refusal is in question."""
    walk = _walk_body(body, endpoint)
    text = b" ".join((" ".join(walk.parts).encode(), *walk.blobs))
    if not text.strip():
        return 1.0
    return len(zlib.compress(text, 1)) / len(text)


def _walk_body(body: dict[str, Any], endpoint: str) -> _Walk:
    walk = _Walk()
    messages = body.get("messages")
    if isinstance(messages, list):
        parts, counts = walk.parts, walk.counts
        plain = replies = 0
        for message in messages:
            if type(message) is not dict:
                if isinstance(message, dict):
                    walk.message(message)
                continue
            # the common turn (a role and a string content, no tool's), without a call
            content = message.get("content")
            role = message.get("role")
            if (
                type(content) is str
                and len(message) == 2
                and type(role) is str
                and role in PLAIN_ROLES
            ):
                parts.append(content)
                plain += 1
                replies += role == "assistant"
            else:
                walk.message(message)
        counts[MESSAGES] += plain
        counts[REPLIES] += replies
        first = messages[0] if messages else None
        if (
            isinstance(first, dict)
            and first.get("role") not in _SYSTEM_ROLES
            and body.get("system") is None
            and body.get("instructions") is None
        ):
            walk.counts[DEFAULT_SYSTEM] = 1
    for name in ("system", "instructions", "prompt", "input", "suffix"):
        value = body.get(name)
        if value is None:
            continue
        if name == "system":
            walk.counts[MESSAGES] += 1  # a separate system turn in the template
        if endpoint in _BATCHED and _is_batch(value):
            _longest(value, walk)
        else:
            walk.content(value)
    images = body.get("images")  # Ollama's native generate
    if isinstance(images, list):
        walk.images += len(images)
    for name in ("tools", "functions"):
        tools = body.get(name)
        if tools and isinstance(tools, list):
            walk.counts[TOOLS] += len(tools)
            walk.counts[TOOL_BLOCKS] = 1
            blobs = []
            for tool in tools:
                try:  # free when nothing is raised, where a `suppress` costs a call a tool
                    blob = orjson.dumps(tool)
                except TypeError:  # no JSON: no schema to count
                    continue
                blobs.append(blob)
            for index, n in zip(_SCHEMA_FIELDS, _schema_counts(b" ".join(blobs)), strict=True):
                walk.counts[index] += n
    return walk
