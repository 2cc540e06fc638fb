"""The login page this app ships (``django_wakes:login``), throttled per username and per address.

An approval link sends a person here when they are logged out, so this page faces the internet with
the approval pages. Django's ``LoginView`` has no limit of its own: any number of passwords could be
tried. This one counts failed logins in Django's cache framework, per username (case-folded) and per
client address (``REMOTE_ADDR``), in a fixed window: past ``WAKES["LOGIN_THROTTLE"]["PER_USER"]``
failures for a name, or ``PER_ADDRESS`` from an address, within ``WINDOW``, every login for that name
or from that address is refused with 429 (the form says when to try again, ``Retry-After`` too),
the right password included, until the window ends. A successful login clears its username's count.

What it bounds, and what not (docs/operations.md): guesses per name and per address per window. Not an
attacker with many addresses against many names (use a WAF or django-axes for that), and a name can be
locked out for one window by anyone who knows it (the price of a per-name limit). Behind a proxy,
``REMOTE_ADDR`` must be the client's (set it from the proxy's header in a middleware you trust), or
every visitor shares one address count. Counts live in ``CACHE`` (``"default"``): a per-process cache
(``LocMemCache``) counts per worker, so use a shared one (Redis, Memcached, the database cache).
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from django.contrib.auth.views import LoginView
from django.core.cache import caches
from django.http import HttpRequest, HttpResponse
from django.template import TemplateDoesNotExist
from django.template.loader import get_template
from django.utils.translation import ngettext
from django.views.generic.base import TemplateResponseMixin

from ..conf import LOGIN_THROTTLE_DEFAULTS, wakes_settings
from ..durations import parse_duration
from ..exceptions import InvalidDuration

__all__ = ["THROTTLE_HINT", "ThrottledLoginView", "throttle_problems"]

logger = logging.getLogger("django_wakes")

KEY_PREFIX = "django_wakes:login:"
USER_PREFIX = f"{KEY_PREFIX}user:"
ADDRESS_PREFIX = f"{KEY_PREFIX}addr:"


THROTTLE_HINT = 'e.g. {"PER_USER": 5, "PER_ADDRESS": 20, "WINDOW": "15m", "CACHE": "default"}; None turns it off.'


def throttle_problems() -> list[str]:
    """What is wrong with ``WAKES["LOGIN_THROTTLE"]`` (the system check's messages); ``[]`` when usable or ``None``."""
    from django.conf import settings

    value = wakes_settings.get("LOGIN_THROTTLE")
    if value is None:
        return []
    unknown = sorted(set(value) - set(LOGIN_THROTTLE_DEFAULTS), key=repr) if isinstance(value, dict) else None
    if unknown is None or unknown:
        got = f"unknown keys {unknown}" if unknown else f"a {type(value).__name__}"
        return [f"WAKES['LOGIN_THROTTLE'] must be None or a dict of settings, got {got}"]
    merged = {**LOGIN_THROTTLE_DEFAULTS, **value}
    problems = [
        f"WAKES['LOGIN_THROTTLE'][{name!r}] must be None or a positive integer, got {limit!r:.60}"
        for name in ("PER_USER", "PER_ADDRESS")
        if (limit := merged[name]) is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1)
    ]
    try:
        parse_duration(merged["WINDOW"], name="WAKES['LOGIN_THROTTLE']['WINDOW']", allow_zero=False)
    except InvalidDuration as exc:
        problems.append(str(exc))
    if merged["CACHE"] not in (getattr(settings, "CACHES", None) or {"default": {}}):
        problems.append(f"WAKES['LOGIN_THROTTLE']['CACHE'] names no alias in CACHES: {merged['CACHE']!r:.60}")
    return problems


def _keys(request: HttpRequest, username: str, throttle: dict[str, Any]) -> dict[str, int]:
    """The cache keys a login attempt counts under, each with its limit (hashed: any name makes a safe key)."""
    name = hashlib.sha256(username.strip().casefold().encode()).hexdigest()[:32]
    address = hashlib.sha256((request.META.get("REMOTE_ADDR") or "").encode()).hexdigest()[:32]
    counts = {}
    if throttle.get("PER_USER") is not None:
        counts[f"{USER_PREFIX}{name}"] = int(throttle["PER_USER"])
    if throttle.get("PER_ADDRESS") is not None:
        counts[f"{ADDRESS_PREFIX}{address}"] = int(throttle["PER_ADDRESS"])
    return counts


class ThrottledLoginView(LoginView):
    """Django's ``LoginView`` with this module's throttle (``WAKES["LOGIN_THROTTLE"] = None`` turns it off)."""

    template_name = "django_wakes/login.html"
    logged_in = False

    def form_valid(self, form: Any) -> HttpResponse:
        """Log the user in, and note it: a failure is told by this, not by ``request.user`` (who may be logged in)."""
        self.logged_in = True
        response: HttpResponse = super().form_valid(form)
        return response

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        """Refuse with 429 while a count is at its limit; else log in, counting a failure or clearing the name's."""
        throttle = wakes_settings.login_throttle
        if throttle is None:
            return super().post(request, *args, **kwargs)
        cache = caches[throttle["CACHE"]]
        window = int(parse_duration(throttle["WINDOW"], name="LOGIN_THROTTLE['WINDOW']").total_seconds())
        username = str(request.POST.get("username", ""))
        counts = _keys(request, username, throttle)
        if any((cache.get(key) or 0) >= limit for key, limit in counts.items()):
            # No password is checked while throttled: not even the right one logs in, and no hashing is spent.
            return self._refused(username, window)
        response: HttpResponse = super().post(request, *args, **kwargs)
        if self.logged_in:  # the name starts afresh
            cache.delete_many([key for key in counts if key.startswith(USER_PREFIX)])
            return response
        for key in counts:
            if not cache.add(key, 1, timeout=window):
                try:
                    cache.incr(key)
                except ValueError:  # it expired between add() and incr(): a new window
                    cache.set(key, 1, timeout=window)
        return response

    def _refused(self, username: str, window: int) -> HttpResponse:
        minutes = max(1, (window + 59) // 60)
        message = ngettext(
            "Too many failed logins. Try again in %(minutes)d minute.",
            "Too many failed logins. Try again in %(minutes)d minutes.",
            minutes,
        ) % {"minutes": minutes}
        logger.warning("login throttled: too many failed logins for this name or from this address (429)")
        form = self.get_form_class()(self.request, initial={"username": username[:150]})
        context = self.get_context_data(form=form, throttled=message)
        response: HttpResponse = self.render_to_response(context, status=429)
        response["Retry-After"] = str(window)
        return response


# What the login page check (checks.py, W006) asks of the view LOGIN_URL resolves to.


def renders_template(view: Any) -> str | None:
    """The template a class-based view (``as_view()``) renders, from its class or its ``as_view`` arguments."""
    view_class = getattr(view, "view_class", None)
    if not isinstance(view_class, type) or not issubclass(view_class, TemplateResponseMixin):
        return None
    name = getattr(view, "view_initkwargs", {}).get("template_name") or view_class.template_name
    return name if isinstance(name, str) else None


def template_loads(template: str) -> bool:
    """Whether ``template`` can be found (one that exists but does not compile counts as found)."""
    try:
        get_template(template)
    except TemplateDoesNotExist:
        return False
    except Exception:  # noqa: BLE001 - a template that exists but does not compile is not this check's business
        return True
    return True
