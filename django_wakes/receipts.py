"""The ``once()`` receipt ledger: make an irreversible effect happen at most once across re-runs."""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from django.db import IntegrityError, close_old_connections, connections, router, transaction

from . import clock, validation
from .conf import wakes_settings
from .exceptions import InvalidIntent, InvalidWake, OnceInProgress, OnceInterrupted
from .models import Receipt, ReceiptState
from .transient import TRANSIENT_ERRORS, backoff_delay, drop_broken_connections

POLL_SECONDS = 0.05

#: The fewest tries of a receipt write before a transient database error is raised, however short the wait.
MIN_TRIES = 6

logger = logging.getLogger("django_wakes")

T = TypeVar("T")


def _using() -> str:
    return router.db_for_write(Receipt)


def _retrying(label: str, work: Callable[[], T], *, until: float, using: str) -> T:
    """Run ``work`` (one statement or one transaction), again after a transient database error.

    Tries with capped, jittered backoff until the ``time.monotonic()`` deadline ``until`` (and at
    least :data:`MIN_TRIES` times), then raises the last error. Every receipt write is conditional
    (the unique key, the owner token), so a try that committed but lost its answer is harmless
    to repeat: the next one finds the row already as it wanted it.
    """
    attempt = 0
    while True:
        attempt += 1
        try:
            result = work()
        except TRANSIENT_ERRORS as exc:
            delay = backoff_delay(attempt)
            if connections[using].in_atomic_block or (attempt >= MIN_TRIES and time.monotonic() + delay > until):
                raise
            level = logging.WARNING if attempt == 3 else logging.INFO
            logger.log(level, "%s failed (%s: %s); trying again", label, type(exc).__name__, exc)
            drop_broken_connections()
            time.sleep(delay)
            continue
        if attempt > 3:
            logger.warning("%s succeeded after %d tries", label, attempt)
        return result


class _Heartbeat:
    """Extend a running receipt's lease while ``fn`` runs, so a long effect is not taken for dead.

    Keeps :attr:`lease_ends`, the ``time.monotonic()`` moment the lease in the database runs to at the
    least (from before the last write that renewed it): the receipt's last write is tried until then.
    A renewal that meets a transient database error is tried again at the next beat.
    """

    def __init__(self, receipt_id: int, owner: str, confirmed: float) -> None:
        self._id, self._owner = receipt_id, owner
        self.lease_ends = confirmed + wakes_settings.once_lease.total_seconds()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"once-heartbeat-{receipt_id}", daemon=True)

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        lease = wakes_settings.once_lease
        period = max(lease.total_seconds() / 3, 0.05)
        failures = 0
        try:
            while not self._stop.wait(min(period, backoff_delay(failures)) if failures else period):
                asked = time.monotonic()
                try:
                    renewed = (
                        Receipt.objects.using(_using())
                        .filter(pk=self._id, owner=self._owner, state=ReceiptState.RUNNING)
                        .update(lease_until=clock.now() + lease)
                    )
                except TRANSIENT_ERRORS as exc:
                    failures += 1
                    logger.info("once() receipt %s: renewing its lease failed (%s); trying again", self._id, exc)
                    drop_broken_connections()
                    continue
                failures = 0
                if renewed:
                    self.lease_ends = asked + lease.total_seconds()
        finally:
            connections.close_all()


def once(
    session_id: str,
    key: str,
    fn: Callable[[], Any],
    *,
    on_interrupted: Literal["raise", "retry"] = "raise",
    wait: float | None = None,
    workspace_id: str = "",
) -> Any:
    """Run ``fn()`` at most once ever for ``(workspace_id, session_id, key)`` and return its (JSON) result.

    Pass ``workspace_id`` (a wake's own) where tenants may share session ids: receipts are kept per
    workspace, so one tenant's receipt never answers another's call. Without it, receipts are
    the host's one workspace ``""``.

    The receipt is committed *before* ``fn`` runs, so a crash inside ``fn`` is remembered:
    a later call raises :class:`OnceInterrupted` (the effect may or may not have happened) unless
    ``on_interrupted="retry"``. A replay returns the stored result without calling ``fn``. A
    concurrent caller waits up to ``wait`` seconds (``WAKES["ONCE_WAIT"]``) for the winner, then
    raises :class:`OnceInProgress`. If ``fn`` raises, the receipt is released and the error
    propagates, so a later call may try again. Call it outside a database transaction: the
    receipt must be committed to protect anything.

    It rides through a lost connection (a failover, a restart): taking the receipt is tried again
    for up to ``wait`` seconds, and recording it done after ``fn`` returned (or released after ``fn``
    raised) for as long as the receipt's lease holds (``WAKES["ONCE_LEASE"]``), so an effect that
    ran is recorded as done once the database is back.
    """
    session_id = validation.key(session_id, name="once(): session_id")
    key = validation.key(key, name="once(): key")
    workspace = validation.key(workspace_id, name="once(): workspace_id") if workspace_id != "" else ""
    using = _using()
    if connections[using].in_atomic_block:
        raise InvalidWake("once() must not run inside a transaction: its receipt has to commit before fn runs")
    deadline = time.monotonic() + (wait if wait is not None else wakes_settings.once_wait.total_seconds())
    # One owner token for the whole call: a try that took the receipt but lost the answer (the
    # connection dropped after the commit) recognises the receipt as its own on the next try.
    owner = secrets.token_hex(16)
    label = f"once({session_id!r}, {key!r}): taking the receipt"
    while True:
        asked = time.monotonic()
        taken = _retrying(
            label,
            lambda: _take((workspace, session_id, key), owner, on_interrupted, using),
            until=deadline,
            using=using,
        )
        if isinstance(taken, Receipt):
            return _run(taken, fn, using, confirmed=asked)
        if taken is _AGAIN:
            continue
        if taken is not _BUSY:
            return taken.value
        if time.monotonic() >= deadline:
            raise OnceInProgress(f"once({session_id!r}, {key!r}) is running elsewhere and did not finish in time")
        time.sleep(POLL_SECONDS)
        close_old_connections()


