"""The signed event webhook: ``POST events/<source>/`` delivers a sender's events to their watchers.

Opt-in per source in ``WAKES["WEBHOOKS"]``::

    "WEBHOOKS": {
        "ci": {
            "SECRETS": ["s3cr3t-new", "s3cr3t-old"],  # any one may sign: list two while rotating
            "SCHEME": "wakes",                         # or "standard-webhooks", "github", "stripe"
            "WORKSPACE": "acme",                       # optional: every event of this source is acme's
            "MAP": "myapp.hooks.from_ci",              # optional fn(delivery) -> event | [events] | None
            "MAX_BYTES": 65536,                        # optional, default DEFAULT_MAX_BYTES
            "MAX_DELIVERIES": 10000, "PER": "1h",      # optional: at most this many recorded per window
        },
    }

How a scheme signs is in :mod:`django_wakes.web.webhook_schemes` (one module each). Whatever the
scheme, a request is judged in this order, and the first refusal is the answer: an unknown source
404, anything but POST 405, a body over ``MAX_BYTES`` 413, a missing or wrong signature or a stale
timestamp 401 (so a sender using the wrong scheme is told about its signature, not its body), then a
body that is not JSON, a missing or malformed delivery id, an unsigned event name the body contradicts
(GitHub), or an event (or whatever ``MAP`` returned) that is not valid 400, an event for another
workspace than the source's ``WORKSPACE`` 403, and a source past its ``MAX_DELIVERIES`` per ``PER``
429 with ``Retry-After`` (:mod:`.delivery_limits`). Then 200 ``{"accepted": N}``.

A delivery id already accepted is answered 200 ``{"accepted": 0, "duplicate": true}``, with nothing
delivered again (and, for GitHub, whose delivery id is not signed, a body already accepted under any
id): every sender retries what it did not see acknowledged (Stripe for three days, Svix
for a day, GitHub when asked to), and a 4xx would only make it retry again. The id is inserted
(:class:`~django_wakes.models.WebhookDelivery`, unique per source) in the transaction that delivers
the events, so the unique constraint decides between processes racing with one id, and a delivery
that failed leaves no row and can be retried. Secrets are compared with :func:`hmac.compare_digest`,
never logged and never put in a message; logs say the source, the delivery id and the outcome.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponseBase, JsonResponse
from django.utils.module_loading import import_string
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.debug import sensitive_variables

from .. import clock
from ..conf import wakes_settings
from ..engine.shared import db_alias
from ..engine.triggers import deliver_event
from ..exceptions import InvalidWake, WakeError
from ..models import WebhookDelivery
from ..tracing import foreign_caller
from .delivery_limits import DEFAULT_MAX_DELIVERIES, DEFAULT_PER, check_rate, limits
from .json_http import (
    BadRequest,
    json_error,
    method_not_allowed,
    parse_object,
    read_body,
    refusal,
    refuse_unknown_fields,
)
from .webhook_schemes import DEFAULT_SCHEME, SCHEMES, TOLERANCE, EventMismatch, Scheme, Unauthorized
from .webhook_schemes.wakes import DELIVERY_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, sign, signed_text

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DELIVERY_HEADER",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "TOLERANCE",
    "Delivery",
    "Source",
    "event_webhook",
    "get_source",
    "sign",
    "signed_text",
]

logger = logging.getLogger("django_wakes")

#: ``MAX_BYTES`` of a source that sets none.
DEFAULT_MAX_BYTES = 256 * 1024

#: The longest source name (the ``WebhookDelivery.source`` column).
SOURCE_MAX_LENGTH = WebhookDelivery._meta.get_field("source").max_length or 100

#: The keys a source's settings may have.
SOURCE_KEYS = {"SECRETS", "SCHEME", "WORKSPACE", "MAP", "MAX_BYTES", "MAX_DELIVERIES", "PER"}

#: The fields of an event, in the body or returned by ``MAP``.
EVENT_FIELDS = {"workspace_id", "event_key", "payload", "retain"}

#: The most events one delivery may carry (``MAP`` returning a list).
MAX_EVENTS = 100

#: The ``WWW-Authenticate`` challenge of a 401 (RFC 9110 requires one): sign the request, as the source's scheme says.
CHALLENGE = 'Signature realm="django-wakes", header="{header}"'


@dataclass(frozen=True)
class Delivery:
    """A verified request, as ``MAP`` receives it.

    ``body`` is the parsed JSON object; ``id`` the delivery id (``X-Wakes-Delivery``, ``webhook-id``,
    ``X-GitHub-Delivery`` or the Stripe event's ``id``); ``event_type`` the sender's name for the
    event when it has one (GitHub's ``X-GitHub-Event``, the ``type`` of a Stripe or Standard Webhooks
    event); ``headers`` the request's headers (case-insensitive); ``workspace_id`` the source's
    ``WORKSPACE``, if it pins one.
    """

    source: str
    scheme: str
    id: str
    body: dict[str, Any]
    event_type: str | None
    headers: Mapping[str, str] = field(repr=False)
    workspace_id: str | None = None


Mapper = Callable[[Delivery], "Mapping[str, Any] | Sequence[Mapping[str, Any]] | None"]


@dataclass(frozen=True)
class Source:
    """One configured webhook source; its secrets are left out of ``repr()``."""

    name: str
    secrets: tuple[str, ...] = field(repr=False)
    max_bytes: int = DEFAULT_MAX_BYTES
    map: Mapper | None = None
    scheme: Scheme = SCHEMES[DEFAULT_SCHEME]
    workspace_id: str | None = None
    max_deliveries: int = DEFAULT_MAX_DELIVERIES
    per: timedelta = DEFAULT_PER


def get_source(name: str) -> Source | None:
    """Return the webhook source ``name`` from ``WAKES["WEBHOOKS"]``, or ``None`` if it has no secret or scheme."""
    config = wakes_settings.webhooks.get(name)
    if not isinstance(config, Mapping):
        return None
    secrets = tuple(s for s in config.get("SECRETS") or () if isinstance(s, str) and s)
    scheme = SCHEMES.get(config.get("SCHEME") or DEFAULT_SCHEME)
    if not secrets or scheme is None:
        return None
    mapper = config.get("MAP")
    if isinstance(mapper, str):
        mapper = import_string(mapper)
    workspace = config.get("WORKSPACE")
    max_deliveries, per = limits(config)
    return Source(
        name,
        secrets,
        int(config.get("MAX_BYTES") or DEFAULT_MAX_BYTES),
        mapper,
        scheme,
        workspace if isinstance(workspace, str) and workspace else None,
        max_deliveries,
        per,
    )


@sensitive_variables("source")
def verify(source: Source, request: HttpRequest, body: bytes) -> None:
    """Raise a 401 :class:`~.json_http.BadRequest` unless one of the source's secrets signed the request, in time."""
    try:
        source.scheme.verify(source.secrets, request.headers, body, clock.now().timestamp())
    except Unauthorized as exc:
        challenge = CHALLENGE.format(header=source.scheme.signature_header)
        raise BadRequest(401, exc.code, exc.detail, headers={"WWW-Authenticate": challenge}) from None


def read_delivery(source: Source, request: HttpRequest, body: bytes) -> Delivery:
    """Return the verified request as a :class:`Delivery`; raise a 400 for a body not JSON or a bad delivery id."""
    data = parse_object(body)
    delivery_id = source.scheme.delivery_id(request.headers, data)
    if not isinstance(delivery_id, str) or not source.scheme.delivery_id_pattern.fullmatch(delivery_id):
        hint = source.scheme.delivery_id_hint
        raise BadRequest(400, "bad_delivery_id", f"The delivery id is missing or malformed: {hint}.")
    try:
        kind = source.scheme.event_type(request.headers, data)
    except EventMismatch as exc:
        raise BadRequest(
            400, "event_mismatch", f"The body is not what the sender sends for a {str(exc)[:60]!r} event."
        ) from None
    return Delivery(
        source=source.name,
        scheme=source.scheme.name,
        id=delivery_id,
        body=data,
        event_type=kind if isinstance(kind, str) else None,
        headers=request.headers,
        workspace_id=source.workspace_id,
    )


def _from_map(source: Source, problem: str) -> BadRequest:
    """A 400 for what ``MAP`` returned, naming the source (the host's MAP is at fault, not the sender)."""
    return BadRequest(400, "bad_request", f"The MAP of source {source.name!r} returned {problem}.")


def _event(source: Source, given: Any) -> dict[str, Any]:
    """One event of a delivery, its fields checked and its workspace the source's (403 if it names another)."""
    if not isinstance(given, Mapping):
        raise _from_map(source, f"a {type(given).__name__}, not an event (a dict), a list of them or None")
    try:
        data = dict(given)
    except Exception:  # noqa: BLE001 - a Mapping of the host's own that cannot be read is junk like any other
        raise _from_map(source, f"a {type(given).__name__} that cannot be read as a dict") from None
    if not all(isinstance(name, str) for name in data):
        odd = next(type(name).__name__ for name in data if not isinstance(name, str))
        raise _from_map(source, f"an event with a key of type {odd}: event fields are strings")
    refuse_unknown_fields(data, EVENT_FIELDS)
    workspace = data.get("workspace_id")
    if source.workspace_id is not None:
        if workspace is None:
            workspace = source.workspace_id
        elif workspace != source.workspace_id:
            raise BadRequest(403, "wrong_workspace", "This source may deliver events to its own workspace only.")
    event = {"workspace_id": workspace, "event_key": data.get("event_key"), "payload": data.get("payload")}
    if data.get("retain") is not None:
        event["retain"] = data["retain"]
    return event


def events_of(source: Source, delivery: Delivery) -> list[dict[str, Any]]:
    """Return the events a delivery carries: its body, or what ``MAP`` makes of it (``[]`` when it returns None)."""
    given: Any = delivery.body
    if source.map is not None:
        try:
            given = source.map(delivery)
        except (InvalidWake, ValueError, LookupError, TypeError, AttributeError) as exc:
            logger.warning("webhook source=%s MAP refused the body: %s", source.name, type(exc).__name__)
            raise BadRequest(400, "bad_request", "The body is not an event this source maps.") from None
        if given is None:
            return []
    many = isinstance(given, list | tuple)
    if many and len(given) > MAX_EVENTS:
        raise _from_map(source, f"{len(given)} events; at most {MAX_EVENTS}")
    return [_event(source, item) for item in (given if many else [given])]


class Duplicate(Exception):
    """The delivery id was accepted before: nothing was delivered this time."""


def accept(source: Source, delivery_id: str, events: Sequence[dict[str, Any]], body: bytes) -> int:
    """Record the delivery and deliver its events in one transaction; return how many watchers accepted.

    Raise :class:`Duplicate` if the delivery id was accepted before, or (a scheme whose delivery id is
    not signed) the very same body: the unique constraints decide, even between processes racing. A
    source past its rate is a 429 and an event that is not valid a 400 :class:`~.json_http.BadRequest`;
    none of these leaves a row behind.
    """
    using = db_alias()  # the wakes' database: the delivery row commits or rolls back with the events
    check_rate(source.name, using, source.max_deliveries, source.per)
    digest = hashlib.sha256(body).hexdigest() if source.scheme.signs_body_only else None
    try:
        with transaction.atomic(using=using):
            WebhookDelivery.objects.using(using).create(
                source=source.name, delivery_id=delivery_id, body_digest=digest, received_at=clock.now()
            )
            return sum(deliver_event(**event) for event in events)
    except IntegrityError:
        raise Duplicate(delivery_id) from None
    except WakeError as exc:  # the package's validation (InvalidWake, InvalidIntent): nothing was written
        if source.map is not None:
            raise _from_map(source, f"an event that is not valid: {exc}") from None
        raise BadRequest(400, "bad_request", str(exc)) from None


@csrf_exempt  # authenticated by its signature, not by a session
@never_cache
def event_webhook(request: HttpRequest, source: str) -> HttpResponseBase:
    """Deliver the events of a signed request from a configured source; answer in JSON (see the module)."""
    config = get_source(source)
    if config is None:
        return json_error(404, "not_found", "Not found.")
    if request.method != "POST":
        return method_not_allowed()
    delivery_id = "-"
    try:
        body = read_body(request, config.max_bytes)
        verify(config, request, body)
        delivery = read_delivery(config, request, body)
        delivery_id = delivery.id
        with foreign_caller():  # a wake MAP creates links to the sender's trace, never continues it
            accepted = accept(config, delivery_id, events_of(config, delivery), body)
    except BadRequest as exc:
        logger.warning("webhook source=%s delivery=%s outcome=%s", config.name, delivery_id, exc.code)
        return refusal(exc)
    except Duplicate:
        logger.info("webhook source=%s delivery=%s outcome=duplicate", config.name, delivery_id)
        return JsonResponse({"accepted": 0, "duplicate": True})
    logger.info("webhook source=%s delivery=%s outcome=accepted watchers=%s", config.name, delivery_id, accepted)
    return JsonResponse({"accepted": accepted})
