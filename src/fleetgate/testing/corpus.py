"""A varied, reproducible corpus of chat requests for judging context estimates.

Each text class the estimate costs differently is here: English prose, source code, numeric
CSV, CJK (Chinese, Japanese, Korean), other scripts (Cyrillic, Greek, Arabic, Hebrew,
Devanagari), identifiers and hashes, JSON of several shapes and layouts, code indented by
tabs or 2 spaces, prose with punctuation runs (`!!!`, `?!`), base64 and hex, repeated words,
emoji-heavy chat, Thai, tool schemas, multi-turn chats with tool calls, and the layouts
users paste whose whitespace, digits and punctuation a tokenizer splits apart: markdown
tables, space-aligned columns and double spaces, log files, repeated JSON records,
space-separated numbers and C byte arrays, minified JS and CSS. Prose and code
come from the docstrings and source of Python's own standard library (real English and real
code, not word salad); the other scripts from sentence pools below.
`corpus(seed, n)` always gives the same requests for the same seed and Python version.
"""

# ruff: noqa: RUF001  (the sentence pools are meant to hold these scripts)
from __future__ import annotations

import ast
import inspect
import json
import random
import string
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

CLASSES = (
    "prose",
    "code",
    "csv",
    "cjk",
    "scripts",
    "identifiers",
    "json",
    "indented",
    "punctuation",
    "encoded",
    "repeated",
    "emoji",
    "thai",
    "markdown",
    "aligned",
    "logs",
    "records",
    "numbers",
    "minified",
    "tools",
    "multiturn",
)

_MODULES = (
    "argparse",
    "asyncio.base_events",
    "calendar",
    "collections",
    "configparser",
    "csv",
    "dataclasses",
    "difflib",
    "email.message",
    "fractions",
    "ftplib",
    "functools",
    "http.client",
    "imaplib",
    "inspect",
    "json.decoder",
    "logging",
    "mailbox",
    "pathlib",
    "pickle",
    "pydoc",
    "shutil",
    "smtplib",
    "statistics",
    "subprocess",
    "tarfile",
    "textwrap",
    "threading",
    "typing",
    "unittest.case",
    "urllib.request",
    "zipfile",
)

