"""The approval page: a logged-in human reads the prompt and answers it with the one-time token.

``GET approve/<token>/`` shows the prompt; ``POST`` answers through :func:`django_wakes.engine.resolve`.
The token is in the URL by design (it is the link that was sent), so these responses keep it
from leaking further: ``Referrer-Policy: no-referrer`` and ``never_cache`` on every response, the
token is never rendered into the page (the form posts to its own URL), and refusals are not
logged with their path by Django's request logger (which would write the token to the logs).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseBase, HttpResponseNotAllowed
from django.middleware.csrf import CsrfViewMiddleware
from django.shortcuts import render
from django.urls import get_callable
from django.utils.decorators import decorator_from_middleware
from django.utils.translation import gettext_lazy as _
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt

from . import clock, engine
from .conf import wakes_settings
from .exceptions import (
    ApprovalAlreadyResolved,
    ApprovalDenied,
    ApprovalError,
    ApprovalExpired,
    ApprovalNotFound,
    InvalidIntent,
)
from .forms import ApprovalForm
from .models import State, TriggerType, Wake

logger = logging.getLogger("django_wakes")

INTENT_PREVIEW_CHARS = 4000

#: Status and message of each refusal; the page never says more (nor echoes the token).
REFUSALS: dict[type[ApprovalError], tuple[int, Any, Any]] = {
    ApprovalNotFound: (404, _("Approval not found"), _("This approval link is not valid.")),
    ApprovalDenied: (403, _("Not allowed"), _("You are not allowed to answer this approval.")),
    ApprovalAlreadyResolved: (
        409,
        _("Already answered"),
        _("This approval was already answered or cancelled. Answers are accepted once."),
    ),
    ApprovalExpired: (410, _("Approval expired"), _("This approval expired before it was answered.")),
}


def _unlogged(response: HttpResponseBase) -> HttpResponseBase:
    """Mark a refusal as logged, so Django's request logger does not write its path (the token)."""
    response._has_been_logged = True  # type: ignore[attr-defined]  # what django.utils.log checks
    return response


class _QuietCsrfViewMiddleware(CsrfViewMiddleware):
    """Django's CSRF check, but a rejection is logged without the request path (which holds the token)."""

    def _reject(self, request: HttpRequest, reason: str) -> HttpResponse:
        logger.warning("approval answer refused by CSRF protection: %s", reason)
        return _unlogged(get_callable(settings.CSRF_FAILURE_VIEW)(request, reason=reason))


#: ``csrf_protect`` whose rejections keep the token out of the logs.
csrf_protect_quietly = decorator_from_middleware(_QuietCsrfViewMiddleware)


def _no_referrer(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """Send ``Referrer-Policy: no-referrer`` so links followed from the page do not carry the token."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        response = view(request, *args, **kwargs)
        response.headers["Referrer-Policy"] = "no-referrer"
        return response

    return wrapped


def _open_approval(token: str, actor: Any) -> Wake:
    """Return the approval this token opens for ``actor``, or raise what :func:`resolve` would.

    The same checks in the same order as ``resolve`` (which repeats them atomically on POST), so
    the page refuses exactly what an answer would be refused for, before showing the prompt.
    """
    wake = (
        Wake.objects.using(engine.db_alias())
        .filter(token_hash=engine.hash_token(token), trigger_type=TriggerType.ON_APPROVAL)
        .first()
    )
    if wake is None:
        raise ApprovalNotFound("no approval answers to this token")
    authorize = wakes_settings.authorize
    if authorize is None or not authorize(actor, wake.workspace_id):
        raise ApprovalDenied("this actor may not resolve approvals in this workspace")
    if wake.state == State.PENDING and wake.fire_at is None:
        if wake.expires_at is None or wake.expires_at > clock.now():
            return wake
        raise ApprovalExpired("expired")
    if wake.fire_at is None and wake.state in (State.EXPIRED, State.FIRING):
        raise ApprovalExpired("expired")
    raise ApprovalAlreadyResolved("already answered or cancelled")


def _refusal(request: HttpRequest, exc: ApprovalError) -> HttpResponseBase:
    status, title, message = next(v for k, v in REFUSALS.items() if isinstance(exc, k))
    response = render(request, "django_wakes/approve_refused.html", {"title": title, "message": message}, status=status)
    return _unlogged(response)


def _intent_preview(wake: Wake) -> str:
    if wake.intent is None:
        return ""
    text = json.dumps(wake.intent, indent=2, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= INTENT_PREVIEW_CHARS else text[:INTENT_PREVIEW_CHARS] + "\n…"


def _form_page(request: HttpRequest, wake: Wake, form: ApprovalForm, status: int = 200) -> HttpResponse:
    context = {"wake": wake, "form": form, "intent_preview": _intent_preview(wake)}
    return render(request, "django_wakes/approve.html", context, status=status)


@csrf_exempt  # the global CSRF middleware would log the path on rejection; the check is done below
@_no_referrer
@never_cache
@login_required
@csrf_protect_quietly
def approve(request: HttpRequest, token: str) -> HttpResponseBase:
    """Show an approval's prompt (GET), or answer it (POST); 404/403/409/410 when it cannot be answered."""
    if request.method not in ("GET", "HEAD", "POST"):
        return _unlogged(HttpResponseNotAllowed(["GET", "POST"]))
    try:
        wake = _open_approval(token, request.user)
    except ApprovalError as exc:
        return _refusal(request, exc)
    if request.method != "POST":
        return _form_page(request, wake, ApprovalForm())
    form = ApprovalForm(request.POST)
    if not form.is_valid():
        return _unlogged(_form_page(request, wake, form, status=400))
    answer = form.answer()
    try:
        wake = engine.resolve(token, answer, actor=request.user)
    except InvalidIntent:
        form.add_error("comment", _("This comment is too long."))
        return _unlogged(_form_page(request, wake, form, status=400))
    except ApprovalError as exc:
        return _refusal(request, exc)
    logger.info(
        "approval answered wake=%s workspace=%s by=%s approved=%s",
        wake.pk,
        wake.workspace_id,
        request.user.get_username(),
        answer["approved"],
    )
    return render(request, "django_wakes/approve_done.html", {"wake": wake, "answer": answer})
