"""The approval page: a logged-in human reads the prompt and answers it.

The link sent to the approver holds the one-time token: ``approve/<token>/``. When the token opens
an approval still waiting for its answer, that view only keeps the token's hash in a signed,
``HttpOnly`` cookie scoped to the answer page (:data:`LINK_COOKIE`) and redirects to the token-free
``approve/answer/``, the way Django's ``PasswordResetConfirmView`` keeps its token out of the page's URL.
From there on the token is not in the address bar, the login page's ``?next=``, a Referer, a logged
path or the web server's access log; the cookie holds only the hash, signed so it cannot be made up.
Opening a link writes nothing on the server: no session row, however many times it is opened without
cookies (the session appears at login, one per login). Any other token (unknown, retired, expired,
answered, cancelled) sets nothing: the link redirects to the token-free refusal page
``approve/refused/<reason>/``.

``approve/answer/`` (login required) shows the prompt on GET and answers it on POST through
:func:`django_wakes.engine.resolve_hashed`, under ordinary ``csrf_protect``. A page opened before the
host re-issued the link (:func:`django_wakes.reissue_approval`) is still answered: re-issuing retires a
link, not a page a person has open. Both views are ``never_cache``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core import signing
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_protect
from django.views.decorators.http import require_http_methods, require_safe

from .. import clock, engine
from ..exceptions import (
    ApprovalAlreadyResolved,
    ApprovalDenied,
    ApprovalError,
    ApprovalExpired,
    ApprovalNotFound,
    ApprovalSuperseded,
    InvalidIntent,
)
from ..models import Wake
from .forms import ApprovalForm

logger = logging.getLogger("django_wakes")

#: The cookie that holds the SHA-256 of the opened link's token (never the token), signed with
#: ``SECRET_KEY`` under :data:`LINK_COOKIE_SALT` and sent only to the answer page.
LINK_COOKIE = "django_wakes_approval"
LINK_COOKIE_SALT = "django_wakes.approval_link"
#: How long an opened link is kept, in seconds (less when the approval expires sooner): a day to log in
#: and answer; after that, the page asks for the link again.
LINK_COOKIE_MAX_AGE = 24 * 60 * 60

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
    ApprovalSuperseded: (
        410,
        _("A newer link was sent"),
        _("A newer link was sent for this approval, and this one no longer opens it. Use the most recent link."),
    ),
}

#: The form was shown for one approval, but this browser has opened another approval's link since.
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
    "superseded": ApprovalSuperseded,
}


def _opened_hash(request: HttpRequest) -> str | None:
    """The token hash of the link opened in this browser (:data:`LINK_COOKIE`), if its signature holds."""
    value = request.COOKIES.get(LINK_COOKIE)
    if not value:
        return None
    try:
        return signing.TimestampSigner(salt=LINK_COOKIE_SALT).unsign(value, max_age=LINK_COOKIE_MAX_AGE)
    except signing.BadSignature:
        return None


def _keep_opened(request: HttpRequest, response: HttpResponseBase, token_hash: str, wake: Wake) -> None:
    """Set :data:`LINK_COOKIE` to the signed hash, for the answer page only, until the approval or the day ends."""
    left = LINK_COOKIE_MAX_AGE
    if wake.expires_at is not None:
        left = min(left, max(1, int((wake.expires_at - clock.now()).total_seconds()) + 1))
    response.set_cookie(
        LINK_COOKIE,
        signing.TimestampSigner(salt=LINK_COOKIE_SALT).sign(token_hash),
        max_age=left,
        path=reverse("django_wakes:answer"),
        secure=settings.SESSION_COOKIE_SECURE or request.is_secure(),
        httponly=True,
        samesite="Lax",  # sent when the link is followed from a mail or a chat (a top-level GET)
    )


@require_safe
@never_cache
def approve(request: HttpRequest, token: str) -> HttpResponseBase:
    """Keep the link's token as its signed hash in a cookie and redirect to the token-free answer page.

    Only a token that opens an approval still waiting for its answer (:func:`engine.waiting_approval
    <django_wakes.engine.waiting_approval>`) is kept: any other (a retired link too: "a newer link was
    sent") redirects to the refusal page :func:`refused` with nothing set. Nothing is written on the
    server either way, so opening a link any number of times grows no table. Who may answer is checked
    on the answer page, once the visitor is logged in (403 there).

    This view always redirects, whoever asks and whatever the token: a refusal here would be a 4xx
    response, and Django's request logger writes the path of every 4xx response, token included, to
    the logs. Nothing is rendered at this URL, so nothing here can leak the token through a Referer.
    """
    token_hash = engine.hash_token(token)
    try:
        wake = engine.waiting_approval(token_hash)
    except ApprovalError as exc:
        reason = next(name for name, kind in LINK_REFUSALS.items() if isinstance(exc, kind))
        response = redirect("django_wakes:refused", reason=reason)
    except DatabaseError:
        # A 500 here would be logged (and mailed to ADMINS) with the path, token included.
        logger.warning("approval link: the database could not be read; sent to the 'unavailable' page", exc_info=True)
        response = redirect("django_wakes:refused", reason=UNAVAILABLE)
    else:
        response = redirect("django_wakes:answer")
        _keep_opened(request, response, token_hash, wake)
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
    """Show the prompt of the approval whose link was opened in this browser (GET), or answer it (POST).

    404 when no link (or an unknown one) was opened, 403/409/410 when it cannot be answered now by
    this user. A link the host re-issued after it was opened here still answers (the person read the
    prompt through a valid link). After an answer the browser forgets the link.
    """
    token_hash = _opened_hash(request)
    try:
        wake = engine.open_approval(token_hash, request.user, opened_before_reissue=True)
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
        wake = engine.resolve_hashed(token_hash, answer, request.user, opened_before_reissue=True)
    except InvalidIntent:
        form.add_error("comment", _("This comment is too long."))
        return _form_page(request, wake, form, status=400)
    except ApprovalError as exc:
        return _refused(request, exc)
    logger.info(
        "approval answered wake=%s workspace=%s by=%s approved=%s",
        wake.pk,
        wake.workspace_id,
        request.user.get_username(),
        answer["approved"],
    )
    response = render(request, "django_wakes/approve_done.html", {"wake": wake, "answer": answer})
    response.delete_cookie(LINK_COOKIE, path=reverse("django_wakes:answer"), samesite="Lax")
    return response


@require_safe
@_same_origin
@never_cache
def refused(request: HttpRequest, reason: str) -> HttpResponseBase:
    """The page a link to no waiting approval redirects to: 404, 409 or 410, as the answer page would say it.

    ``superseded`` (410) is a link the host re-issued: "a newer link was sent". It needs no login and
    touches no session; it shows the refusal its URL names (an unknown reason
    is 404; ``unavailable``, a database that could not be read, is 503), nothing of any approval.
    """
    if reason == UNAVAILABLE:
        return _refusal(request, *UNAVAILABLE_PAGE)
    kind = LINK_REFUSALS.get(reason, ApprovalNotFound)
    return _refusal(request, *REFUSALS[kind])
