"""Template filters of the operator console: times to the second with UTC on hover, links to a lane's page."""

from __future__ import annotations

from datetime import datetime

from django import template
from django.urls import reverse

from ..console.display import moment as _moment
from ..console.forms import PauseLaneForm

register = template.Library()


@register.filter
def moment(value: datetime | None) -> str:
    """A time to the second in the operator's time zone (with its name), UTC on hover."""
    return _moment(value, zone=True)


@register.filter
def lane_url(lane: str) -> str:
    """The lanes page of one lane (the key goes in the query string: it may hold ``/``)."""
    return reverse("admin:django_wakes_lanes") + "?" + PauseLaneForm.query_for(lane)
