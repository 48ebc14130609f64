"""Shared access signatures, as Service Bus checks them at CBS put-token.

A token is ``SharedAccessSignature sr=<url-encoded audience>&sig=<url-encoded base64
HMAC-SHA256 of "<sr>\\n<se>">&se=<expiry, epoch seconds>&skn=<key name>``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from urllib.parse import quote_plus, unquote_plus


class TokenError(ValueError):
    pass


def make_token(audience: str, key_name: str, key: str, expiry: int | None = None) -> str:
    """A token as the SDKs build it (used by the control client and the tests)."""
    se = int(time.time() + 3600) if expiry is None else expiry
    sr = quote_plus(audience)
    sig = base64.b64encode(hmac.new(key.encode(), f"{sr}\n{se}".encode(), hashlib.sha256).digest()).decode()
    return f"SharedAccessSignature sr={sr}&sig={quote_plus(sig)}&se={se}&skn={key_name}"


def normalise(uri: str) -> str:
    """'sb://Host:5672/Q/' -> 'host:5672/q' (scheme dropped, lower case, no trailing slash)."""
    uri = uri.strip().lower()
    if "://" in uri:
        uri = uri.split("://", 1)[1]
    return uri.rstrip("/")


#: Names a loopback client may give this endpoint: any of them is the same namespace.
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})  # (IPv6 without its brackets, as urlparse gives it)


def names_this_namespace(audience_host: str | None, opened_to: str | None) -> bool:
    """Whether a token's host names the namespace the connection reached.

    Service Bus takes a token only for its own namespace: a token signed with the right key
    for ``sb://othernamespace.servicebus.windows.net/q`` authorizes nothing here. The
    endpoint is known by the host the client opened its connection to (the AMQP open's
    hostname, which the SDKs set to the namespace's host); loopback names are one name. A
    name without a host (``q``, ``None`` here) is this namespace's entity; an empty host
    (``sb:///q``) names none."""
    if audience_host is None:
        return True
    host = audience_host.lower()
    opened = (opened_to or "").lower()
    if opened.startswith("[") and "]" in opened:  # [IPv6]:port
        opened = opened[1:opened.index("]")]
    elif opened.count(":") == 1:  # host:port (a bare IPv6 address has more colons)
        opened = opened.split(":")[0]
    if host == opened:
        return True
    return host in LOOPBACK_NAMES and (not opened or opened in LOOPBACK_NAMES)


def check_token(token: str, name: str, keys: dict[str, str], now: float | None = None) -> str:
    """Validate a put-token; returns the audience it grants (normalised) or raises TokenError."""
    return check_grant(token, name, keys, now)[0]


def check_grant(token: str, name: str, keys: dict[str, str], now: float | None = None) -> tuple[str, int]:
    """Validate a put-token; (the audience it grants, normalised; its expiry, epoch seconds).
    Service Bus detaches the links a token authorised when it expires: the server keeps the expiry."""
    if not isinstance(token, str) or not token.startswith("SharedAccessSignature "):
        raise TokenError("the token is not a shared access signature")
    fields: dict[str, str] = {}
    for part in token[len("SharedAccessSignature "):].split("&"):
        key, sep, value = part.partition("=")
        if not sep:
            raise TokenError(f"malformed token field {part[:40]!r}")
        fields[key.strip()] = value.strip()
    missing = [f for f in ("sr", "sig", "se", "skn") if f not in fields]
    if missing:
        raise TokenError(f"the token lacks {', '.join(missing)}")
    key_name = fields["skn"]
    if key_name not in keys:
        raise TokenError(f"unknown shared access key name {key_name!r}")
    try:
        expiry = int(fields["se"])
    except ValueError:
        raise TokenError(f"malformed expiry {fields['se'][:20]!r}") from None
    expected = base64.b64encode(
        hmac.new(keys[key_name].encode(), f"{fields['sr']}\n{fields['se']}".encode(), hashlib.sha256).digest()
    ).decode()
    if not hmac.compare_digest(expected, unquote_plus(fields["sig"])):
        raise TokenError("invalid signature: the token was not signed with the configured key")
    if expiry <= (time.time() if now is None else now):
        raise TokenError("the token has expired")
    audience = normalise(unquote_plus(fields["sr"]))
    target = normalise(name)
    if not (target == audience or target.startswith(audience + "/")):
        raise TokenError(f"the token's audience {audience!r} does not cover {target!r}")
    return audience, expiry
