"""The approval answer form: a decision and an optional comment, nothing else."""

from __future__ import annotations

from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

APPROVE, REJECT = "approve", "reject"
COMMENT_MAX_CHARS = 2000


class ApprovalForm(forms.Form):
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
