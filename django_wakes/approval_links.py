"""The retired links of approvals: what :func:`~django_wakes.reissue_approval` keeps of a link it replaced.

A model of the vocabulary kept apart from :mod:`django_wakes.models` (which re-exports it, and is where
Django finds it) only so that module stays one a reader can hold in their head.
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from .fields import InstantField


class RetiredApprovalToken(models.Model):
    """The hash of an approval link the host replaced (:func:`~django_wakes.reissue_approval`).

    Kept so the old link says "a newer link was sent" rather than "not found", and so a page opened
    through it before the re-issue can still be answered. Only the SHA-256 is kept, never the token;
    at most ``engine.approvals.MAX_REISSUES`` rows per approval, deleted with it.
    """

    token_hash = models.CharField(_("token hash"), max_length=64, unique=True, editable=False)
    wake = models.ForeignKey("django_wakes.Wake", on_delete=models.CASCADE, related_name="retired_tokens")
    retired_at = InstantField(_("retired at"))

    class Meta:
        app_label = "django_wakes"
        verbose_name = _("retired approval link")
        verbose_name_plural = _("retired approval links")

    def __str__(self) -> str:
        return f"a retired link of approval {self.wake_id}"
