"""The JSON approval API: ``POST approvals/api/`` answers an approval with its token, for programs.

The approval page (:mod:`django_wakes.web.approval_pages`) is for a person with a browser; this is the same answer
for a chat bot, a CLI or a single-page app: ``{"token": ..., "approved": bool, "comment": ...}`` in,
``{"wake": id, "approved": bool}`` out, refusals as JSON with the page's status codes.

Who answers is decided by the host. By default it is the session user (logged in, else 401), and the
post is CSRF-protected like any session-authenticated post. With ``WAKES["API_AUTH"]``, a function
``fn(request) -> actor | None`` authenticates the request by its own credentials (an API key or a
bearer token header: never the session cookie), and the view is then CSRF-exempt, as a bot has no
CSRF token. ``WAKES["AUTHORIZE"]`` still decides whether that actor may answer the approval.

Clients retry: a response lost on the way makes a bot post the same answer again. The same answer
by the same actor is therefore answered 200 again, with the recorded answer and ``"duplicate": true``;
a different answer (or another actor's) is a 409 that says what was recorded, so the client can tell
its user. Every 401 carries a ``WWW-Authenticate`` challenge, as RFC 9110 requires.

The token travels in the body only, so it is in no URL, and Django's request logger (which logs the
path) never sees it; nothing here logs a body. The helpers for JSON requests and responses
(:mod:`.json_http`) are shared with :mod:`django_wakes.web.webhooks`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponseBase, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt, csrf_protect
from django.views.decorators.debug import sensitive_variables

from .. import engine
from ..conf import wakes_settings
from ..engine.triggers import actor_name
from ..exceptions import (
    ApprovalAlreadyResolved,
    ApprovalDenied,
    ApprovalError,
    ApprovalExpired,
    ApprovalNotFound,
    ApprovalSuperseded,
    WakeError,
)
from ..models import State, Wake
from .forms import COMMENT_MAX_CHARS
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

#: The largest approval API body, in bytes: a token, a boolean and a comment of at most
#: ``COMMENT_MAX_CHARS`` characters (12 bytes each at worst: an emoji escaped as two ``\uXXXX``), and room to spare.
API_MAX_BYTES = 12 * COMMENT_MAX_CHARS + 4096

#: Status, error code and message of each refusal, as the approval page gives them.
REFUSALS: dict[type[ApprovalError], tuple[int, str, str]] = {
    ApprovalNotFound: (404, "not_found", "No approval answers to this token."),
    ApprovalDenied: (403, "forbidden", "This actor may not answer this approval."),
    ApprovalAlreadyResolved: (409, "already_answered", "This approval was already answered or cancelled."),
    ApprovalExpired: (410, "expired", "This approval expired before it was answered."),
    ApprovalSuperseded: (
        410,
        "superseded",
        "A newer link was sent for this approval: this token no longer answers it.",
    ),
}

ANSWER_FIELDS = {"token", "approved", "comment"}

#: The 401 challenges: log in (the session), or the credentials ``WAKES["API_AUTH"]`` checks (a bearer key).
SESSION_CHALLENGE = 'Session realm="django-wakes"'
API_AUTH_CHALLENGE = 'Bearer realm="django-wakes"'


def _unauthorized(detail: str, challenge: str) -> JsonResponse:
    response = json_error(401, "unauthorized", detail)
    response.headers["WWW-Authenticate"] = challenge
    return response


def _recorded(wake: Wake) -> dict[str, Any] | None:
    """What an answered approval recorded: ``{"approved", "comment", "by", "defaulted"}``, or ``None`` (cancelled)."""
    result = wake.result or {}
    answer = result.get("answer")
    if not isinstance(answer, dict):
        return None
    return {
        "approved": answer.get("approved"),
        "comment": answer.get("comment", ""),
        "by": result.get("resolved_by"),
        "defaulted": bool(result.get("defaulted")),
    }


def _already_resolved(exc: ApprovalAlreadyResolved, answer: dict[str, Any], actor: Any) -> JsonResponse:
    """200 for the same answer by the same actor again (a retry); else 409 with what was recorded."""
    wake = exc.wake if isinstance(exc.wake, Wake) else None
    recorded = None if wake is None else _recorded(wake)
    if wake is None or recorded is None:
        cancelled = wake is not None and wake.state == State.CANCELLED
        detail = "This approval was cancelled." if cancelled else REFUSALS[ApprovalAlreadyResolved][2]
        return json_error(409, "already_answered", detail)
    same = {"approved": recorded["approved"], "comment": recorded["comment"]} == answer
    if same and not recorded["defaulted"] and recorded["by"] == actor_name(actor):
        return JsonResponse({"wake": wake.pk, "approved": recorded["approved"], "duplicate": True})
    verdict = "approved" if recorded["approved"] else "rejected"
    by = "by default on expiry" if recorded["defaulted"] else f"by {recorded['by']}"
    detail = f"This approval was already answered: {verdict} {by}."
    return JsonResponse({"error": "already_answered", "detail": detail, "recorded": recorded}, status=409)


@sensitive_variables("data", "token")
def _parse_answer(body: bytes) -> tuple[str, dict[str, Any]]:
    """Return the token and the answer ``{"approved": bool, "comment": str}`` of an API request body."""
    data = parse_object(body)
    refuse_unknown_fields(data, ANSWER_FIELDS)
    token = data.get("token")
    if not isinstance(token, str) or not token:
        raise BadRequest(400, "bad_request", "token must be a non-empty string.")
    approved = data.get("approved")
    if not isinstance(approved, bool):
        raise BadRequest(400, "bad_request", "approved must be true or false.")
    comment = data.get("comment", "")
    if not isinstance(comment, str):
        raise BadRequest(400, "bad_request", "comment must be a string.")
    if len(comment) > COMMENT_MAX_CHARS:
        raise BadRequest(400, "bad_request", f"comment is longer than {COMMENT_MAX_CHARS} characters.")
    return token, {"approved": approved, "comment": comment}


@sensitive_variables("body", "token")
def _answer(request: HttpRequest, actor: Any) -> JsonResponse:
    """Answer the approval the body's token opens, as ``actor``."""
    if request.content_type != "application/json":
        # A cross-site form cannot send application/json without a CORS preflight: defence in depth
        # for the CSRF-exempt API_AUTH mode.
        return json_error(415, "unsupported_media_type", "Send Content-Type: application/json.")
    try:
        token, answer = _parse_answer(read_body(request, API_MAX_BYTES))
        wake = engine.resolve(token, answer, actor)
    except BadRequest as exc:
        return refusal(exc)
    except ApprovalAlreadyResolved as exc:
        return _already_resolved(exc, answer, actor)
    except ApprovalError as exc:
        status, code, detail = next(v for k, v in REFUSALS.items() if isinstance(exc, k))
        return json_error(status, code, detail)
    except WakeError as exc:  # InvalidIntent: an answer the database cannot store
        return json_error(400, "bad_request", str(exc))
    logger.info(
        "approval answered wake=%s workspace=%s by=%s approved=%s via=api",
        wake.pk,
        wake.workspace_id,
        (wake.result or {}).get("resolved_by"),
        answer["approved"],
    )
    return JsonResponse({"wake": wake.pk, "approved": answer["approved"]})


