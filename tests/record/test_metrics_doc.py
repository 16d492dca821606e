"""docs/metrics.md lists every metric the gateway registers."""

from __future__ import annotations

import re
from pathlib import Path

from fleetgate.record.metrics import Metrics

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def test_every_registered_metric_is_documented() -> None:
    documented = set(re.findall(r"^\| `((?:fleetgate|gen_ai)_\w+)`", DOC.read_text(), re.MULTILINE))
    exposed = set()
    for family in Metrics().registry.collect():
        suffix = "_total" if family.type == "counter" else ""
        exposed.add(family.name + suffix)
    assert exposed, "no metrics registered"
    assert exposed <= documented, f"undocumented: {sorted(exposed - documented)}"
