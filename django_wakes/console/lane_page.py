"""The lanes page: busy and waiting lanes, one lane's queue, and pausing or resuming a lane (operators only)."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from .. import engine
from ..exceptions import WakeError
from ..models import PausedLane
from .attention import Attention
from .display import holder_note, moment
from .forms import PauseLaneForm
from .lanes import LaneQueue, busy_lanes, lane_queue, waiting_lanes
from .operations import OperatorMixin


class LanesPage(OperatorMixin):
    """The lanes page's view (mixed into ``WakeAdmin``)."""

    def lanes_view(self, request: HttpRequest) -> HttpResponse:
        """Busy and waiting lanes, one lane's queue (``?lane=<key>``), and pause/resume (POST, operators only)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        operator = self.has_operate_permission(request)
        if request.method == "POST":
            if not operator:
                raise PermissionDenied
            return self._pause_or_resume(request)
        lane = request.GET.get("lane")
        queue: LaneQueue | None = None
        if lane:
            queue = lane_queue(lane)
        busy = busy_lanes() if queue is None else []
        attention = Attention()
        for held in [*busy, *([queue] if queue is not None else [])]:
            if held.holder is not None:
                held.holder_note = holder_note(held.holder, attention)
        context = {
            **self.admin_site.each_context(request),
            "title": _("Lanes") if queue is None else _("Lane %(lane)s") % {"lane": lane},
            "opts": self.opts,
            "operator": operator,
            "lane": queue,
            "busy": busy,
            "waiting": waiting_lanes() if queue is None else [],
            "paused": list(PausedLane.objects.order_by("-paused_at")[:100]) if queue is None else [],
            "pause_form": PauseLaneForm(initial={"lane": lane}) if queue is not None and not queue.paused else None,
            "moment": moment,
        }
        return TemplateResponse(request, "admin/django_wakes/wake/lanes.html", context)

    def _pause_or_resume(self, request: HttpRequest) -> HttpResponse:
        form = PauseLaneForm(request.POST)
        back = reverse("admin:django_wakes_lanes")
        if not form.is_valid():
            self.message_user(request, _("Not done: %(why)s") % {"why": form.errors.as_text()}, messages.ERROR)
            return HttpResponseRedirect(back)
        lane = form.cleaned_data["lane"]
        back += "?" + form.lane_query()
        user = request.user.get_username()
        try:
            if request.POST.get("do") == "resume":
                done = engine.resume_lane(lane)
                text = (
                    _("Lane %(lane)s resumed: its next wake is claimable now.")
                    if done
                    else _("Lane %(lane)s was not paused.")
                )
            else:
                done = engine.pause_lane(lane, by=user, reason=form.cleaned_data["reason"])
                text = (
                    _("Lane %(lane)s paused: no further wake of it is claimed until resumed.")
                    if done
                    else _("Lane %(lane)s was already paused.")
                )
        except WakeError as exc:
            self.message_user(request, _("Not done: %(why)s.") % {"why": exc}, messages.ERROR)
            return HttpResponseRedirect(back)
        self.message_user(request, text % {"lane": lane}, messages.SUCCESS if done else messages.WARNING)
        return HttpResponseRedirect(back)
