"""The package's own scheme (the default): ``X-Wakes-Signature: sha256=<hex>`` over ``timestamp.delivery_id.body``.

For a sender you write yourself (a CI step, a script, another service of yours)::

    X-Wakes-Timestamp: 1767225600                  # unix seconds, within 5 minutes of the server's clock
    X-Wakes-Delivery: 5f0c6a2e-...                 # unique per delivery: letters, digits, "_", "-", ":"
    X-Wakes-Signature: sha256=<hex HMAC-SHA256(secret, f"{timestamp}.{delivery_id}.".encode() + body)>

The delivery id is signed with the timestamp and the body, so a captured request cannot be replayed
under a fresh id; the secret is used as its UTF-8 bytes.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping, Sequence
from typing import Any

from django.views.decorators.debug import sensitive_variables

from ...models import KEY_LENGTH
from .base import UNIX_SECONDS, Scheme, Unauthorized, any_matches, check_timestamp

TIMESTAMP_HEADER = "X-Wakes-Timestamp"
DELIVERY_HEADER = "X-Wakes-Delivery"
SIGNATURE_HEADER = "X-Wakes-Signature"

#: A delivery id: no "." (the separator of the signed text), nothing a log line or a column would mangle.
DELIVERY_ID = re.compile(rf"[A-Za-z0-9_:-]{{1,{KEY_LENGTH}}}")
_SIGNATURE = re.compile(r"sha256=([0-9a-fA-F]{64})")


def signed_text(timestamp: str, delivery_id: str, body: bytes) -> bytes:
    """Return what a signature signs: ``f"{timestamp}.{delivery_id}.".encode() + body``."""
    return f"{timestamp}.{delivery_id}.".encode() + body


@sensitive_variables("secret")
def sign(secret: str, timestamp: str, delivery_id: str, body: bytes) -> str:
    """Return the ``X-Wakes-Signature`` value for a request (what a sender written in Python computes)."""
    digest = hmac.new(secret.encode(), signed_text(timestamp, delivery_id, body), hashlib.sha256).hexdigest()
    return f"sha256={digest}"


@sensitive_variables("secrets", "secret")
def verify(secrets: Sequence[str], headers: Mapping[str, str], body: bytes, now: float) -> None:
    """Raise :class:`Unauthorized` unless one of ``secrets`` signed this timestamp, delivery id and body, in time.

    The delivery id is signed whatever it is; whether it is a well-formed id is judged after (a 400).
    """
    timestamp = headers.get(TIMESTAMP_HEADER, "")
    given = _SIGNATURE.fullmatch(headers.get(SIGNATURE_HEADER, ""))
    if not UNIX_SECONDS.fullmatch(timestamp) or given is None:
        raise Unauthorized(
            "unauthorized",
            f"Send {TIMESTAMP_HEADER} (unix seconds), {DELIVERY_HEADER} and {SIGNATURE_HEADER}: sha256=<hex HMAC>.",
        )
    text = signed_text(timestamp, headers.get(DELIVERY_HEADER, ""), body)
    expected = [hmac.new(secret.encode(), text, hashlib.sha256).hexdigest().encode() for secret in secrets]
    if not any_matches(expected, [given.group(1).lower().encode()]):
        raise Unauthorized("bad_signature", "The signature does not match.")
    check_timestamp(int(timestamp), now, TIMESTAMP_HEADER)


def delivery_id(headers: Mapping[str, str], body: dict[str, Any]) -> str:
    return headers.get(DELIVERY_HEADER, "")


def event_type(headers: Mapping[str, str], body: dict[str, Any]) -> None:
    return None


SCHEME = Scheme(
    name="wakes",
    signature_header=SIGNATURE_HEADER,
    verify=verify,
    delivery_id=delivery_id,
    event_type=event_type,
    delivery_id_pattern=DELIVERY_ID,
    delivery_id_hint=f"{DELIVERY_HEADER} must be 1 to {KEY_LENGTH} letters, digits, '_', '-' or ':'",
)
