"""The chain page of the admin: a recurring chain's past occurrences, its next fire times, its buttons.

A chain has no row of its own, so its page hangs off the wake admin
(``admin:django_wakes_chain``, ``.../wake/chains/<chain_id>/``). Reading it needs the wake view
permission; its buttons (pause/resume, trigger now, backfill) need ``django_wakes.operate_wake``,
go through a confirmation page, and call :mod:`django_wakes.engine.schedules`, whose sentence (or
refusal) becomes the admin message. Every query is bounded: the newest :data:`HISTORY_SHOWN`
occurrences through the ``(chain_id, fire_at)`` index, their attempts by wake id.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from functools import partial
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .. import clock, engine
from ..exceptions import WakeError
from ..models import State, Wake, WakeAttempt
from ..schedules import recurrence
from .forms import MomentInput

if TYPE_CHECKING:
    ModelAdmin = admin.ModelAdmin[Any]
else:
    ModelAdmin = admin.ModelAdmin

__all__ = ["HISTORY_SHOWN", "UPCOMING_MAX", "chain_urls", "chain_view"]

#: The chain page lists at most this many past occurrences (newest first).
HISTORY_SHOWN = 50
#: How many next fire times the page shows by default, and at most (``?n=``).
UPCOMING_SHOWN = 10
UPCOMING_MAX = 100
ACTIONS = ("pause", "resume", "trigger", "backfill")
_TINY = timedelta(microseconds=1)


def chain_urls(model_admin: ModelAdmin) -> list[URLPattern]:
    """The chain page's URL, for :meth:`WakeAdmin.get_urls <django_wakes.console.admin.WakeAdmin.get_urls>`."""
    view = model_admin.admin_site.admin_view(partial(chain_view, model_admin=model_admin))
    return [path("chains/<str:chain_id>/", view, name="django_wakes_chain")]


class BackfillForm(forms.Form):
    """The range to backfill, typed on the 24-hour clock in the operator's time zone, like every time the console reads.

    The page says which zone; the confirmation shows the range in the chain's zone too.
    """

    start = forms.DateTimeField(label=_("from"), widget=MomentInput(seconds=False))
    end = forms.DateTimeField(label=_("until"), widget=MomentInput(seconds=False))

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        start, end = cleaned.get("start"), cleaned.get("end")
        for moment in (start, end):
            try:
                if moment is not None:
                    moment.astimezone(UTC) - _TINY  # noqa: B018 - what the backfill computes from it
            except OverflowError as exc:
                raise forms.ValidationError(_("That date is out of range.")) from exc
        if start is not None and end is not None and end < start:
            raise forms.ValidationError(_("The end of the range is before its start."))
        return cleaned


def local_text(moment: datetime | None, zone: tzinfo) -> str:
    """``Sun 2026-10-25 02:30:00 CEST``: to the second, with the zone's abbreviation even in a repeated hour.

    Formatted here, not with the ``date`` filter, which leaves the abbreviation out of ambiguous times,
    the very ones a DST column is about.
    """
    if moment is None:
        return "-"
    local = moment.astimezone(zone)
    return f"{local:%a %Y-%m-%d %H:%M:%S} {local.tzname()}"


def in_both_zones(moment: datetime, zone: tzinfo) -> str:
    """``2026-10-22 00:00 UTC (02:00 CEST in Europe/Paris)``: as typed (the operator's zone), and in the chain's."""
    typed = timezone.localtime(moment)
    shown = f"{typed:%Y-%m-%d %H:%M} {typed.tzname()}"
    chain = moment.astimezone(zone)
    if chain.utcoffset() == typed.utcoffset() and chain.tzname() == typed.tzname():
        return shown
    day = "" if chain.date() == typed.date() else f"{chain:%Y-%m-%d} "
    return f"{shown} ({day}{chain:%H:%M} {chain.tzname()} in {zone})"


@dataclass(frozen=True)
class PastOccurrence:
    """One row of the chain's history as the page shows it."""

    wake: Wake
    slot: str
    settled: str
    outcome: str
    note: str


@dataclass(frozen=True)
class NextTime:
    """One of the next fire times as the page shows it."""

    local: str
    utc: str
    changes: tuple[str, ...]
    note: str


