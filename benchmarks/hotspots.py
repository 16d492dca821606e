"""Summarise a `py-spy record --format raw` profile (as PROFILE=1 writes them): where CPU goes.

Run: `python3 -m benchmarks.hotspots benchmarks/results/STAMP-profile-c64-0.txt [TOP]`.

Prints the share of samples by package, the functions and lines that were on CPU themselves
(self time), and fleetgate functions with everything they called (inclusive; a lower bound,
since py-spy sees a coroutine resumed by the event loop without the frames that awaited it).
A sample on an `await` line is the cost of passing a resume through that coroutine layer.
"""

from __future__ import annotations

import re
import sys
from collections import Counter

_FRAME = re.compile(r"^(?P<func>.*) \((?P<path>.*?):(?P<line>\d+)\)$")
_PREFIX = re.compile(r"^.*/(site-packages|src|lib/python3\.\d+)/")


def _parse(frame: str) -> tuple[str, str, str]:
    m = _FRAME.match(frame.strip())
    if m is None:
        return frame.strip() or "?", "?", "0"
    return m["func"], _PREFIX.sub("", m["path"]), m["line"]


def summarise(path: str, top: int = 20) -> str:
    total = 0
    by_package: Counter[str] = Counter()
    by_func: Counter[str] = Counter()
    by_line: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    with open(path, encoding="utf-8", errors="replace") as f:
        for row in f:
            stack, _, count = row.rstrip("\n").rpartition(" ")
            if not count.isdigit():
                continue
            n = int(count)
            total += n
            frames = [_parse(fr) for fr in stack.split(";")]
            func, file, line = frames[-1]
            by_package[file.split("/")[0]] += n
            by_func[f"{file}:{func}"] += n
            by_line[f"{file}:{line} {func}"] += n
            for key in {f"{fl}:{fn}" for fn, fl, _ in frames if fl.startswith("fleetgate/")}:
                inclusive[key] += n
    if not total:
        return f"{path}: no samples\n"

    def block(title: str, counter: Counter[str]) -> list[str]:
        rows = [f"{100 * n / total:5.1f}%  {key}" for key, n in counter.most_common(top)]
        return [f"-- {title}", *rows, ""]

    out = [f"{path}: {total} samples", ""]
    out += block("self time by package", by_package)
    out += block("self time by function", by_func)
    out += block("self time by line", by_line)
    out += block("fleetgate functions, inclusive (lower bound)", inclusive)
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    top = int(args[1]) if len(args) > 1 else 20
    print(summarise(args[0], top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