_CHINESE = (
    "这个网关会把每个请求发送到能够容纳它的最小上下文窗口。",
    "如果请求太长，系统会在调用上游之前拒绝它，并给出清楚的错误信息。",
    "我们在两台服务器上部署了同一个模型，一台的上下文是五百一十二个词元，另一台是两千零四十八个。",
    "今天的天气很好，我们决定去公园散步，顺便买一些新鲜的水果。",
    "请根据下面的表格总结本季度的销售情况，并指出增长最快的地区。",
    "机器学习模型的推理成本主要取决于输入长度和生成长度。",
    "他说这个问题需要更多的数据才能回答，所以我们先收集日志。",
    "在分布式系统中，网络分区和节点故障是必须考虑的常见问题。",
    "这本书讲述了一个年轻人离开家乡，在大城市里寻找梦想的故事。",
    "请把这段代码翻译成中文注释，并解释每个函数的作用。",
)
_JAPANESE = (
    "このゲートウェイは、各リクエストを収まる最小のコンテキストウィンドウに送ります。",
    "東京の天気は晴れで、午後から少し雲が出る予報です。",
    "エラーが発生した場合は、ログを確認してから再試行してください。",
    "私たちは新しいサービスを来月リリースする予定です。",
    "カタカナで書かれたコンピューター用語がたくさんあります。",
    "この文章を英語に翻訳して、要点を三つにまとめてください。",
)
_KOREAN = (
    "이 게이트웨이는 각 요청을 담을 수 있는 가장 작은 컨텍스트 창으로 보냅니다.",
    "오늘은 날씨가 좋아서 친구들과 함께 한강 공원에 갔습니다.",
    "요청이 너무 길면 업스트림을 호출하기 전에 거절합니다.",
    "서울의 인구는 약 천만 명이며 교통이 매우 발달했습니다.",
    "다음 표를 보고 이번 분기의 매출을 요약해 주세요.",
)
_SCRIPTS = (
    # Russian
    "Шлюз отправляет каждый запрос на самое маленькое окно контекста, которое его вмещает.",
    "Сегодня хорошая погода, и мы решили прогуляться по набережной.",
    "Если запрос слишком длинный, он будет отклонён до обращения к серверу.",
    "Пожалуйста, кратко изложите основные выводы этого отчёта.",
    # Greek
    "Η πύλη στέλνει κάθε αίτημα στο μικρότερο παράθυρο που το χωράει.",
    "Ο καιρός σήμερα είναι ηλιόλουστος και ζεστός σε όλη τη χώρα.",
    # Arabic
    "ترسل البوابة كل طلب إلى أصغر نافذة سياق يمكنها استيعابه.",
    "الطقس اليوم جميل، لذلك قررنا الذهاب إلى الحديقة مع الأصدقاء.",
    "يرجى تلخيص النتائج الرئيسية لهذا التقرير في ثلاث نقاط.",
    # Hebrew
    "השער שולח כל בקשה לחלון ההקשר הקטן ביותר שמכיל אותה.",
    "היום מזג האוויר נעים ואנחנו יוצאים לטיול בפארק.",
    # Hindi
    "गेटवे हर अनुरोध को सबसे छोटी संदर्भ विंडो में भेजता है जो उसे समा सके।",
    "आज मौसम बहुत अच्छा है और हम पार्क में घूमने जा रहे हैं।",
    # Thai
    "เกตเวย์จะส่งคำขอแต่ละรายการไปยังหน้าต่างบริบทที่เล็กที่สุดที่รองรับได้",
    "วันนี้อากาศดีมาก พวกเราจึงไปเดินเล่นที่สวนสาธารณะ",
    # Vietnamese and Turkish (Latin letters with diacritics)
    "Cổng sẽ gửi mỗi yêu cầu đến cửa sổ ngữ cảnh nhỏ nhất có thể chứa nó.",
    "Ağ geçidi her isteği onu alabilecek en küçük bağlam penceresine gönderir.",
)

_THAI = (
    "เกตเวย์จะส่งคำขอแต่ละรายการไปยังหน้าต่างบริบทที่เล็กที่สุดที่รองรับได้",
    "วันนี้อากาศดีมาก พวกเราจึงไปเดินเล่นที่สวนสาธารณะ",
    "ถ้าคำขอยาวเกินไป ระบบจะปฏิเสธก่อนที่จะเรียกเซิร์ฟเวอร์ต้นทาง",
    "กรุณาสรุปยอดขายของไตรมาสนี้จากตารางด้านล่าง และบอกว่าภูมิภาคใดเติบโตเร็วที่สุด",
    "ต้นทุนการประมวลผลของโมเดลขึ้นอยู่กับความยาวของข้อความที่ป้อนเข้าและที่สร้างขึ้น",
    "เขาบอกว่าคำถามนี้ต้องใช้ข้อมูลเพิ่มเติม เราจึงเริ่มเก็บบันทึกของระบบก่อน",
    "หนังสือเล่มนี้เล่าเรื่องของชายหนุ่มที่ออกจากบ้านเกิดเพื่อตามหาความฝันในเมืองใหญ่",
    "กรุงเทพมหานครเป็นเมืองหลวงของประเทศไทยและมีประชากรหนาแน่นมาก",
    "โปรดแปลข้อความนี้เป็นภาษาอังกฤษและสรุปประเด็นสำคัญสามข้อ",
    "ร้านอาหารริมถนนแห่งนี้ขายข้าวผัดและต้มยำกุ้งที่อร่อยที่สุดในย่านนี้",
)
_EMOJI = (
    "😀",
    "😂",
    "🥲",
    "🔥",
    "🚀",
    "🎉",
    "👍",
    "👍🏽",
    "🙏",
    "💯",
    "🤖",
    "🧠",
    "📦",
    "✅",
    "❌",
    "⚠️",
    "❤️",
    "✨",
    "🌍",
    "🍕",
    "🐍",
    "👩‍💻",
    "👨‍👩‍👧",
    "🏳️‍🌈",
    "🇯🇵",
    "🇫🇷",
    "😭",
    "🤔",
    "👀",
    "💡",
)
_REPEATED = ("very", "the", "no", "go", "test", "ha", "la", "yes", "buffalo", "data", "ok")
_PUNCT_RUNS = (
    "!!!",
    "?!",
    "?!?",
    "...",
    "!!",
    "??",
    "?!!",
    "!?!?",
    "..!",
    ":)",
    ";-)",
    ":-(",
    "...?",
    "!!!1",
    "(!)",
    "?!?!",
    "!.",
    "--",
    ",,",
)


