"""The approval answer a person gives on the approval page: a decision and an optional comment."""

from __future__ import annotations

from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

APPROVE, REJECT = "approve", "reject"
COMMENT_MAX_CHARS = 2000


class ApprovalForm(forms.Form):
    #: The id of the approval the page showed (not a secret): the answer is refused if the session
    #: holds another approval by the time it is posted, so it never lands on a prompt not read.
    wake = forms.IntegerField(widget=forms.HiddenInput)
    decision = forms.ChoiceField(
        label=_("Your answer"),
        choices=[(APPROVE, _("Approve")), (REJECT, _("Reject"))],
        widget=forms.RadioSelect,
    )
    comment = forms.CharField(
        label=_("Comment (optional)"),
        required=False,
        max_length=COMMENT_MAX_CHARS,
        widget=forms.Textarea(attrs={"rows": 4, "cols": 60}),
    )

    def answer(self) -> dict[str, Any]:
        """Return the answer handed to the waiting wake: ``{"approved": bool, "comment": str}``."""
        return {"approved": self.cleaned_data["decision"] == APPROVE, "comment": self.cleaned_data["comment"]}
