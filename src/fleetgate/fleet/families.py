"""Which tokenizer family a model name suggests: part of the fleet model, since a
deployment's family is fixed when the fleet is built (`context/families.py` holds what each
family costs)."""

from __future__ import annotations

import re

_INFER = (
    (re.compile(r"qwen|qwq", re.IGNORECASE), "qwen2"),
    (re.compile(r"llama[-_ ]?3", re.IGNORECASE), "llama3"),
    (re.compile(r"gpt-?4o|gpt-?4\.1|gpt-?5|gpt-oss|(^|/)o[134](-|$)", re.IGNORECASE), "o200k"),
)


def infer_family(model_name: str) -> str:
    """The family a model name suggests; `generic` when it suggests none."""
    for pattern, name in _INFER:
        if pattern.search(model_name):
            return name
    return "generic"
