"""GitHub's webhooks: ``X-Hub-Signature-256: sha256=<hex HMAC-SHA256(secret, body)>``.

As GitHub documents it ("Validating webhook deliveries"): the HMAC-SHA256 of the raw body, keyed with
the webhook's secret as UTF-8, in hex after ``sha256=``; the legacy SHA-1 ``X-Hub-Signature`` is
ignored. ``X-GitHub-Delivery`` (a GUID, the same when a delivery is redelivered) is the delivery id
and ``X-GitHub-Event`` the event name (``check_suite``, ``push``, ``ping``...).

GitHub signs the body alone: no timestamp, and neither ``X-GitHub-Delivery`` nor ``X-GitHub-Event``.
A captured request therefore stays valid, and can be sent again under a fresh delivery id or another
event name. So what recognises a replay is what is signed: the SHA-256 of the body, remembered (per
source, unique) with the delivery id for as long as gc keeps delivery ids (30 days): the same body
under any delivery id is a duplicate. The event name is believed only as the body confirms it
(:mod:`.github_events`). After gc forgets a body, a replay verifies again: use HTTPS, and a watcher
key that names one commit or object, so that it can at most fire a watcher for that very same event.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping, Sequence
from typing import Any

from django.views.decorators.debug import sensitive_variables

from .base import Scheme, Unauthorized, any_matches
from .github_events import confirmed

SIGNATURE_HEADER = "X-Hub-Signature-256"
DELIVERY_HEADER = "X-GitHub-Delivery"
EVENT_HEADER = "X-GitHub-Event"

_SIGNATURE = re.compile(r"sha256=([0-9a-fA-F]{64})")


@sensitive_variables("secret")
def sign(secret: str, body: bytes) -> str:
    """Return the ``X-Hub-Signature-256`` value GitHub sends for ``body``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


@sensitive_variables("secrets", "secret")
def verify(secrets: Sequence[str], headers: Mapping[str, str], body: bytes, now: float) -> None:
    """Raise :class:`Unauthorized` unless one of ``secrets`` signed the body (there is no timestamp to check)."""
    given = _SIGNATURE.fullmatch(headers.get(SIGNATURE_HEADER, ""))
    if given is None:
        raise Unauthorized("unauthorized", f"Send {SIGNATURE_HEADER}: sha256=<hex HMAC-SHA256 of the body>.")
    expected = [hmac.new(secret.encode(), body, hashlib.sha256).hexdigest().encode() for secret in secrets]
    if not any_matches(expected, [given.group(1).lower().encode()]):
        raise Unauthorized("bad_signature", "The signature does not match.")


def delivery_id(headers: Mapping[str, str], body: dict[str, Any]) -> str:
    return headers.get(DELIVERY_HEADER, "")


def event_type(headers: Mapping[str, str], body: dict[str, Any]) -> str | None:
    """``X-GitHub-Event`` as the body confirms it (``None`` if it cannot; :class:`.EventMismatch` if it contradicts)."""
    return confirmed(headers.get(EVENT_HEADER) or None, body)


SCHEME = Scheme(
    name="github",
    signature_header=SIGNATURE_HEADER,
    verify=verify,
    delivery_id=delivery_id,
    event_type=event_type,
    delivery_id_hint=f"{DELIVERY_HEADER} must be present",
    needs_map=True,
    signs_body_only=True,
)
