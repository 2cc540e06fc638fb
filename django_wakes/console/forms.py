"""The operator console's inputs: a moment in the operator's zone, a lane to pause or resume."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django import forms
from django.utils.translation import gettext_lazy as _

from ..models import KEY_LENGTH


class MomentInput(forms.DateTimeInput):
    """A time typed as text on the 24-hour clock, ``2026-10-22 14:05:00``, as the console writes times.

    Not ``<input type="datetime-local">``: the browser draws that in its own locale's format, 12-hour
    with AM/PM in en-US, beside pages that show every time on the 24-hour clock. Django reads what is
    typed with its ``DATETIME_INPUT_FORMATS`` and ISO 8601 (``2026-10-22T14:05`` too).
    """

    def __init__(self, *, seconds: bool = True) -> None:
        shape = "YYYY-MM-DD HH:MM:SS" if seconds else "YYYY-MM-DD HH:MM"
        attrs = {
            "class": "vTextField wake-moment",
            "placeholder": shape,
            "size": str(len(shape)),
            "autocomplete": "off",
            "spellcheck": "false",
        }
        super().__init__(attrs=attrs, format="%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")


class MomentForm(forms.Form):
    """One point in time, typed in the operator's time zone (Django's current one), to the second.

    Django turns it into an aware datetime; a time that does not exist or is ambiguous there
    (a daylight-saving change) is refused with a message rather than guessed.
    """

    at = forms.DateTimeField(widget=MomentInput())

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
