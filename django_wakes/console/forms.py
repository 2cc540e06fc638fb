"""The operator console's inputs: a moment in the operator's zone, a lane to pause or resume."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django import forms
from django.utils.translation import gettext_lazy as _

from ..models import KEY_LENGTH


class MomentForm(forms.Form):
    """One point in time, typed in the operator's time zone (Django's current one), to the second.

    Django turns it into an aware datetime; a time that does not exist or is ambiguous there
    (a daylight-saving change) is refused with a message rather than guessed.
    """

    at = forms.DateTimeField(
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": "1"}, format="%Y-%m-%dT%H:%M:%S"),
    )

    def __init__(self, *args: Any, label: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if label is not None:
            self.fields["at"].label = label


class PauseLaneForm(forms.Form):
    """Which lane to pause or resume (keys may hold ``/`` and ``:``, so it is a field, not a URL segment)."""

    lane = forms.CharField(max_length=KEY_LENGTH, widget=forms.HiddenInput, strip=False)
    reason = forms.CharField(
        label=_("Reason (optional)"),
        required=False,
        max_length=500,
        widget=forms.TextInput(attrs={"size": 60}),
    )

    def lane_query(self) -> str:
        """The query string of this lane's page."""
        return self.query_for(self.cleaned_data["lane"])

    @staticmethod
    def query_for(lane: str) -> str:
        return urlencode({"lane": lane})