def _zone(template: Wake) -> tzinfo:
    return ZoneInfo(template.tz or settings.TIME_ZONE)


def _schedule_text(template: Wake) -> str:
    if template.cron:
        return f"cron {template.cron} ({template.tz or settings.TIME_ZONE})"
    return f"every {template.every}"


def _note(wake: Wake) -> str:
    """What an occurrence's result says beyond "fired": manual, backfill, folded or skipped slots, held."""
    result = wake.result if isinstance(wake.result, dict) else {}
    notes = []
    if result.get("manual"):
        notes.append(str(_("triggered by hand")))
    if result.get("backfill"):
        notes.append(str(_("backfill")))
    if result.get("skipped"):
        notes.append(str(_("skipped by catch-up (%(n)s missed)") % {"n": result.get("missed", "?")}))
    elif result.get("missed"):
        notes.append(str(_("stood for %(slot)s, %(n)s missed") % {"slot": result.get("slot"), "n": result["missed"]}))
    if wake.state == State.PENDING and wake.paused_at is not None:
        notes.append(str(_("held: the chain is paused")))
    return "; ".join(notes)


def _history(rows: list[Wake], zone: tzinfo) -> list[PastOccurrence]:
    last: dict[int, str] = {}
    for wake_id, outcome in (
        WakeAttempt.objects.using(engine.db_alias())
        .filter(wake_id__in=[w.pk for w in rows])
        .order_by("wake_id", "number", "id")
        .values_list("wake_id", "outcome")
    ):
        last[wake_id] = outcome
    return [
        PastOccurrence(
            wake=w,
            slot=local_text(w.fire_at, zone),
            settled=local_text(w.settled_at, zone),
            outcome=last.get(w.pk, ""),
            note=_note(w),
        )
        for w in rows
    ]


def _upcoming_count(request: HttpRequest) -> int:
    try:
        wanted = int(request.GET.get("n", UPCOMING_SHOWN))
    except ValueError:
        return UPCOMING_SHOWN
    return max(1, min(wanted, UPCOMING_MAX))


def _page_context(request: HttpRequest, model_admin: ModelAdmin, chain_id: str, template: Wake) -> dict[str, Any]:
    using = engine.db_alias()
    zone = _zone(template)
    rows = list(Wake.objects.using(using).filter(chain_id=chain_id).order_by("-fire_at", "-id")[: HISTORY_SHOWN + 1])
    live = next((w for w in rows if w.is_recurring and w.state in (State.PENDING, State.FIRING)), None)
    if live is None:  # not among the newest rows (backfills or manual firings after it): ask directly
        live = (
            Wake.objects.using(using)
            .filter(chain_id=chain_id, state__in=(State.PENDING, State.FIRING))
            .exclude(cron="", every__isnull=True)
            .order_by("fire_at", "id")
            .first()
        )
    upcoming: list[NextTime] = []
    if live is not None and live.fire_at is not None:
        upcoming = [
            NextTime(local_text(o.at, zone), f"{o.at.astimezone(UTC):%Y-%m-%d %H:%M:%S}Z", o.changes, o.note)
            for o in recurrence.upcoming(
                recurrence.grid_for(live),
                after=live.fire_at - _TINY,
                n=_upcoming_count(request),
                zone=zone,
                until=live.end_at,
            )
        ]
    if live is not None:
        paused = live.paused_at is not None
    else:  # an ended chain may still hold rows (backfilled while it was paused): Resume releases them
        held = Wake.objects.using(using).filter(chain_id=chain_id, state=State.PENDING, paused_at__isnull=False)
        paused = held.exists()
    now = clock.now()
    return {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "title": _("Chain %(chain)s") % {"chain": chain_id},
        "chain_id": chain_id,
        "template_wake": template,
        "schedule": _schedule_text(template),
        "dst": recurrence.DstPolicy.of(template).describe() if template.cron else "",
        "zone": str(zone),
        "live": live,
        "paused": paused,
        "paused_since": local_text(live.paused_at, zone) if live is not None else "",
        "ends": local_text(template.end_at, zone) if template.end_at else "",
        "history": _history(rows[:HISTORY_SHOWN], zone),
        "more_history": len(rows) > HISTORY_SHOWN,
        "upcoming": upcoming,
        "can_operate": request.user.has_perm(f"{model_admin.opts.app_label}.operate_wake"),
        "request_id": secrets.token_hex(16),
        "operator_zone": timezone.get_current_timezone_name(),
        "backfill_form": BackfillForm(
            initial={"start": timezone.localtime(now - timedelta(days=1)), "end": timezone.localtime(now)}
        ),
        "chain_url": reverse("admin:django_wakes_chain", args=[chain_id], current_app=model_admin.admin_site.name),
    }


