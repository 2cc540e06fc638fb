"""What every scheme shares: the :class:`Scheme` record, the 401 it raises, constant-time matching, the tolerance."""

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


class EventMismatch(Exception):
    """The body is not what the sender sends for the event an unsigned header names (answered 400)."""


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
    body parsed), returning ``None`` when it has none (``event_type`` raises :class:`EventMismatch`
    when the body contradicts an unsigned event name); ``secret_problem(secret)`` says why a
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
    #: The delivery id is not signed (GitHub): a replay is recognised by the body's digest instead.
    signs_body_only: bool = False


def any_matches(expected: Sequence[bytes], given: Sequence[bytes]) -> bool:
    """Whether any ``given`` signature equals any ``expected`` one, comparing every pair in constant time."""
    matched = False
    for mine in expected:
        for theirs in given:
            matched |= hmac.compare_digest(mine, theirs)
    return matched


def check_timestamp(timestamp: int, now: float, header: str, *, future: bool = True) -> None:
    """Raise :class:`Unauthorized` if ``timestamp`` is more than :data:`TOLERANCE` before ``now`` (or after
    it, unless ``future`` is false: Stripe's own libraries check the past side only)."""
    late = now - timestamp > TOLERANCE.total_seconds()
    early = future and timestamp - now > TOLERANCE.total_seconds()
    if late or early:
        raise Unauthorized(
            "stale_timestamp", f"{header} is more than {TOLERANCE.seconds} seconds from the server's clock."
        )
