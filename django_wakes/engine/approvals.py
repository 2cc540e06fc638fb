"""Re-issuing an approval's link: the host's explicit, bounded way to a new token.

A model (or any caller) that repeats ``request_approval`` with the same idempotency key gets the
existing approval back and no token (:func:`~django_wakes.engine.create.request_approval`): a replay
never rotates the link a person may already hold, so it cannot keep the human from answering. When the
host does need a new link (the first was lost, or sent to the wrong person), it asks for one here. The
old token's hash moves to :class:`~django_wakes.models.RetiredApprovalToken`, so the old link says "a
newer link was sent" (:class:`~django_wakes.exceptions.ApprovalSuperseded`) instead of "not found",
and a page a person opened through it before the re-issue can still be answered.
"""

from __future__ import annotations

import secrets

from django.db import transaction

from .. import clock
from ..exceptions import ApprovalNotFound, ApprovalReissueLimit
from ..models import RetiredApprovalToken, State, TriggerType, Wake
from ..validation import wake_pk
from .shared import db_alias, hash_token, logger
from .triggers import _still_waiting
from .waiting import ApprovalRequest

__all__ = ["MAX_REISSUES", "reissue_approval"]

#: At most this many re-issues per approval: the retired hashes it keeps are bounded, and so is how
#: many links to one approval can ever have been handed out (1 + MAX_REISSUES).
MAX_REISSUES = 10


def reissue_approval(wake_id: int) -> ApprovalRequest:
    """Give a still-waiting approval a new one-time token; return it with the approval.

    For the host only (no tool calls this): the token it returns is the one to send, and the previous
    link is retired, answering "a newer link was sent" from then on. Nothing else changes (prompt,
    expiry, answer). No ``ON_APPROVAL`` hook is called: the caller delivers the new link itself.

    Raise :class:`~django_wakes.exceptions.ApprovalNotFound` (no approval of that id),
    :class:`~django_wakes.exceptions.ApprovalExpired` or :class:`~django_wakes.exceptions.ApprovalAlreadyResolved`
    (it waits for no answer any more), :class:`~django_wakes.exceptions.ApprovalReissueLimit` after
    :data:`MAX_REISSUES` re-issues.
    """
    pk = wake_pk(wake_id, caller="reissue_approval()")
    token = secrets.token_urlsafe(32)
    using = db_alias()
    with transaction.atomic(using=using):
        wake = Wake.objects.using(using).select_for_update().filter(pk=pk, trigger_type=TriggerType.ON_APPROVAL).first()
        if wake is None:
            raise ApprovalNotFound(f"no approval has the id {pk}")
        _still_waiting(wake)
        retired = RetiredApprovalToken.objects.using(using).filter(wake=wake).count()
        if retired >= MAX_REISSUES:
            raise ApprovalReissueLimit(
                f"approval {pk} was re-issued {retired} times, the most allowed ({MAX_REISSUES}): "
                "cancel it and request a new approval instead"
            )
        now = clock.now()
        assert wake.token_hash is not None  # a waiting approval always has one
        RetiredApprovalToken.objects.using(using).create(token_hash=wake.token_hash, wake=wake, retired_at=now)
        wake.token_hash = hash_token(token)
        Wake.objects.using(using).filter(pk=pk, state=State.PENDING).update(token_hash=wake.token_hash, updated_at=now)
    logger.info("approval %s: link re-issued (%d of at most %d)", pk, retired + 1, MAX_REISSUES)
    return ApprovalRequest(wake=wake, token=token)
