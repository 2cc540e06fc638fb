"""How each kind of sender signs a webhook: one module per scheme, all verified with :mod:`hmac` alone.

``WAKES["WEBHOOKS"][source]["SCHEME"]`` picks one of :data:`SCHEMES`:

| scheme | signature header | signed | delivery id | timestamp (5 min) |
| --- | --- | --- | --- | --- |
| ``wakes`` | ``X-Wakes-Signature: sha256=<hex>`` | ``ts.id.body`` | ``X-Wakes-Delivery`` | ``X-Wakes-Timestamp`` |
| ``standard-webhooks`` | ``webhook-signature: v1,<base64>`` | ``id.ts.body`` | ``webhook-id`` | ``webhook-timestamp`` |
| ``github`` | ``X-Hub-Signature-256: sha256=<hex>`` | ``body`` | ``X-GitHub-Delivery`` + the body's digest | none |
| ``stripe`` | ``Stripe-Signature: t=..,v1=<hex>`` | ``t.body`` | the event's ``id`` | ``t``, past side only |

A scheme only verifies and reads: it never parses more of the body than its delivery id and event
type need, never touches the database, and never puts a secret into a message. Every secret of a
source is compared with every signature the request carries, each with :func:`hmac.compare_digest`,
so a match on the first secret takes as long as a miss (rotation costs one more HMAC, not a timing
hint). The view (:mod:`django_wakes.web.webhooks`) decides the order of refusals.
"""

from __future__ import annotations

from . import github, standard_webhooks, stripe, wakes
from .base import (
    FOREIGN_DELIVERY_ID,
    TOLERANCE,
    UNIX_SECONDS,
    EventMismatch,
    Scheme,
    Unauthorized,
    any_matches,
    check_timestamp,
)

__all__ = [
    "DEFAULT_SCHEME",
    "EventMismatch",
    "FOREIGN_DELIVERY_ID",
    "SCHEMES",
    "TOLERANCE",
    "UNIX_SECONDS",
    "Scheme",
    "Unauthorized",
    "any_matches",
    "check_timestamp",
]

#: The schemes by their ``SCHEME`` name.
SCHEMES: dict[str, Scheme] = {
    scheme.name: scheme for scheme in (wakes.SCHEME, standard_webhooks.SCHEME, github.SCHEME, stripe.SCHEME)
}

DEFAULT_SCHEME = "wakes"