def _session_answer(request: HttpRequest) -> HttpResponseBase:
    """Answer as the session user, under ordinary ``csrf_protect``; 401 when anonymous, 403 on a CSRF failure."""
    if not request.user.is_authenticated:
        return _unauthorized("Log in first.", SESSION_CHALLENGE)
    reached: list[bool] = []

    @csrf_protect
    def protected(request: HttpRequest) -> HttpResponseBase:
        reached.append(True)
        return _answer(request, request.user)

    response = protected(request)
    if not reached:  # csrf_protect refused the post with Django's HTML failure page: say it as JSON
        return json_error(403, "csrf_failed", "CSRF verification failed: send the X-CSRFToken header.")
    return response


@csrf_exempt  # CSRF is checked in _session_answer when the session authenticates; API_AUTH callers are exempt
@never_cache
def approval_api(request: HttpRequest) -> HttpResponseBase:
    """Answer an approval from a JSON body: ``{"token", "approved", "comment"}`` -> ``{"wake", "approved"}``.

    401 when no actor is authenticated, 404/403/409/410 as the approval page refuses (410 ``superseded``:
    a token the host re-issued), 400 for a bad
    body, 405 for anything but POST, 413 for a body over :data:`API_MAX_BYTES`, 415 without
    ``Content-Type: application/json``.
    """
    if request.method != "POST":
        return method_not_allowed()
    authenticate: Callable[[HttpRequest], Any] | None = wakes_settings.api_auth
    if authenticate is None:
        return _session_answer(request)
    actor = authenticate(request)
    if actor is None:
        return _unauthorized("Not authenticated.", API_AUTH_CHALLENGE)
    return _answer(request, actor)
