"""Stripe's webhooks: ``Stripe-Signature: t=<unix seconds>,v1=<hex>[,v1=<hex>...]`` over ``t.body``.

As Stripe documents it ("Verify webhook signatures with your own code") and its libraries check it:
the HMAC-SHA256 of ``f"{t}."`` and the raw body, keyed with the endpoint's signing secret as it is
shown (``whsec_...``, used as its UTF-8 text, not decoded), in hex. While Stripe rolls a secret it
sends one ``v1`` per active secret; any that matches will do (``v0``, test-mode only, is ignored).
``t`` may be at most 5 minutes old by the server's clock; a ``t`` ahead of it is accepted, as Stripe's
own ``construct_event`` accepts it (it checks the past side only), so a receiver whose clock lags
Stripe's does not refuse every delivery. The delivery id is the event's ``id``
(``evt_...``: the same when Stripe retries it) and the event type its ``type``.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping, Sequence
from typing import Any

from django.views.decorators.debug import sensitive_variables

from .base import UNIX_SECONDS, Scheme, Unauthorized, any_matches, check_timestamp

SIGNATURE_HEADER = "Stripe-Signature"

_HEX_SIGNATURE = re.compile(r"[0-9a-fA-F]{64}")


def _parse(header: str) -> tuple[int | None, list[bytes]]:
    """The timestamp and the ``v1`` signatures of a ``Stripe-Signature`` header (``None`` and ``[]`` if absent)."""
    timestamp = None
    signatures = []
    for item in header.split(","):
        name, _, value = item.strip().partition("=")
        if name == "t" and UNIX_SECONDS.fullmatch(value):
            timestamp = int(value)
        elif name == "v1" and _HEX_SIGNATURE.fullmatch(value):
            signatures.append(value.lower().encode())
    return timestamp, signatures


@sensitive_variables("secrets", "secret")
def verify(secrets: Sequence[str], headers: Mapping[str, str], body: bytes, now: float) -> None:
    """Raise :class:`Unauthorized` unless one of ``secrets`` signed ``t`` and the body, and ``t`` is in time."""
    timestamp, given = _parse(headers.get(SIGNATURE_HEADER, ""))
    if timestamp is None or not given:
        raise Unauthorized("unauthorized", f"Send {SIGNATURE_HEADER}: t=<unix seconds>,v1=<hex HMAC-SHA256>.")
    text = f"{timestamp}.".encode() + body
    expected = [hmac.new(secret.encode(), text, hashlib.sha256).hexdigest().encode() for secret in secrets]
    if not any_matches(expected, given):
        raise Unauthorized("bad_signature", "No signature matches.")
    check_timestamp(timestamp, now, f"{SIGNATURE_HEADER} t", future=False)


def delivery_id(headers: Mapping[str, str], body: dict[str, Any]) -> Any:
    return body.get("id")


def event_type(headers: Mapping[str, str], body: dict[str, Any]) -> str | None:
    kind = body.get("type")
    return kind if isinstance(kind, str) else None


SCHEME = Scheme(
    name="stripe",
    signature_header=SIGNATURE_HEADER,
    verify=verify,
    delivery_id=delivery_id,
    event_type=event_type,
    delivery_id_hint="the event's id must be a string",
    needs_map=True,
)
