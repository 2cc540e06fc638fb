"""Standard Webhooks (standardwebhooks.com; Svix and the platforms built on it): ``webhook-*`` headers.

As the specification and its reference library (``standardwebhooks`` on PyPI) verify it::

    webhook-id: msg_2KWPBgLlAfxdpx2AI54pPJ85f4W          # the delivery id: the same when a message is resent
    webhook-timestamp: 1767225600                        # unix seconds, within 5 minutes either way
    webhook-signature: v1,<base64 HMAC-SHA256(key, f"{id}.{timestamp}.".encode() + body)> [v1,<...> ...]

The secret is ``whsec_`` followed by the base64 of the key (the prefix is optional; the key is the
decoded bytes, not the text). The header may hold several space-separated signatures (the sender
signs with each of its secrets while it rotates them); any ``v1`` one that matches will do, and the
other versions (``v1a``, asymmetric) are ignored. The event type, when the body follows the
specification's ``{"type", "timestamp", "data"}`` shape, is its ``type``. Svix sends the same three
values as ``svix-id``, ``svix-timestamp`` and ``svix-signature``; those are read when the ``webhook-*``
ones are absent, as Svix's own libraries do.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping, Sequence
from typing import Any

from django.views.decorators.debug import sensitive_variables

from .base import UNIX_SECONDS, Scheme, Unauthorized, any_matches, check_timestamp

ID_HEADER = "webhook-id"
TIMESTAMP_HEADER = "webhook-timestamp"
SIGNATURE_HEADER = "webhook-signature"
#: Svix's names for the same headers, read when a ``webhook-*`` one is absent.
SVIX_HEADERS = {ID_HEADER: "svix-id", TIMESTAMP_HEADER: "svix-timestamp", SIGNATURE_HEADER: "svix-signature"}
SECRET_PREFIX = "whsec_"  # noqa: S105  # the prefix, not a secret


@sensitive_variables("secret", "encoded")
def secret_key(secret: str) -> bytes:
    """Return the HMAC key of a ``whsec_<base64>`` secret (prefix optional); raise ``ValueError`` if it is not one."""
    encoded = secret.removeprefix(SECRET_PREFIX)
    try:
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except binascii.Error:
        raise ValueError("not base64") from None
    if not key:
        raise ValueError("empty")
    return key


@sensitive_variables("secret")
def secret_problem(secret: str) -> str | None:
    try:
        secret_key(secret)
    except ValueError:
        return "must be 'whsec_' followed by the base64 of the key, as the sender shows it"
    return None


def header(headers: Mapping[str, str], name: str) -> str:
    """The ``webhook-*`` header ``name``, or its ``svix-*`` twin when it is absent (``""`` if neither is there)."""
    return headers.get(name) or headers.get(SVIX_HEADERS[name]) or ""


def signed_text(message_id: str, timestamp: int, body: bytes) -> bytes:
    return f"{message_id}.{timestamp}.".encode() + body


def _signatures(header: str) -> list[bytes]:
    """The decoded ``v1`` signatures of a ``webhook-signature`` header (others, and undecodable ones, left out)."""
    found = []
    for entry in header.split():
        version, _, encoded = entry.partition(",")
        if version != "v1" or not encoded:
            continue
        try:
            found.append(base64.b64decode(encoded, validate=True))
        except binascii.Error:
            continue
    return found


@sensitive_variables("secrets", "keys")
def verify(secrets: Sequence[str], headers: Mapping[str, str], body: bytes, now: float) -> None:
    """Raise :class:`Unauthorized` unless one of ``secrets`` signed this message id, timestamp and body, in time."""
    timestamp = header(headers, TIMESTAMP_HEADER)
    given = _signatures(header(headers, SIGNATURE_HEADER))
    if not UNIX_SECONDS.fullmatch(timestamp) or not given:
        raise Unauthorized(
            "unauthorized",
            f"Send {ID_HEADER}, {TIMESTAMP_HEADER} (unix seconds) and {SIGNATURE_HEADER}: v1,<base64 HMAC-SHA256>.",
        )
    text = signed_text(header(headers, ID_HEADER), int(timestamp), body)
    keys = []
    for secret in secrets:
        try:
            keys.append(secret_key(secret))
        except ValueError:
            continue  # the system check (E008) names it; it signs nothing meanwhile
    if not any_matches([hmac.new(key, text, hashlib.sha256).digest() for key in keys], given):
        raise Unauthorized("bad_signature", "No signature matches.")
    check_timestamp(int(timestamp), now, TIMESTAMP_HEADER)


def delivery_id(headers: Mapping[str, str], body: dict[str, Any]) -> str:
    return header(headers, ID_HEADER)


def event_type(headers: Mapping[str, str], body: dict[str, Any]) -> str | None:
    kind = body.get("type")
    return kind if isinstance(kind, str) else None


SCHEME = Scheme(
    name="standard-webhooks",
    signature_header=SIGNATURE_HEADER,
    verify=verify,
    delivery_id=delivery_id,
    event_type=event_type,
    delivery_id_hint=f"{ID_HEADER} must be present",
    secret_problem=secret_problem,
)
