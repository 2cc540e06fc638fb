"""Accepted webhook deliveries: what refuses a replayed delivery, per source.

A model of the vocabulary kept apart from :mod:`django_wakes.models` (which re-exports it, and is where
Django finds it) only so that module stays one a reader can hold in their head.
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from .fields import KEY_LENGTH, InstantField


class WebhookDelivery(models.Model):
    """A signed webhook delivery that was accepted: its id, per source, is refused if it comes again.

    Inserted in the transaction that delivers the event, so a replay is refused (the unique
    constraint decides, across processes) and a delivery that failed left no row and can be retried.
    ``body_digest`` is the SHA-256 of the body for a scheme that signs the body alone (GitHub): its
    delivery id is not signed, so the body, unique per source too, is what recognises a replay (NULLs
    are distinct in a unique constraint on every database, so the other schemes' rows never clash).
    ``django_wakes.engine.forget_deliveries`` deletes old rows.
    """

    id = models.BigAutoField(primary_key=True)
    source = models.CharField(_("source"), max_length=100)
    delivery_id = models.CharField(_("delivery id"), max_length=KEY_LENGTH)
    body_digest = models.CharField(_("body digest"), max_length=64, null=True, blank=True)  # noqa: DJ001 - NULLs are distinct in the unique constraint
    received_at = InstantField(_("received"))

    class Meta:
        app_label = "django_wakes"
        verbose_name = _("webhook delivery")
        verbose_name_plural = _("webhook deliveries")
        constraints = [
            models.UniqueConstraint(fields=["source", "delivery_id"], name="webhook_delivery_once"),
            models.UniqueConstraint(fields=["source", "body_digest"], name="webhook_delivery_body_once"),
        ]
        indexes = [
            models.Index(fields=["received_at"], name="webhook_delivery_received_idx"),
            models.Index(fields=["source", "received_at"], name="webhook_delivery_rate_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.source} delivery {self.delivery_id}"
