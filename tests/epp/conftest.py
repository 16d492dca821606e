from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.epp.stack import EppStack
from tests.harness import Stack


@pytest.fixture
def epp(stack: Stack, tmp_path: Path) -> Iterator[EppStack]:
    s = EppStack(stack, tmp_path)
    yield s
    s.close()