@dataclass(frozen=True, slots=True)
class Sample:
    """One request of the corpus and the text class that dominates it."""

    kind: str
    body: dict[str, Any]


class _Sources:
    """Docstring paragraphs and source blocks of the standard library, loaded once."""

    _prose: list[str] | None = None
    _code: list[str] | None = None

    @classmethod
    def load(cls) -> tuple[list[str], list[str]]:
        if cls._prose is None or cls._code is None:
            prose: list[str] = []
            code: list[str] = []
            for name in _MODULES:
                module = __import__(name, fromlist=["_"])
                try:
                    source = inspect.getsource(module)
                except (OSError, TypeError):
                    continue
                tree = ast.parse(source)
                for node in ast.walk(tree):
                    if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Module)):
                        doc = ast.get_docstring(node)
                        if doc and len(doc) > 80:
                            prose.extend(p for p in doc.split("\n\n") if len(p) > 60)
                    if isinstance(node, ast.FunctionDef):
                        block = ast.get_source_segment(source, node)
                        if block and 200 < len(block) < 6000:
                            code.append(block)
            cls._prose, cls._code = prose, code
        return cls._prose, cls._code


def _take(rng: random.Random, pool: list[str] | tuple[str, ...], size: int, sep: str) -> str:
    parts: list[str] = []
    total = 0
    start = rng.randrange(len(pool))
    while total < size:
        piece = pool[(start + len(parts)) % len(pool)] if rng.random() < 0.7 else rng.choice(pool)
        parts.append(piece)
        total += len(piece) + len(sep)
    return sep.join(parts)


def _csv(rng: random.Random, size: int) -> str:
    cols = rng.randint(3, 8)
    header = ",".join(
        rng.choice(("id", "date", "price", "qty", "lat", "lon", "score", "t")) + str(i)
        for i in range(cols)
    )
    rows = [header]
    while sum(len(r) + 1 for r in rows) < size:
        cells = []
        for c in range(cols):
            pick = (c + rng.randrange(4)) % 4
            if pick == 0:
                cells.append(str(rng.randint(0, 10 ** rng.randint(1, 7))))
            elif pick == 1:
                cells.append(f"{rng.uniform(-1000, 1000):.{rng.randint(1, 6)}f}")
            elif pick == 2:
                cells.append(f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}")
            else:
                cells.append(f"{rng.random():.4f}")
        rows.append(",".join(cells))
    return "\n".join(rows)


def _identifiers(rng: random.Random, size: int) -> str:
    out: list[str] = []
    total = 0
    while total < size:
        pick = rng.randrange(6)
        if pick == 0:
            piece = f"{rng.getrandbits(128):032x}"
        elif pick == 1:
            h = f"{rng.getrandbits(128):032x}"
            piece = f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
        elif pick == 2:
            alphabet = string.ascii_letters + string.digits + "+/"
            piece = "".join(rng.choice(alphabet) for _ in range(rng.randint(16, 64)))
        elif pick == 3:
            words = ("api", "v1", "users", "orders", "items", "search", "static", "img")
            path = "/".join(rng.choice(words) for _ in range(rng.randint(2, 5)))
            host = rng.choice(("example", "cdn", "svc"))
            piece = f"https://{host}.com/{path}?id={rng.randint(1, 99999)}"
        elif pick == 4:
            piece = f"/var/log/{rng.choice(('app', 'nginx', 'gw'))}/{rng.randint(1, 999)}.log"
        else:
            level = rng.choice(("ERROR", "INFO", "WARN"))
            piece = f"{level} req={rng.getrandbits(40):x} t={rng.randint(1, 5000)}ms"
        out.append(piece)
        total += len(piece) + 1
    return rng.choice((" ", "\n", ", ")).join(out)


