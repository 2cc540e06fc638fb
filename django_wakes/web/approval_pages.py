"""The approval page: a logged-in human reads the prompt and answers it.

The link sent to the approver holds the one-time token: ``approve/<token>/``. When the token opens
an approval still waiting for its answer, that view only stores the token's hash in the session and
redirects to the token-free ``approve/answer/``, the way Django's ``PasswordResetConfirmView`` keeps
its token out of the page's URL. From there on the token is not in the address bar, the login page's
``?next=``, a Referer, a logged path or the web server's access log; the session (stored server-side,
e.g. in the database) holds only the hash. Any other token (unknown, expired, answered, cancelled)
writes no session: the link redirects to the token-free refusal page ``approve/refused/<reason>/``, so
a stranger requesting made-up links cannot grow the session table.

``approve/answer/`` (login required) shows the prompt on GET and answers it on POST through
:func:`django_wakes.engine.resolve_hashed`, under ordinary ``csrf_protect``. Both views are
``never_cache``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect, render
from django.utils.translation import gettext_lazy as _
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_protect
from django.views.decorators.http import require_http_methods, require_safe

from .. import engine
from ..exceptions import (
    ApprovalAlreadyResolved,
    ApprovalDenied,
    ApprovalError,
    ApprovalExpired,
    ApprovalNotFound,
    InvalidIntent,
)
from ..models import Wake
from .forms import ApprovalForm

logger = logging.getLogger("django_wakes")

#: The session key that holds the SHA-256 of the approval link's token (never the token itself).
SESSION_KEY = "django_wakes_approval"

INTENT_PREVIEW_CHARS = 4000

#: Status and message of each refusal; the page never says more.
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

#: The form was shown for one approval, but the session now holds another (its link was opened since).
STALE = (
    409,
    _("Page out of date"),
    _(
        "Another approval link was opened in this browser after this page was shown, so this answer was "
        "not recorded. Open the link of the approval you mean to answer again."
    ),
)


#: The database could not be read when the link was opened (its page is a 503: try again later).
UNAVAILABLE = "unavailable"
UNAVAILABLE_PAGE = (
    503,
    _("Try again later"),
    _("This approval cannot be looked up right now. Open the link again in a few minutes."),
)

#: The refusals a link gives by itself, before anyone logs in, by the name their page has in its URL.
LINK_REFUSALS: dict[str, type[ApprovalError]] = {
    "not-found": ApprovalNotFound,
    "answered": ApprovalAlreadyResolved,
    "expired": ApprovalExpired,
}


@require_safe
@never_cache
def approve(request: HttpRequest, token: str) -> HttpResponseBase:
    """Keep the link's token as its hash in the session and redirect to the token-free answer page.

    Only a token that opens an approval still waiting for its answer (:func:`engine.waiting_approval
    <django_wakes.engine.waiting_approval>`) is kept: any other redirects to the refusal page
    :func:`refused` with nothing written, so no session row or cookie is made for it. Who may answer
    is checked on the answer page, once the visitor is logged in (403 there).

    This view always redirects, whoever asks and whatever the token: a refusal here would be a 4xx
    response, and Django's request logger writes the path of every 4xx response, token included, to
    the logs. Nothing is rendered at this URL, so nothing here can leak the token through a Referer.
    """
    token_hash = engine.hash_token(token)
    try:
        engine.waiting_approval(token_hash)
    except ApprovalError as exc:
        reason = next(name for name, kind in LINK_REFUSALS.items() if isinstance(exc, kind))
        response = redirect("django_wakes:refused", reason=reason)
    except DatabaseError:
        # A 500 here would be logged (and mailed to ADMINS) with the path, token included.
        logger.warning("approval link: the database could not be read; sent to the 'unavailable' page", exc_info=True)
        response = redirect("django_wakes:refused", reason=UNAVAILABLE)
    else:
        request.session[SESSION_KEY] = token_hash
        response = redirect("django_wakes:answer")
    response.headers["Referrer-Policy"] = "no-referrer"
    return response


def _refusal(request: HttpRequest, status: int, title: Any, message: Any) -> HttpResponse:
    return render(request, "django_wakes/approve_refused.html", {"title": title, "message": message}, status=status)


def _refused(request: HttpRequest, exc: ApprovalError) -> HttpResponse:
    status, title, message = next(v for k, v in REFUSALS.items() if isinstance(exc, k))
    return _refusal(request, status, title, message)


def _intent_preview(wake: Wake) -> str:
    if wake.intent is None:
        return ""
    text = json.dumps(wake.intent, indent=2, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= INTENT_PREVIEW_CHARS else text[:INTENT_PREVIEW_CHARS] + "\n…"


def _form_page(request: HttpRequest, wake: Wake, form: ApprovalForm, status: int = 200) -> HttpResponse:
    context = {"wake": wake, "form": form, "intent_preview": _intent_preview(wake)}
    return render(request, "django_wakes/approve.html", context, status=status)


def _same_origin(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """Send ``Referrer-Policy: same-origin``: Referers stay on this site and form posts carry a real Origin.

    (``no-referrer`` would make browsers send ``Origin: null`` on the answer, which Django's CSRF
    check rightly refuses.)
    """

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        response = view(request, *args, **kwargs)
        response.headers["Referrer-Policy"] = "same-origin"
        return response

    return wrapped


@require_http_methods(["GET", "HEAD", "POST"])
@_same_origin
@never_cache
@login_required
@csrf_protect
def answer(request: HttpRequest) -> HttpResponseBase:
    """Show the prompt of the approval kept in the session (GET), or answer it (POST).

    404 when the session holds no approval or an unknown one, 403/409/410 when it cannot be answered
    now by this user. After an answer the session forgets the approval.
    """
    token_hash = request.session.get(SESSION_KEY)
    try:
        wake = engine.open_approval(token_hash, request.user)
    except ApprovalError as exc:
        return _refused(request, exc)
    if request.method != "POST":
        return _form_page(request, wake, ApprovalForm(initial={"wake": wake.pk}))
    form = ApprovalForm(request.POST)
    if form.is_valid() and form.cleaned_data["wake"] != wake.pk:
        return _refusal(request, *STALE)
    if not form.is_valid():
        return _form_page(request, wake, form, status=400)
    answer = form.answer()
    try:
        wake = engine.resolve_hashed(token_hash, answer, request.user)
    except InvalidIntent:
        form.add_error("comment", _("This comment is too long."))
        return _form_page(request, wake, form, status=400)
    except ApprovalError as exc:
        return _refused(request, exc)
    del request.session[SESSION_KEY]
    logger.info(
        "approval answered wake=%s workspace=%s by=%s approved=%s",
        wake.pk,
        wake.workspace_id,
        request.user.get_username(),
        answer["approved"],
    )
    return render(request, "django_wakes/approve_done.html", {"wake": wake, "answer": answer})


@require_safe
@_same_origin
@never_cache
def refused(request: HttpRequest, reason: str) -> HttpResponseBase:
    """The page a link to no waiting approval redirects to: 404, 409 or 410, as the answer page would say it.

    It needs no login and touches no session; it shows the refusal its URL names (an unknown reason
    is 404; ``unavailable``, a database that could not be read, is 503), nothing of any approval.
    """
    if reason == UNAVAILABLE:
        return _refusal(request, *UNAVAILABLE_PAGE)
    kind = LINK_REFUSALS.get(reason, ApprovalNotFound)
    return _refusal(request, *REFUSALS[kind])
