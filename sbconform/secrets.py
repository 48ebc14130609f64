"""Keeping keys out of sight: connection strings from the environment, masked in what is printed.

A connection string carries a secret (``SharedAccessKey=...`` or a ready-made
``SharedAccessSignature=...``). The kit never prints one, never puts one on a command line
(``ps`` shows command lines to every user of the machine): a child process gets it through
the environment variable :data:`ENV`, and everything the kit writes for people (progress,
errors, reports) goes through :func:`mask`.
"""

from __future__ import annotations

import re

#: the environment variable a connection string may come from (and children get it through)
ENV = "SBCONFORM_CONNECTION_STRING"

_SECRET = re.compile(r"(?i)(SharedAccessKey|SharedAccessSignature)\s*=\s*[^;\s\"']*")
# a SAS token's signature, wherever it appears (``sig=...``)
_SIG = re.compile(r"(?i)(\bsig=)[^&\s;\"']*")


def mask(text: str) -> str:
    """``text`` with every key and signature replaced by ``***``."""
    return _SIG.sub(r"\1***", _SECRET.sub(r"\1=***", text))


def mask_value(value, secrets: tuple[str, ...] = ()):
    """``mask`` through a JSON-like value (dicts, lists, strings), also hiding ``secrets`` verbatim."""
    if isinstance(value, str):
        out = mask(value)
        for secret in secrets:
            if secret:
                out = out.replace(secret, "***")
        return out
    if isinstance(value, dict):
        return {k: mask_value(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [mask_value(v, secrets) for v in value]
    return value


def key_of(connection_string: str | None) -> str:
    """The secret part of a connection string (for verbatim masking), or ''."""
    if not connection_string:
        return ""
    found = re.search(r"(?i)(?:SharedAccessKey|SharedAccessSignature)\s*=\s*([^;]*)", connection_string)
    return found[1].strip() if found else ""
