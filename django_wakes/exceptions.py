"""The package's exceptions: everything a caller can catch is a :class:`WakeError`."""

from __future__ import annotations

from typing import Any


class WakeError(Exception):
    """Base class of every error django-wakes raises on purpose."""


class InvalidWake(WakeError, ValueError):
    """The arguments to a create call are wrong; nothing was written."""


class InvalidDuration(InvalidWake):
    """A duration string or value could not be understood."""


class InvalidTime(InvalidWake):
    """A point in time is naive, not finite, or of the wrong type."""


class InvalidIntent(InvalidWake):
    """An intent (or answer, or payload) is not JSON or is too large."""


class InvalidSchedule(InvalidWake):
    """A cron expression, interval, time zone or catch-up policy is not usable."""


class UnknownKind(InvalidWake):
    """No sink is registered for this ``kind``."""


class AlreadyRegistered(WakeError):
    """A sink is already registered for this ``kind``."""


class NotRegistered(WakeError):
    """No sink is registered for this ``kind`` (on unregister)."""


class ApprovalError(WakeError):
    """Base class of the errors :func:`django_wakes.resolve` raises."""


class ApprovalNotFound(ApprovalError):
    """No approval wake answers to this token."""


class ApprovalAlreadyResolved(ApprovalError):
    """The approval was already answered (or cancelled): tokens are one-time.

    ``wake`` is the approval as it is now (its ``result`` holds the answer that was recorded), for a
    caller that may show it: the actor was authorized for the approval's workspace before this was raised.
    """

    def __init__(self, message: str, wake: Any = None) -> None:
        super().__init__(message)
        self.wake = wake


class ApprovalExpired(ApprovalError):
    """The approval expired before the answer arrived."""


class ApprovalDenied(ApprovalError):
    """The ``AUTHORIZE`` hook refused this actor (or no hook is configured)."""


class ApprovalSuperseded(ApprovalError):
    """The host re-issued this approval's link (:func:`django_wakes.reissue_approval`): a newer link was sent.

    Raised for the old token while the approval still waits, so its holder is told to use the newer
    link rather than "not found". ``wake`` is the approval.
    """

    def __init__(self, message: str, wake: Any = None) -> None:
        super().__init__(message)
        self.wake = wake


class ApprovalReissueLimit(ApprovalError):
    """:func:`django_wakes.reissue_approval` was called more often for one approval than it allows; nothing changed."""


class BudgetExceeded(InvalidWake):
    """An agent's wake would go over a limit of ``WAKES["BUDGETS"]``; ``limit`` names which. Nothing was written."""

    def __init__(self, limit: str, message: str) -> None:
        super().__init__(message)
        self.limit = limit


class InvalidLimit(InvalidWake):
    """A limit (``WAKES["LIMITS"]``, ``WAKES["WORKSPACE_LIMIT"]``, a rate such as ``"100/1m"``) is malformed."""


class SessionStopped(InvalidWake):
    """The session was stopped (:func:`django_wakes.stop_session`): it takes no new wakes until resumed."""


class IdempotencyConflict(InvalidWake):
    """The ``idempotency_key`` already names a wake this call may not have back; nothing was written or changed.

    A key is reused by another session (or by host code for a session's wake, or the other way
    round), or a :func:`django_wakes.request_approval` replay asks something else than the
    approval the key names (another prompt or intent, or the key names no approval): the engine
    neither returns that wake nor rotates its token.
    """


class OperationRefused(WakeError):
    """An operator transition (``engine.operate``) does not apply to the wake or lane as it is now; nothing changed."""


class OnceError(WakeError):
    """Base class of the errors :func:`django_wakes.once` raises."""


class OnceInProgress(OnceError):
    """Another caller is running this ``once`` key and did not finish in time."""


class OnceInterrupted(OnceError):
    """A previous run of this ``once`` key died inside ``fn``: its effect may or may not have happened."""
