"""What an operator may do to wakes from the console: the wake page's buttons and the list's bulk actions.

Every write is an engine transition (a conditional UPDATE), behind the ``django_wakes.operate_wake``
permission on top of the view permission, and confirmed first (a GET shows what will happen, the POST does it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin.utils import quote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from .. import engine
from ..exceptions import WakeError
from ..models import State, Wake
from .display import describe_trigger, moment
from .forms import MomentForm

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

    # django-stubs makes the admin classes generic; at run time they are not subscriptable.
    ModelAdmin = admin.ModelAdmin[Any]
else:
    ModelAdmin = admin.ModelAdmin


@dataclass(frozen=True)
class Operation:
    """A button on the wake page: what it is called, what it asks for, and the transition it runs."""

    label: StrOrPromise
    confirm: StrOrPromise
    applies: Callable[[Wake], bool]
    asks_for_time: StrOrPromise | None = None


OPERATIONS: dict[str, Operation] = {
    "fire_now": Operation(
        _("Fire now"),
        _("Make this wake due now: the next runner pass fires it (its lane's order still holds)."),
        lambda w: w.state == State.PENDING and w.fire_at is not None,
    ),
    "reschedule": Operation(
        _("Reschedule"),
        _("Move when this wake is next due."),
        lambda w: w.state == State.PENDING and w.fire_at is not None and not (w.is_recurring and w.result is None),
        asks_for_time=_("New time"),
    ),
    "extend_expiry": Operation(
        _("Extend expiry"),
        _("Give this wake more time for its trigger to come."),
        lambda w: w.state == State.PENDING and w.expires_at is not None and w.result is None,
        asks_for_time=_("New expiry"),
    ),
    "retry": Operation(
        _("Retry"),
        _("Requeue this dead wake with fresh attempts, due now; its saved result is handed to the sink again."),
        lambda w: w.state == State.DEAD,
    ),
    "cancel": Operation(
        _("Cancel"),
        _("Cancel this wake: it will never fire (a firing recurring occurrence finishes, and its chain ends)."),
        lambda w: w.state == State.PENDING or (w.state == State.FIRING and w.is_recurring),
    ),
}


def run_operation(name: str, wake_id: int, at: datetime | None) -> str:
    """Run one of :data:`OPERATIONS` through the engine; return its message (it raises OperationRefused)."""
    if name == "fire_now":
        return engine.fire_now(wake_id)
    if name == "reschedule":
        assert at is not None
        return engine.reschedule(wake_id, at)
    if name == "extend_expiry":
        assert at is not None
        return engine.extend_expiry(wake_id, at)
    if name == "retry":
        return engine.retry_wake(wake_id)
    return engine.cancel_wake(wake_id)


class OperatorMixin(ModelAdmin):
    """The operator check shared by the wake page, its buttons, its bulk actions and the lanes page."""

    def has_operate_permission(self, request: HttpRequest) -> bool:
        """Whether the user may run engine transitions here: ``operate_wake`` on top of the view permission.

        Operating without viewing is refused like every other console page (list, wake page, lanes,
        chains): a user with ``operate_wake`` alone neither reads a wake through its confirmation page
        nor changes a wake the console would not show them.
        """
        return self.has_view_permission(request) and request.user.has_perm("django_wakes.operate_wake")


class WakeOperations(OperatorMixin):
    """The wake buttons' view and the list's bulk actions (mixed into ``WakeAdmin``)."""

    actions = ("cancel_pending", "retry_dead")

    def operate_view(self, request: HttpRequest, object_id: str, operation: str) -> HttpResponse:
        """GET: confirm one operation on one wake. POST: run it through the engine, say what happened.

        403 without the view permission or without ``operate_wake`` (:meth:`has_operate_permission`).
        """
        if not self.has_operate_permission(request):
            raise PermissionDenied
        op = OPERATIONS.get(operation)
        wake = self.get_object(request, object_id)
        if op is None or wake is None:
            raise Http404(_("No such wake or operation."))
        change_url = reverse("admin:django_wakes_wake_change", args=[quote(wake.pk)])
        form = MomentForm(request.POST or None, label=op.asks_for_time) if op.asks_for_time else None
        if request.method == "POST" and (form is None or form.is_valid()):
            at = form.cleaned_data["at"] if form is not None else None
            try:
                message = run_operation(operation, wake.pk, at)
            except WakeError as exc:
                self.message_user(request, _("Not done: %(why)s.") % {"why": exc}, messages.ERROR)
            else:
                self.log_change(request, wake, f"{op.label}: {message}")
                self.message_user(request, message, messages.SUCCESS)
            return HttpResponseRedirect(change_url)
        context = {
            **self.admin_site.each_context(request),
            "title": _("%(operation)s wake %(id)s?") % {"operation": op.label, "id": wake.pk},
            "opts": self.opts,
            "original": wake,
            "operation": op,
            "form": form,
            "change_url": change_url,
            "operator_zone": timezone.get_current_timezone_name(),
            "summary": [
                (_("kind"), wake.kind),
                (_("state"), wake.get_state_display()),
                (_("trigger"), describe_trigger(wake)),
                (_("due at"), moment(wake.due_at, zone=True)),
                (_("expires at"), moment(wake.expires_at, zone=True)),
                (_("lane"), wake.serial_key or "-"),
            ],
        }
        return TemplateResponse(request, "admin/django_wakes/wake/operate_confirm.html", context)

    @admin.action(description=_("Cancel selected pending wakes"), permissions=["operate"])
    def cancel_pending(self, request: HttpRequest, queryset: QuerySet[Wake]) -> None:
        done, skipped = self._apply(request, queryset, State.PENDING, engine.cancel, "Cancelled from the admin.")
        if done:
            self.message_user(
                request,
                ngettext("%(count)d wake was cancelled.", "%(count)d wakes were cancelled.", done) % {"count": done},
                messages.SUCCESS,
            )
        if skipped:
            self.message_user(
                request,
                ngettext(
                    "%(count)d selected wake was skipped: only pending wakes can be cancelled.",
                    "%(count)d selected wakes were skipped: only pending wakes can be cancelled.",
                    skipped,
                )
                % {"count": skipped},
                messages.WARNING,
            )

    @admin.action(description=_("Retry selected dead wakes"), permissions=["operate"])
    def retry_dead(self, request: HttpRequest, queryset: QuerySet[Wake]) -> None:
        done, skipped = self._apply(request, queryset, State.DEAD, engine.requeue, "Requeued from the admin.")
        if done:
            self.message_user(
                request,
                ngettext(
                    "%(count)d dead wake was requeued to fire now.",
                    "%(count)d dead wakes were requeued to fire now.",
                    done,
                )
                % {"count": done},
                messages.SUCCESS,
            )
        if skipped:
            self.message_user(
                request,
                ngettext(
                    "%(count)d selected wake was skipped: only dead wakes can be retried.",
                    "%(count)d selected wakes were skipped: only dead wakes can be retried.",
                    skipped,
                )
                % {"count": skipped},
                messages.WARNING,
            )

    def _apply(
        self, request: HttpRequest, queryset: QuerySet[Wake], state: str, transition: Callable[[int], bool], note: str
    ) -> tuple[int, int]:
        """Run ``transition`` on each selected wake in ``state``; return (done, skipped).

        Wakes in another state, and any whose state changed under us (the transition lost its
        conditional UPDATE to a runner), count as skipped.
        """
        selected = queryset.count()
        done = 0
        for wake in queryset.filter(state=state).order_by("pk"):
            if transition(wake.pk):
                done += 1
                self.log_change(request, wake, note)
        return done, selected - done
