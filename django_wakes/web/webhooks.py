"""The signed event webhook: ``POST events/<source>/`` delivers an event to its watchers.

Opt-in per source in ``WAKES["WEBHOOKS"]``::

    "WEBHOOKS": {
        "ci": {
            "SECRETS": ["s3cr3t-new", "s3cr3t-old"],  # any one may sign: list two while rotating
            "MAX_BYTES": 65536,                        # optional, default DEFAULT_MAX_BYTES
            "MAP": "myapp.hooks.from_ci",              # optional fn(payload_dict, request) -> event
        },
    }

A request carries three headers and a JSON body ``{"workspace_id", "event_key", "payload"}``::

    X-Wakes-Timestamp: 1767225600                  # unix seconds, within TOLERANCE of the server's clock
    X-Wakes-Delivery: 5f0c6a2e-...                 # unique per delivery: letters, digits, "_", "-", ":"
    X-Wakes-Signature: sha256=<hex HMAC-SHA256(secret, f"{timestamp}.{delivery_id}.".encode() + body)>

The delivery id is signed with the timestamp and the body, so a captured request cannot be replayed
under a fresh id. The view answers in JSON: 200 ``{"accepted": N}``, 400 a bad body or delivery id,
401 a missing or wrong signature or a timestamp outside the tolerance, 404 an unknown source, 405 not
POST, 409 a delivery id already accepted, 413 a body over ``MAX_BYTES``.

The accepted delivery id is inserted (:class:`~django_wakes.models.WebhookDelivery`, unique per
source) in the transaction that delivers the event: the unique constraint refuses a replay in any
process, and a delivery that failed leaves no row, so the sender can retry it. Secrets are compared
with :func:`hmac.compare_digest`, never logged and never put in a message; logs say the source, the
delivery id and the outcome.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
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
from ..events import WEBHOOK_TOLERANCE
from ..exceptions import InvalidWake, WakeError
from ..models import KEY_LENGTH, WebhookDelivery
from .json_http import (
    BadRequest,
    json_error,
    method_not_allowed,
    parse_object,
    read_body,
    refusal,
    refuse_unknown_fields,
)

logger = logging.getLogger("django_wakes")

TIMESTAMP_HEADER = "X-Wakes-Timestamp"
DELIVERY_HEADER = "X-Wakes-Delivery"
SIGNATURE_HEADER = "X-Wakes-Signature"

#: How far ``X-Wakes-Timestamp`` may be from the server's clock, either way.
TOLERANCE = WEBHOOK_TOLERANCE

#: ``MAX_BYTES`` of a source that sets none.
DEFAULT_MAX_BYTES = 256 * 1024

#: The longest source name (the ``WebhookDelivery.source`` column).
SOURCE_MAX_LENGTH = WebhookDelivery._meta.get_field("source").max_length or 100

#: The keys a source's settings may have.
SOURCE_KEYS = {"SECRETS", "MAX_BYTES", "MAP"}

#: The fields of an event, in the body or returned by ``MAP``.
EVENT_FIELDS = {"workspace_id", "event_key", "payload"}

#: A delivery id: no "." (the separator of the signed text), nothing a log line or a column would mangle.
_DELIVERY_ID = re.compile(rf"[A-Za-z0-9_:-]{{1,{KEY_LENGTH}}}")
_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_SIGNATURE = re.compile(r"sha256=([0-9a-fA-F]{64})")


@dataclass(frozen=True)
class Source:
    """One configured webhook source; its secrets are left out of ``repr()``."""

    name: str
    secrets: tuple[str, ...] = field(repr=False)
    max_bytes: int = DEFAULT_MAX_BYTES
    map: Callable[[dict[str, Any], HttpRequest], Mapping[str, Any] | None] | None = None


def get_source(name: str) -> Source | None:
    """Return the webhook source ``name`` from ``WAKES["WEBHOOKS"]``, or ``None`` if it has no secret."""
    config = wakes_settings.webhooks.get(name)
    if not isinstance(config, Mapping):
        return None
    secrets = tuple(s for s in config.get("SECRETS") or () if isinstance(s, str) and s)
    if not secrets:
        return None
    mapper = config.get("MAP")
    if isinstance(mapper, str):
        mapper = import_string(mapper)
    return Source(name, secrets, int(config.get("MAX_BYTES") or DEFAULT_MAX_BYTES), mapper)


def signed_text(timestamp: str, delivery_id: str, body: bytes) -> bytes:
    """Return what a signature signs: ``f"{timestamp}.{delivery_id}.".encode() + body``."""
    return f"{timestamp}.{delivery_id}.".encode() + body


@sensitive_variables("secret")
def sign(secret: str, timestamp: str, delivery_id: str, body: bytes) -> str:
    """Return the ``X-Wakes-Signature`` value for a request (what a sender written in Python computes)."""
    digest = hmac.new(secret.encode(), signed_text(timestamp, delivery_id, body), hashlib.sha256).hexdigest()
    return f"sha256={digest}"


@sensitive_variables("source", "secret")
def verify(source: Source, request: HttpRequest, body: bytes) -> str:
    """Return the request's delivery id if it is signed by one of the source's secrets, in time; else raise.

    Raise :class:`~django_wakes.web.approval_api.BadRequest`: 400 for a missing or malformed delivery id, 401 for
    a missing, malformed or wrong signature or timestamp, or a timestamp outside :data:`TOLERANCE`.
    Every secret is compared, each with :func:`hmac.compare_digest`.
    """
    delivery_id = request.headers.get(DELIVERY_HEADER, "")
    if not _DELIVERY_ID.fullmatch(delivery_id):
        raise BadRequest(
            400,
            "bad_delivery_id",
            f"{DELIVERY_HEADER} must be 1 to {KEY_LENGTH} letters, digits, '_', '-' or ':'.",
        )
    timestamp = request.headers.get(TIMESTAMP_HEADER, "")
    given = _SIGNATURE.fullmatch(request.headers.get(SIGNATURE_HEADER, ""))
    if not _TIMESTAMP.fullmatch(timestamp) or given is None:
        raise BadRequest(
            401,
            "unauthorized",
            f"Send {TIMESTAMP_HEADER} (unix seconds) and {SIGNATURE_HEADER}: sha256=<hex HMAC-SHA256>.",
        )
    text = signed_text(timestamp, delivery_id, body)
    expected = given.group(1).lower().encode()
    matches = [
        hmac.compare_digest(hmac.new(secret.encode(), text, hashlib.sha256).hexdigest().encode(), expected)
        for secret in source.secrets
    ]
    if not any(matches):
        raise BadRequest(401, "bad_signature", "The signature does not match.")
    if abs(clock.now().timestamp() - int(timestamp)) > TOLERANCE.total_seconds():
        raise BadRequest(
            401,
            "stale_timestamp",
            f"{TIMESTAMP_HEADER} is more than {TOLERANCE.seconds} seconds from the server's clock.",
        )
    return delivery_id


def event_of(source: Source, request: HttpRequest, body: bytes) -> dict[str, Any] | None:
    """Return the event ``{"workspace_id", "event_key", "payload"}`` the body holds, or ``None`` (MAP ignored it)."""
    data = parse_object(body)
    if source.map is not None:
        try:
            mapped = source.map(data, request)
        except (InvalidWake, ValueError, LookupError, TypeError) as exc:
            logger.warning("webhook source=%s MAP refused the body: %s", source.name, type(exc).__name__)
            raise BadRequest(400, "bad_request", "The body is not an event this source maps.") from None
        if mapped is None:
            return None
        if not isinstance(mapped, Mapping):
            raise BadRequest(400, "bad_request", "MAP did not return an event.")
        data = dict(mapped)
    refuse_unknown_fields(data, EVENT_FIELDS)
    return {
        "workspace_id": data.get("workspace_id"),
        "event_key": data.get("event_key"),
        "payload": data.get("payload"),
    }


def accept(source: Source, delivery_id: str, event: dict[str, Any] | None) -> int:
    """Record the delivery and deliver its event in one transaction; return how many watchers accepted.

    Raise a 409 :class:`~django_wakes.web.approval_api.BadRequest` if the delivery id was accepted before (the
    unique constraint decides, even between processes racing with the same id), and a 400 one if
    the event is not valid; neither leaves a row behind.
    """
    using = db_alias()  # the wakes' database: the delivery row commits or rolls back with the event
    try:
        with transaction.atomic(using=using):
            WebhookDelivery.objects.using(using).create(
                source=source.name, delivery_id=delivery_id, received_at=clock.now()
            )
            return 0 if event is None else deliver_event(**event)
    except IntegrityError:
        raise BadRequest(409, "replayed", f"Delivery {delivery_id} was already accepted.") from None
    except WakeError as exc:  # the package's validation (InvalidWake, InvalidIntent): nothing was written
        raise BadRequest(400, "bad_request", str(exc)) from None


@csrf_exempt  # authenticated by its signature, not by a session
@never_cache
def event_webhook(request: HttpRequest, source: str) -> HttpResponseBase:
    """Deliver the event of a signed request from a configured source; answer in JSON (see the module)."""
    if request.method != "POST":
        return method_not_allowed()
    config = get_source(source)
    if config is None:
        return json_error(404, "not_found", "Not found.")
    delivery_id = "-"
    try:
        body = read_body(request, config.max_bytes)
        delivery_id = verify(config, request, body)
        accepted = accept(config, delivery_id, event_of(config, request, body))
    except BadRequest as exc:
        logger.warning("webhook source=%s delivery=%s outcome=%s", config.name, delivery_id, exc.code)
        return refusal(exc)
    logger.info("webhook source=%s delivery=%s outcome=accepted watchers=%s", config.name, delivery_id, accepted)
    return JsonResponse({"accepted": accepted})
