"""How each kind of sender signs a webhook: one module per scheme, all verified with :mod:`hmac` alone.

``WAKES["WEBHOOKS"][source]["SCHEME"]`` picks one of :data:`SCHEMES`:

| scheme | signature header | signed | delivery id | timestamp (5 min) |
| --- | --- | --- | --- | --- |
| ``wakes`` | ``X-Wakes-Signature: sha256=<hex>`` | ``ts.id.body`` | ``X-Wakes-Delivery`` | ``X-Wakes-Timestamp`` |
| ``standard-webhooks`` | ``webhook-signature: v1,<base64>`` | ``id.ts.body`` | ``webhook-id`` | ``webhook-timestamp`` |
| ``github`` | ``X-Hub-Signature-256: sha256=<hex>`` | ``body`` | ``X-GitHub-Delivery`` | none: the id alone |
| ``stripe`` | ``Stripe-Signature: t=..,v1=<hex>`` | ``t.body`` | the event's ``id`` | ``t`` |

A scheme only verifies and reads: it never parses more of the body than its delivery id and event
type need, never touches the database, and never puts a secret into a message. Every secret of a
source is compared with every signature the request carries, each with :func:`hmac.compare_digest`,
so a match on the first secret takes as long as a miss (rotation costs one more HMAC, not a timing
hint). The view (:mod:`django_wakes.web.webhooks`) decides the order of refusals.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...events import WEBHOOK_TOLERANCE
from ...models import KEY_LENGTH

#: How far a signed timestamp may be from the server's clock, either way (every scheme that has one).
TOLERANCE = WEBHOOK_TOLERANCE

#: A delivery id chosen by another system: printable ASCII without spaces (a UUID, ``msg_2Kc...``,
#: ``evt_1Nx...``), short enough for the ``WebhookDelivery`` column; nothing a log line would mangle.
FOREIGN_DELIVERY_ID = re.compile(rf"[\x21-\x7e]{{1,{KEY_LENGTH}}}")

#: A unix timestamp in whole seconds, as every scheme here sends it.
UNIX_SECONDS = re.compile(r"[0-9]{1,12}")


class Unauthorized(Exception):
    """A request to answer 401: no signature, a wrong one, or a timestamp out of tolerance."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code, self.detail = code, detail


@dataclass(frozen=True)
class Scheme:
    """One sender's way of signing: how to verify a request, and where its delivery id and event type are.

    ``verify(secrets, headers, body, now)`` returns nothing or raises :class:`Unauthorized`;
    ``delivery_id(headers, body)`` and ``event_type(headers, body)`` read the verified request (the
    body parsed), returning ``None`` when it has none; ``secret_problem(secret)`` says why a
    configured secret cannot work with this scheme (for the system check), or ``None``.
    """

    name: str
    signature_header: str
    verify: Callable[[Sequence[str], Mapping[str, str], bytes, float], None]
    delivery_id: Callable[[Mapping[str, str], dict[str, Any]], Any]
    event_type: Callable[[Mapping[str, str], dict[str, Any]], Any]
    delivery_id_pattern: re.Pattern[str] = FOREIGN_DELIVERY_ID
    delivery_id_hint: str = f"1 to {KEY_LENGTH} printable ASCII characters without spaces"
    secret_problem: Callable[[str], str | None] = lambda secret: None
    needs_map: bool = False


def any_matches(expected: Sequence[bytes], given: Sequence[bytes]) -> bool:
    """Whether any ``given`` signature equals any ``expected`` one, comparing every pair in constant time."""
    matched = False
    for mine in expected:
        for theirs in given:
            matched |= hmac.compare_digest(mine, theirs)
    return matched


def check_timestamp(timestamp: int, now: float, header: str) -> None:
    """Raise :class:`Unauthorized` if ``timestamp`` is more than :data:`TOLERANCE` from ``now``, either way."""
    if abs(now - timestamp) > TOLERANCE.total_seconds():
        raise Unauthorized(
            "stale_timestamp", f"{header} is more than {TOLERANCE.seconds} seconds from the server's clock."
        )


def _registry() -> dict[str, Scheme]:
    from . import github, standard_webhooks, stripe, wakes

    return {scheme.name: scheme for scheme in (wakes.SCHEME, standard_webhooks.SCHEME, github.SCHEME, stripe.SCHEME)}


#: The schemes by their ``SCHEME`` name.
SCHEMES: dict[str, Scheme] = _registry()

DEFAULT_SCHEME = "wakes"
