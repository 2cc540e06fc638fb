"""The ``once()`` receipt ledger: make an irreversible effect happen at most once across re-runs."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from typing import Any, Literal

from django.db import IntegrityError, close_old_connections, connections, router, transaction

from . import clock, validation
from .conf import wakes_settings
from .exceptions import InvalidIntent, InvalidWake, OnceInProgress, OnceInterrupted
from .models import Receipt, ReceiptState

POLL_SECONDS = 0.05


def _using() -> str:
    return router.db_for_write(Receipt)


class _Heartbeat:
    """Extend a running receipt's lease while ``fn`` runs, so a long effect is not taken for dead."""

    def __init__(self, receipt_id: int, owner: str) -> None:
        self._id, self._owner = receipt_id, owner
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"once-heartbeat-{receipt_id}", daemon=True)

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        period = max(wakes_settings.once_lease.total_seconds() / 3, 0.05)
        try:
            while not self._stop.wait(period):
                Receipt.objects.using(_using()).filter(
                    pk=self._id, owner=self._owner, state=ReceiptState.RUNNING
                ).update(lease_until=clock.now() + wakes_settings.once_lease)
        finally:
            connections.close_all()


def once(
    session_id: str,
    key: str,
    fn: Callable[[], Any],
    *,
    on_interrupted: Literal["raise", "retry"] = "raise",
    wait: float | None = None,
) -> Any:
    """Run ``fn()`` at most once ever for ``(session_id, key)`` and return its (JSON) result.

    The receipt is committed *before* ``fn`` runs, so a crash inside ``fn`` is remembered:
    a later call raises :class:`OnceInterrupted` (the effect may or may not have happened) unless
    ``on_interrupted="retry"``. A replay returns the stored result without calling ``fn``. A
    concurrent caller waits up to ``wait`` seconds (``WAKES["ONCE_WAIT"]``) for the winner, then
    raises :class:`OnceInProgress`. If ``fn`` raises, the receipt is released and the error
    propagates, so a later call may try again. Call it outside a database transaction: the
    receipt must be committed to protect anything.
    """
    session_id = validation.key(session_id, name="once(): session_id")
    key = validation.key(key, name="once(): key")
    using = _using()
    if connections[using].in_atomic_block:
        raise InvalidWake("once() must not run inside a transaction: its receipt has to commit before fn runs")
    deadline = time.monotonic() + (wait if wait is not None else wakes_settings.once_wait.total_seconds())
    while True:
        owner = secrets.token_hex(16)
        now = clock.now()
        try:
            with transaction.atomic(using=using):
                receipt = Receipt.objects.using(using).create(
                    session_id=session_id,
                    key=key,
                    state=ReceiptState.RUNNING,
                    owner=owner,
                    lease_until=now + wakes_settings.once_lease,
                    created_at=now,
                )
        except IntegrityError:
            receipt = None
        if receipt is not None:
            return _run(receipt, fn, using)
        existing = Receipt.objects.using(using).filter(session_id=session_id, key=key).first()
        if existing is None:
            continue  # released between our INSERT and our read: try to win it again
        if existing.state == ReceiptState.DONE:
            return existing.result
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
                return _run(existing, fn, using)
            continue
        if time.monotonic() >= deadline:
            raise OnceInProgress(f"once({session_id!r}, {key!r}) is running elsewhere and did not finish in time")
        time.sleep(POLL_SECONDS)
        close_old_connections()


def _run(receipt: Receipt, fn: Callable[[], Any], using: str) -> Any:
    try:
        with _Heartbeat(receipt.pk, receipt.owner):
            value = fn()
    except BaseException:
        Receipt.objects.using(using).filter(pk=receipt.pk, owner=receipt.owner).delete()
        raise
    try:
        stored = validation.json_value(value, name="once() result")
    except InvalidIntent:
        # The effect happened: record it as done (with no result) so it never runs again, then say why.
        Receipt.objects.using(using).filter(pk=receipt.pk, owner=receipt.owner).update(
            state=ReceiptState.DONE, result=None, completed_at=clock.now()
        )
        raise
    Receipt.objects.using(using).filter(pk=receipt.pk, owner=receipt.owner).update(
        state=ReceiptState.DONE, result=stored, completed_at=clock.now()
    )
    return stored