def _json_doc(rng: random.Random, size: int, prose: list[str]) -> str:
    import orjson

    items = []
    while sum(len(orjson.dumps(i)) for i in items) < size:
        items.append(
            {
                "id": rng.randint(1, 10**6),
                "name": rng.choice(prose)[:40],
                "tags": [rng.choice(("a", "beta", "prod", "eu-west")) for _ in range(3)],
                "price": round(rng.uniform(0, 500), 2),
                "active": rng.random() < 0.5,
            }
        )
    option = orjson.OPT_INDENT_2 if rng.random() < 0.5 else 0
    return orjson.dumps(items, option=option).decode()


def _json_value(rng: random.Random, prose: list[str], depth: int) -> Any:
    pick = rng.randrange(8 if depth < 3 else 5)
    if pick == 0:
        return rng.randint(-(10 ** rng.randint(1, 6)), 10 ** rng.randint(1, 9))
    if pick == 1:
        return round(rng.uniform(-100, 100), rng.randint(1, 6))
    if pick == 2:
        return rng.choice((True, False, None))
    if pick in (3, 4):
        words = rng.choice(prose).split()
        start = rng.randrange(len(words))
        return " ".join(words[start : start + rng.randint(1, 6)])
    if pick == 5:
        return [_json_value(rng, prose, depth + 1) for _ in range(rng.randint(0, 5))]
    keys = ("id", "name", "type", "value", "items", "status", "createdAt", "user_id", "meta")
    return {
        rng.choice(keys) + rng.choice(("", "", str(i))): _json_value(rng, prose, depth + 1)
        for i in range(rng.randint(1, 6))
    }


def _json_shapes(rng: random.Random, size: int, prose: list[str]) -> str:
    """JSON of several shapes and layouts: nested documents, number matrices, string maps,
    JSON lines; compact, `json.dumps` spacing, indented by 2 or 4 spaces or by tabs."""
    shape = rng.randrange(4)
    layout = rng.choice((None, 0, 2, 4, "\t", "compact"))
    items: list[Any] = []
    total = 0
    while total < size:
        if shape == 0:
            item: Any = _json_value(rng, prose, 2)
        elif shape == 1:
            item = [
                round(rng.uniform(-10, 10), rng.randint(1, 4)) for _ in range(rng.randint(2, 8))
            ]
        elif shape == 2:
            key = f"{rng.choice(('msg', 'label', 'error', 'title'))}.{rng.randint(1, 999)}"
            item = {key: rng.choice(prose)[: rng.randint(10, 80)]}
        else:
            item = {
                "ts": f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T10:00:00Z",
                "level": rng.choice(("info", "warn", "error")),
                "msg": rng.choice(prose)[: rng.randint(10, 60)],
                "ms": rng.randint(1, 5000),
            }
        items.append(item)
        total += len(json.dumps(item))
    if shape == 3 and rng.random() < 0.6:  # JSON lines
        return "\n".join(json.dumps(i) for i in items)
    doc: Any = items
    if shape == 2:
        doc = {k: v for i in items for k, v in i.items()}
    if layout == "compact":
        return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
    return json.dumps(doc, indent=layout, ensure_ascii=False)