def chain_view(request: HttpRequest, chain_id: str, *, model_admin: ModelAdmin) -> HttpResponse:
    """Show a chain (GET), or confirm and run one of its operator actions (POST)."""
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    try:
        template = engine.schedules.chain_template(chain_id)
    except WakeError as exc:
        raise Http404(str(exc)) from exc
    if request.method == "POST":
        return _act(request, model_admin, chain_id, template)
    context = _page_context(request, model_admin, chain_id, template)
    return TemplateResponse(request, "admin/django_wakes/chain/chain.html", context)


def _act(request: HttpRequest, model_admin: ModelAdmin, chain_id: str, template: Wake) -> HttpResponse:
    """Run one button: refused without the operate permission, confirmed first, reported as a message."""
    if not request.user.has_perm(f"{model_admin.opts.app_label}.operate_wake"):
        raise PermissionDenied
    action = request.POST.get("action", "")
    if action not in ACTIONS:
        return HttpResponseBadRequest("unknown chain action")
    chain_url = reverse("admin:django_wakes_chain", args=[chain_id], current_app=model_admin.admin_site.name)
    zone = _zone(template)
    form = None
    if action == "backfill":
        form = BackfillForm(request.POST)  # typed in the operator's zone (Django's current one)
        valid = form.is_valid()
        if not valid:
            context = _page_context(request, model_admin, chain_id, template)
            context["backfill_form"] = form
            return TemplateResponse(request, "admin/django_wakes/chain/chain.html", context, status=400)
    if request.POST.get("confirmed") != "yes":
        context = {
            **model_admin.admin_site.each_context(request),
            "opts": model_admin.opts,
            "title": _("Are you sure?"),
            "chain_id": chain_id,
            "template_wake": template,
            "schedule": _schedule_text(template),
            "action": action,
            "zone": str(zone),
            "form": form,
            "request_id": request.POST.get("request_id", ""),
            "chain_url": chain_url,
        }
        if form is not None:
            start, end = form.cleaned_data["start"], form.cleaned_data["end"]
            context["start"], context["end"] = in_both_zones(start, zone), in_both_zones(end, zone)
            # How many slots of the schedule the range holds (up to now): what the operator is about to look at.
            # Counted from where a backfill would start (the chain's beginning, gc's horizon), so a start typed
            # decades back costs no more than the chain's own history (and no OverflowError near year 1).
            now = clock.now()
            floor = engine.schedules.backfill_floor(template, now=now)[0]
            counted_from = max(start, floor) if floor is not None else start
            context["slots"] = recurrence.grid_for(template).count(counted_from - _TINY, min(end, now))
        return TemplateResponse(request, "admin/django_wakes/chain/confirm.html", context)
    try:
        said = _run(action, chain_id, request, form)
    except WakeError as exc:
        model_admin.message_user(request, str(exc), messages.ERROR)
    else:
        model_admin.log_change(request, template, f"Chain {chain_id}: {action}. {said}")
        model_admin.message_user(request, said, messages.SUCCESS)
    return HttpResponseRedirect(chain_url)


def _run(action: str, chain_id: str, request: HttpRequest, form: BackfillForm | None) -> str:
    if action == "pause":
        return engine.pause_chain(chain_id)
    if action == "resume":
        return engine.resume_chain(chain_id)
    if action == "trigger":
        wake = engine.trigger_chain(chain_id, request_id=request.POST.get("request_id") or None)
        return f"Chain {chain_id}: wake {wake.pk} fires now, once; the schedule is unchanged."
    assert form is not None  # validated above
    done = engine.backfill_chain(
        chain_id, start=form.cleaned_data["start"].astimezone(UTC), end=form.cleaned_data["end"].astimezone(UTC)
    )
    return done.message