class _Replay:
    """A receipt already done: its stored result."""

    def __init__(self, value: Any) -> None:
        self.value = value


_BUSY = _Replay(None)  # the receipt is running elsewhere under a live lease: wait
_AGAIN = _Replay(None)  # the receipt changed hands under us: try at once


def _take(
    receipt: tuple[str, str, str], owner: str, on_interrupted: Literal["raise", "retry"], using: str
) -> Receipt | _Replay:
    """One try at the ``(workspace, session, key)`` receipt: ours to run (a :class:`Receipt`), done (a
    :class:`_Replay`), :data:`_BUSY` (running elsewhere) or :data:`_AGAIN` (it changed hands under us)."""
    workspace, session_id, key = receipt
    now = clock.now()
    try:
        with transaction.atomic(using=using):
            return Receipt.objects.using(using).create(
                workspace_id=workspace,
                session_id=session_id,
                key=key,
                state=ReceiptState.RUNNING,
                owner=owner,
                lease_until=now + wakes_settings.once_lease,
                created_at=now,
            )
    except IntegrityError:
        pass
    existing = Receipt.objects.using(using).filter(workspace_id=workspace, session_id=session_id, key=key).first()
    if existing is None:
        return _AGAIN  # released between our INSERT and our read: try to win it again
    if existing.state == ReceiptState.DONE:
        return _Replay(existing.result)
    if existing.owner == owner:
        return existing  # an earlier try of this call took it, and the answer was lost
    if existing.lease_until <= clock.now():
        if on_interrupted != "retry":
            raise OnceInterrupted(
                f"once({session_id!r}, {key!r}) was interrupted: a previous run died inside fn; "
                "its effect may or may not have happened (pass on_interrupted='retry' to run it again)"
            )
        taken = (
            Receipt.objects.using(using)
            .filter(pk=existing.pk, owner=existing.owner, state=ReceiptState.RUNNING)
            .update(owner=owner, lease_until=clock.now() + wakes_settings.once_lease)
        )
        if taken:
            existing.owner = owner
            return existing
        return _AGAIN  # another caller took it over first
    return _BUSY


def _run(receipt: Receipt, fn: Callable[[], Any], using: str, *, confirmed: float) -> Any:
    rows = Receipt.objects.using(using).filter(pk=receipt.pk, owner=receipt.owner)
    name = f"once({receipt.session_id!r}, {receipt.key!r})"
    heartbeat = _Heartbeat(receipt.pk, receipt.owner, confirmed)
    try:
        with heartbeat:
            value = fn()
    except BaseException:
        try:
            _retrying(f"{name}: releasing the receipt", rows.delete, until=heartbeat.lease_ends, using=using)
        except TRANSIENT_ERRORS:  # fn's own error matters more; the receipt reads as interrupted after its lease
            logger.warning("%s: fn raised and its receipt could not be released: the database is away", name)
        raise
    try:
        stored = validation.json_value(value, name="once() result")
    except InvalidIntent:
        # The effect happened: record it as done (with no result) so it never runs again, then say why.
        _retrying(
            f"{name}: recording it done",
            lambda: rows.update(state=ReceiptState.DONE, result=None, completed_at=clock.now()),
            until=heartbeat.lease_ends,
            using=using,
        )
        raise
    _retrying(
        f"{name}: recording it done",
        lambda: rows.update(state=ReceiptState.DONE, result=stored, completed_at=clock.now()),
        until=heartbeat.lease_ends,
        using=using,
    )
    return stored