def _indented(rng: random.Random, code: list[str], size: int) -> str:
    """Source code re-indented by tabs (most) or by 2 spaces."""
    unit = rng.choice(("\t", "\t", "\t", "  "))
    lines = []
    for line in _take(rng, code, size, "\n\n").split("\n"):
        stripped = line.lstrip(" ")
        lines.append(unit * ((len(line) - len(stripped)) // 4) + stripped)
    return "\n".join(lines)


def _punctuation(rng: random.Random, prose: list[str], size: int) -> str:
    """Chatty prose whose sentences end in runs of mixed punctuation (`!!!`, `?!`, `...`)."""
    text = _take(rng, prose, size, "\n\n")
    rate = rng.uniform(0.3, 1.0)
    parts = text.split(". ")
    return "".join(
        p + (rng.choice(_PUNCT_RUNS) + " " if rng.random() < rate else ". ") for p in parts
    )


def _encoded(rng: random.Random, size: int) -> str:
    """Base64 (wrapped or not, standard or URL-safe), hex strings and hex dumps."""
    import base64

    raw = rng.randbytes(max(size * 3 // 4, 4))
    pick = rng.randrange(5)
    if pick == 0:
        return base64.b64encode(raw).decode()[:size]
    if pick == 1:
        text = base64.b64encode(raw).decode()[:size]
        return "\n".join(text[i : i + 76] for i in range(0, len(text), 76))
    if pick == 2:
        parts = [
            base64.urlsafe_b64encode(raw[i : i + 40]).decode().rstrip("=") for i in (0, 40, 80)
        ]
        return "Bearer " + ".".join(parts) + "\n" + base64.b64encode(raw).decode()[:size]
    if pick == 3:
        text = raw.hex()[:size]
        if rng.random() < 0.3:
            return text.upper()
        if rng.random() < 0.5:  # a C byte array
            return ", ".join(f"0x{b:02x}" for b in raw[: size // 6])
        return text
    rows = (raw[i : i + 16] for i in range(0, len(raw) // 2, 16))
    return "\n".join(
        f"{i * 16:08x}  " + " ".join(f"{b:02x}" for b in r) for i, r in enumerate(rows)
    )


def _repeated(rng: random.Random, prose: list[str], size: int) -> str:
    """A word or a short phrase said again and again, set apart by spaces, punctuation,
    a tab or line breaks."""
    if rng.random() < 0.6:
        unit = rng.choice(_REPEATED)
        if rng.random() < 0.3:
            unit = rng.choice((unit.capitalize(), unit.upper()))
    else:
        words = rng.choice(prose).split()
        start = rng.randrange(len(words))
        unit = " ".join(words[start : start + rng.randint(1, 4)])
    sep = rng.choice((" ", " ", ", ", "\n", "! ", "  ", ". ", "\t", "-"))
    return sep.join([unit] * max(1, size // (len(unit) + len(sep))))


def _emoji(rng: random.Random, prose: list[str], size: int) -> str:
    """Emoji-heavy chat: emoji after most words, or strings of emoji alone."""
    density = rng.choice((0.3, 0.6, 1.0, 3.0))
    out: list[str] = []
    total = 0
    words = _take(rng, prose, size, " ").split()
    for word in words:
        if density < 3.0:
            out.append(word)
            total += len(word) + 1
        n = int(density) + (rng.random() < density % 1)
        for _ in range(n):
            e = rng.choice(_EMOJI)
            out.append(e * rng.choice((1, 1, 1, 2, 3)))
            total += 2
        if total > size:
            break
    return rng.choice((" ", "")).join(out) if density >= 3.0 else " ".join(out)


_CELLS = ("ok", "done", "North", "pending", "Alice", "n/a", "yes", "12.5", "1,204", "fail", "-")
_HEADS = ("Name", "Region", "Q1", "Q2", "Total", "Status", "Owner", "Notes", "p95 (ms)")


def _markdown(rng: random.Random, size: int) -> str:
    """A markdown table, its cells padded to a column width or not."""
    cols = rng.randint(2, 7)
    width = rng.randint(6, 20) if rng.random() < 0.7 else 0
    heads = [rng.choice(_HEADS) for _ in range(cols)]

    def row(cells: list[str]) -> str:
        if width:
            return "| " + " | ".join(c.ljust(width) for c in cells) + " |"
        return "|" + "|".join(cells) + "|"

    lines = [row(heads), row(["-" * max(width, 3)] * cols)]
    while sum(len(line) + 1 for line in lines) < size:
        lines.append(row([rng.choice(_CELLS) for _ in range(cols)]))
    return "\n".join(lines)


def _aligned(rng: random.Random, prose: list[str], size: int) -> str:
    """Text whose words are set apart by runs of spaces: aligned columns, two spaces after
    each sentence, trailing spaces, wide gaps, or numbers in space-padded columns."""
    pick = rng.randrange(4)
    if pick == 3:
        cols = rng.randint(2, 8)
        rows = []
        while sum(len(r) + 1 for r in rows) < size:
            cells = [f"{rng.uniform(-999, 9999):.{rng.randint(0, 3)}f}" for _ in range(cols)]
            rows.append(rng.choice(("", "  ")) + " ".join(c.rjust(10) for c in cells))
        return "\n".join(rows)
    words = _take(rng, prose, size, " ").split()
    if pick == 0:  # columns: key, value, comment
        lines = []
        for i in range(0, len(words) - 2, 3):
            a, b, c = words[i : i + 3]
            lines.append(a.ljust(rng.randint(12, 24)) + b.ljust(rng.randint(8, 30)) + c)
        return "\n".join(lines)
    if pick == 1:  # two spaces after a sentence, double spaces by accident
        text = " ".join(words)
        return text.replace(". ", ".  ").replace(", ", rng.choice((",  ", ", ")))
    gaps = (" ", " ", "  ", "   ", " " * rng.randint(4, 30), "   \n")
    return "".join(w + rng.choice(gaps) for w in words)


_LOG_MESSAGES = (
    "Heartbeat ok",
    "connection reset by peer",
    "GET /api/v1/health HTTP/1.1 200",
    "Retrying in 5 seconds...",
    "worker started",
    "cache miss for key user:session",
    "WARNING: deprecated option --foo will be removed",
)


def _logs(rng: random.Random, size: int) -> str:
    """A log file: the same few messages again and again, with timestamps or without."""
    pool = rng.sample(_LOG_MESSAGES, rng.randint(1, 3))
    style = rng.randrange(4)
    lines: list[str] = []
    t = 0
    while sum(len(line) + 1 for line in lines) < size:
        t += rng.randint(1, 900)
        msg = rng.choice(pool)
        level = rng.choice(("INFO", "INFO", "WARN", "DEBUG"))
        if style == 0:
            stamp = f"2024-05-01 12:{t // 60000 % 60:02d}:{t // 1000 % 60:02d},{t % 1000:03d}"
            lines.append(f"{stamp} {level} [worker-{rng.randint(1, 4)}] {msg}")
        elif style == 1:
            lines.append(f"[{level}] {msg}")
        elif style == 2:
            lines.append(msg)
        else:
            stamp = f"01/May/2024:12:00:{t // 1000 % 60:02d} +0000"
            lines.append(f'127.0.0.1 - - [{stamp}] "GET /index.html HTTP/1.1" 200 {t % 9999}')
    return "\n".join(lines)


def _records(rng: random.Random, size: int) -> str:
    """One JSON record again and again (an id counting up or not), or one nested deeply,
    as JSON lines, compact or indented by 2 or 4 spaces or a tab."""
    if rng.random() < 0.3:

        def nest(depth: int) -> Any:
            if depth == 0:
                return {"value": rng.randint(1, 100), "label": "leaf"}
            return {f"level{depth}": nest(depth - 1), "n": depth}

        items = [nest(rng.randint(3, 9)) for _ in range(max(1, size // 400))]
        return json.dumps(items, indent=rng.choice((2, 4, "\t")))
    record = {"id": 1, "name": "Alice", "email": "alice@example.com", "active": True}
    record["roles"] = ["admin", "user"]
    count = rng.random() < 0.5
    layout = rng.choice(("lines", "compact", 2, 4, "\t"))
    items = []
    while sum(len(json.dumps(i)) for i in items) * (1.4 if layout in (2, 4) else 1) < size:
        items.append({**record, "id": len(items) + 1} if count else record)
    if layout == "lines":
        return "\n".join(json.dumps(i) for i in items)
    if layout == "compact":
        return json.dumps(items, separators=(",", ":"))
    return json.dumps(items, indent=layout)


def _numbers(rng: random.Random, size: int) -> str:
    """Numbers as users paste them: separated by single spaces, in long runs of digits,
    tab-separated, or listed one a line."""
    pick = rng.randrange(4)
    if pick == 0:
        seq = " ".join(str(rng.randint(0, 10 ** rng.randint(1, 3))) for _ in range(size // 3))
        return seq[:size]
    if pick == 1:
        digits = "".join(rng.choice(string.digits) for _ in range(size))
        width = rng.choice((size, 50, 64))
        return "\n".join(digits[i : i + width] for i in range(0, size, width))
    rows = []
    while sum(len(r) + 1 for r in rows) < size:
        cells = [str(rng.randint(0, 99999)) for _ in range(rng.randint(1, 6))]
        rows.append(("\t" if pick == 2 else ", ").join(cells))
    return "\n".join(rows)


_JS_NAMES = ("e", "t", "n", "r", "i", "o", "a", "s", "u", "c", "l", "f", "d", "h", "p")
_CSS_RULES = (
    "margin:0",
    "padding:4px 8px",
    "color:#333",
    "background:#fff",
    "display:flex",
    "border:1px solid #e5e5e5",
    "font-size:14px",
    "line-height:1.5",
    "transition:all .2s ease-in-out",
    "box-shadow:0 1px 3px rgba(0,0,0,.12)",
)


def _minified(rng: random.Random, size: int) -> str:
    """Minified JavaScript (one-letter names, no spaces) or CSS."""
    out: list[str] = []
    total = 0
    css = rng.random() < 0.4
    while total < size:
        if css:
            sel = rng.choice((".btn", ".nav>li", "#app", "a:hover", ".col-md-6", "h1,h2"))
            piece = sel + "{" + ";".join(rng.sample(_CSS_RULES, rng.randint(1, 5))) + "}"
        else:
            a, b, c = rng.sample(_JS_NAMES, 3)
            piece = rng.choice(
                (
                    f"function {a}({b},{c}){{return {b}+{c}}}",
                    f"var {a}={b}.length>{rng.randint(0, 99)}?{b}[0]:{c};",
                    f'if({a}==="{rng.choice(("!", "*", "+", "div"))}")return!0;',
                    f"{a}.prototype.{rng.choice(('get', 'on'))}=function({b}){{this.{c}={b}}};",
                    f"for(var {a}=0;{a}<{b}.length;{a}++){c}.push({b}[{a}]);",
                    f'{a}=({b}&&{c})||"";',
                )
            )
        out.append(piece)
        total += len(piece)
    return "".join(out)


def _tools(rng: random.Random, prose: list[str]) -> list[dict[str, Any]]:
    tools = []
    for i in range(rng.randint(1, 4)):
        props = {
            f"arg_{j}": {
                "type": rng.choice(("string", "integer", "number", "boolean")),
                "description": rng.choice(prose)[: rng.randint(20, 120)],
            }
            for j in range(rng.randint(1, 5))
        }
        tools.append(
            {
                "type": "function",
                "function": {
                    "name": rng.choice(("get_weather", "search_docs", "run_query", "send_mail"))
                    + f"_{i}",
                    "description": rng.choice(prose)[: rng.randint(30, 200)],
                    "parameters": {
                        "type": "object",
                        "properties": props,
                        "required": list(props)[:1],
                    },
                },
            }
        )
    return tools


def text_of(kind: str, rng: random.Random, size: int) -> str:
    """About `size` characters of one text class."""
    prose, code = _Sources.load()
    if kind == "prose":
        return _take(rng, prose, size, "\n\n")
    if kind == "code":
        return _take(rng, code, size, "\n\n")
    if kind == "csv":
        return _csv(rng, size)
    if kind == "cjk":
        pool = rng.choice((_CHINESE, _JAPANESE, _KOREAN, _CHINESE + _JAPANESE + _KOREAN))
        return _take(rng, pool, size // 3, rng.choice(("", "\n", " ")))
    if kind == "scripts":
        return _take(rng, _SCRIPTS, size // 2, " ")
    if kind == "identifiers":
        return _identifiers(rng, size)
    if kind == "json":
        if rng.random() < 0.3:
            return _json_doc(rng, size, prose)
        return _json_shapes(rng, size, prose)
    if kind == "indented":
        return _indented(rng, code, size)
    if kind == "punctuation":
        return _punctuation(rng, prose, size)
    if kind == "encoded":
        return _encoded(rng, size)
    if kind == "repeated":
        return _repeated(rng, prose, size)
    if kind == "emoji":
        return _emoji(rng, prose, size)
    if kind == "thai":
        return _take(rng, _THAI, size // 2, rng.choice((" ", "", "\n")))
    if kind == "markdown":
        return _markdown(rng, size)
    if kind == "aligned":
        return _aligned(rng, prose, size)
    if kind == "logs":
        return _logs(rng, size)
    if kind == "records":
        return _records(rng, size)
    if kind == "numbers":
        return _numbers(rng, size)
    if kind == "minified":
        return _minified(rng, size)
    raise ValueError(kind)


_TEXT_KINDS = tuple(k for k in CLASSES if k not in ("tools", "multiturn"))


def _chat(rng: random.Random, kind: str, size: int) -> dict[str, Any]:
    prose, _ = _Sources.load()
    messages: list[dict[str, Any]] = []
    body: dict[str, Any] = {}
    if rng.random() < 0.5:
        messages.append({"role": "system", "content": rng.choice(prose)[:300]})
    if kind == "tools":
        body["tools"] = _tools(rng, prose)
        messages.append({"role": "user", "content": text_of(rng.choice(_TEXT_KINDS), rng, size)})
    elif kind == "multiturn":
        turns = rng.randint(2, 6)
        body["tools"] = _tools(rng, prose) if rng.random() < 0.6 else None
        for t in range(turns):
            part = rng.choice(_TEXT_KINDS)
            messages.append({"role": "user", "content": text_of(part, rng, size // turns)})
            if body["tools"] and t % 2 == 0:
                name = body["tools"][0]["function"]["name"]
                call_id = f"call_{rng.getrandbits(32):08x}"
                messages.append(
                    {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [
                            {
                                "id": call_id,
                                "type": "function",
                                "function": {
                                    "name": name,
                                    "arguments": json.dumps({"arg_0": rng.choice(prose)[:30]}),
                                },
                            }
                        ],
                    }
                )
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": call_id,
                        "content": text_of(rng.choice(_TEXT_KINDS), rng, size // (2 * turns)),
                    }
                )
            elif t < turns - 1:
                messages.append({"role": "assistant", "content": rng.choice(prose)[:400]})
        if body["tools"] is None:
            del body["tools"]
    else:
        messages.append({"role": "user", "content": text_of(kind, rng, size)})
    body["messages"] = messages
    return body


def corpus(seed: int, n: int, sizes: tuple[int, int] = (40, 6000)) -> Iterator[Sample]:
    """`n` chat requests of every class in turn, text sizes spread log-uniformly in `sizes`
    characters, `max_tokens` from 8 to 256."""
    rng = random.Random(seed)
    low, high = sizes
    for i in range(n):
        kind = CLASSES[i % len(CLASSES)]
        size = int(low * (high / low) ** rng.random())
        body = _chat(rng, kind, size)
        body["max_tokens"] = rng.choice((8, 16, 32, 64, 128, 256))
        yield Sample(kind, body)
