"""Translators between client protocols and the protocols deployments speak natively.

One module per protocol pair (`anthropic_chat`, `responses_chat`, `ollama_chat`), each
with request, response and stream translators; `registry` picks, per candidate, native
pass-through or a translation.
"""
