"""Firing and settling: run a claimed wake's sink, then write down how it ended under the claim's fence.

Successes are settled in batches (one transaction for many wakes); failures, retries and defers at
once. Every settle is a conditional UPDATE on ``(id, state=firing, claim_token)``: a runner whose
lease another runner took over is fenced out, and its outcome is discarded and logged.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from django.db import connections, transaction

from .. import clock, signals, tracing
from ..conf import call_session_hook, wakes_settings
from ..exceptions import InvalidWake
from ..logs import about
from ..models import Outcome, State, Wake, WakeAttempt
from ..sinks import KEEP, SESSION_TURN, Defer, Done, Retry, Sink, Stop, call_sink, registry
from ..states import Disposition
from ..timeutil import to_datetime
from ..validation import json_value
from . import create, interrupts, limit_rules, sessions
from .failures import OUTAGE_RETRY, _settle_defer, _settle_failure, _settle_outage, _settle_superseded
from .fencing import (
    LET_GO,
    FireOutcome,
    _error_type,
    _fenced_out,
    _format_error,
    bury_locked,
    fenced,
    release,
)
from .limit_slots import started
from .shared import ROLLBACK_TRIES, db_alias, firing_wake, is_outage, logger, ms, retry_rolled_back

if TYPE_CHECKING:
    from .leases import Claim

__all__ = [
    "OUTAGE_RETRY",
    "FireOutcome",
    "Succeeded",
    "bury_locked",
    "fire",
    "prepare_sink",
    "release",
    "run_sink",
    "settle_successes",
    "sink_raised",
    "sink_returned",
]


@dataclass(frozen=True)
class Succeeded:
    """A sink returned normally; the wake is still ``firing`` until :func:`settle_successes` runs."""

    claim: Claim
    stop: bool
    finished_at: datetime
    scratch: Any = KEEP
    output: Any = KEEP

    @property
    def outcome(self) -> str:
        if self.claim.expired:
            return Outcome.EXPIRED
        return Outcome.STOPPED if self.stop else Outcome.FIRED


def fire(claim: Claim, *, tries: int | None = ROLLBACK_TRIES) -> FireOutcome:
    """Run the sink for a claimed wake, then settle it under the claim's fence token."""
    ran = run_sink(claim, tries=tries)
    outcome = settle_successes([ran], tries=tries)[0] if isinstance(ran, Succeeded) else ran
    tracing.finished(claim, outcome.outcome)
    return outcome


def run_sink(claim: Claim, *, tries: int | None = ROLLBACK_TRIES) -> FireOutcome | Succeeded:
    """Run the sink; settle at once anything but a plain success, which is returned for settling.

    Splitting the two lets a runner settle a batch of successes in one transaction (one commit
    instead of one per wake) while failures, retries and defers are written down immediately.
    Anything the sink raises is a failed attempt, ``SystemExit`` and ``KeyboardInterrupt`` included
    (code lifted from a script calls ``sys.exit()``), unless a signal handler raised it
    (:mod:`.interrupts`: the process is being stopped). ``tries`` bounds how often a settle the
    database aborted is tried again (``None``: until it succeeds, which a runner uses: the sink has
    run, so its outcome must not be dropped). A guarded
    wake (a dead runner once held it) first records that its sink is starting, so a runner dying
    now is charged for this attempt and a runner dying before now is not.
    """
    ready = prepare_sink(claim, tries=tries)
    if isinstance(ready, FireOutcome):
        return ready
    running = firing_wake.set(claim.wake)
    try:
        with tracing.sink(claim):
            returned = call_sink(ready, claim.wake, dict(claim.result))
    except BaseException as exc:  # noqa: BLE001 - sys.exit() in a sink fails its attempt, not the pass
        if interrupts.by_signal(exc):
            raise  # the process is being stopped (a real Ctrl-C): the lease decides what happens to the wake
        return sink_raised(claim, exc, tries=tries)
    finally:
        firing_wake.reset(running)
    return sink_returned(claim, returned, tries=tries)


def prepare_sink(claim: Claim, *, tries: int | None = ROLLBACK_TRIES) -> FireOutcome | Sink:
    """Everything before a sink starts: return the sink to call, or the outcome that replaces it.

    No sink registered any more (handed back), the session stopped (superseded), the session busy
    (deferred, not an attempt), or the claim lost while recording a guarded wake's start (fenced).
    """
    wake = claim.wake
    label = f"settling wake {wake.pk}"
    sink_fn = registry.get(wake.kind)
    if sink_fn is None:
        retry_rolled_back(f"handing back wake {wake.pk}", lambda: release(claim), tries=tries)
        return FireOutcome(Disposition.UNWAKEABLE, settled=True)
    stopped = wake.session_id is not None and retry_rolled_back(
        f"checking session {wake.session_id}",
        lambda: sessions.is_stopped(wake.session_id, workspace_id=wake.workspace_id),
        tries=tries,
    )
    if stopped:
        return retry_rolled_back(label, lambda: _settle_superseded(claim), tries=tries)
    busy = wakes_settings.session_busy if wake.kind == SESSION_TURN else None
    if busy is not None:
        try:
            is_busy = call_session_hook(busy, wake.session_id, workspace_id=wake.workspace_id)
        except BaseException as exc:  # noqa: BLE001 - the host's hook failed: a failed attempt, like a sink's
            if interrupts.by_signal(exc):
                raise
            return sink_raised(claim, exc, tries=tries)
        if is_busy:
            later = Defer(until=wakes_settings.busy_retry)
            return retry_rolled_back(label, lambda: _settle_defer(claim, later, busy=True), tries=tries)
    if wake.guarded and not retry_rolled_back(
        f"recording wake {wake.pk}'s start", lambda: _record_start(claim), tries=tries
    ):
        return _fenced_out(claim)
    if limit_rules.active():  # a rate slot counts this start from now (engine.limit_slots)
        retry_rolled_back(f"recording wake {wake.pk}'s start", lambda: started(db_alias(), claim), tries=tries)
    return sink_fn


def sink_raised(claim: Claim, exc: BaseException, *, tries: int | None = ROLLBACK_TRIES) -> FireOutcome:
    """Settle an attempt whose sink raised: retried with backoff, or dead after ``max_attempts``.

    A database outage inside the sink (:func:`~django_wakes.transient.is_outage`: a failover, a restart, a read-only
    primary) is not the sink's failure: the wake is tried again soon and the attempt is not charged.
    """
    wake = claim.wake
    if is_outage(exc):
        error, error_type = _format_error(exc), _error_type(exc)
        return retry_rolled_back(
            f"settling wake {wake.pk}", lambda: _settle_outage(claim, exc, error, error_type), tries=tries
        )
    logger.error(
        "wake %s (kind=%s lane=%s) failed: %s",
        wake.pk,
        wake.kind,
        wake.serial_key,
        exc,
        exc_info=exc,
        extra=about(wake, claim.runner_id),
    )
    error = _format_error(exc)
    error_type = _error_type(exc)
    with tracing.settling(claim):
        return retry_rolled_back(
            f"settling wake {wake.pk}", lambda: _settle_failure(claim, error, error_type=error_type), tries=tries
        )


def sink_returned(claim: Claim, returned: Any, *, tries: int | None = ROLLBACK_TRIES) -> FireOutcome | Succeeded:
    """Settle at once a sink's ``Retry``/``Defer`` (or an invalid scratch); return a success for batching."""
    label = f"settling wake {claim.wake.pk}"
    if isinstance(returned, Retry | Defer):
        with tracing.settling(claim):
            return retry_rolled_back(label, lambda: _settle_returned(claim, returned), tries=tries)
    marker = isinstance(returned, Stop | Done)
    scratch = returned.scratch if marker else KEEP
    output = returned.output if marker else KEEP
    try:
        scratch = scratch if scratch is KEEP else json_value(scratch, name="scratch")
        output = output if output is KEEP else json_value(output, name="output")
    except InvalidWake as exc:
        error = f"the sink returned an invalid {type(returned).__name__}: {exc}"
        with tracing.settling(claim):
            return retry_rolled_back(label, lambda: _settle_failure(claim, error), tries=tries)
    return Succeeded(claim, stop=isinstance(returned, Stop), finished_at=clock.now(), scratch=scratch, output=output)


def _record_start(claim: Claim) -> bool:
    """Write down that this claim's sink starts now; ``False`` if the claim is no longer ours."""
    now = clock.now()
    claim.wake.sink_started_at = now
    return bool(fenced(db_alias(), claim).update(sink_started_at=now))


def settle_successes(done: list[Succeeded], *, tries: int | None = ROLLBACK_TRIES) -> list[FireOutcome]:
    """Settle sinks that returned normally, all in one transaction; return an outcome for each.

    Each row is fenced by its claim token: a wake whose lease another runner took over meanwhile
    is left to that runner (its outcome here is discarded and reported as ``fenced``).
    """
    if not done:
        return []
    traced = [d.claim for d in done if d.claim.trace is not None]
    started = tracing.now_ns() if traced else 0
    outcomes = retry_rolled_back(f"settling {len(done)} fired wake(s)", lambda: _settle_successes(done), tries=tries)
    if traced:
        tracing.settled_together(traced, started, tracing.now_ns())
    return outcomes


def _settle_successes(done: list[Succeeded]) -> list[FireOutcome]:
    using = db_alias()
    now = clock.now()
    if connections[using].vendor == "postgresql" and all(_plain(d) for d in done):
        winners = _settle_in_one_statement(using, done, now)
        for d in winners:
            transaction.on_commit(
                partial(signals.wake_fired.send, sender=Wake, wake=d.claim.wake, outcome=d.outcome), using=using
            )
        return _report(done, winners)
    rows = Wake.objects.using(using)
    settled = {
        **LET_GO,
        "last_error": "",
        "settled_at": now,
        "updated_at": now,
    }
    with transaction.atomic(using=using):
        if len(done) == 1:  # the common single settle: the fenced UPDATE's row count decides
            (only,) = done
            won = rows.filter(pk=only.claim.wake.pk, state=State.FIRING, claim_token=only.claim.token).update(
                state=State.EXPIRED if only.claim.expired else State.FIRED, **settled
            )
            winners = done if won else []
        else:  # a batch: lock the rows still held under their tokens, then one UPDATE per final state
            locked = set(
                rows.filter(pk__in=[d.claim.wake.pk for d in done], state=State.FIRING)
                .select_for_update()
                .values_list("pk", "claim_token")
            )
            winners = [d for d in done if (d.claim.wake.pk, d.claim.token) in locked]
            for final, expired in ((State.FIRED, False), (State.EXPIRED, True)):
                ids = [d.claim.wake.pk for d in winners if d.claim.expired is expired]
                if ids:
                    rows.filter(pk__in=ids, state=State.FIRING).update(state=final, **settled)
        WakeAttempt.objects.using(using).bulk_create(
            [
                WakeAttempt(
                    wake_id=d.claim.wake.pk,
                    number=d.claim.wake.attempts,
                    runner_id=d.claim.runner_id,
                    fence=d.claim.wake.fence,
                    started_at=d.claim.started_at,
                    finished_at=d.finished_at,
                    outcome=d.outcome,
                )
                for d in winners
            ]
        )
        for d in winners:
            notes = {name: value for name, value in (("scratch", d.scratch), ("output", d.output)) if value is not KEEP}
            if notes:
                rows.filter(pk=d.claim.wake.pk).update(**notes)
                for name, value in notes.items():
                    setattr(d.claim.wake, name, value)
            if d.claim.wake.is_recurring and not d.stop:
                create.book_next(d.claim.wake, now)
            transaction.on_commit(
                partial(signals.wake_fired.send, sender=Wake, wake=d.claim.wake, outcome=d.outcome), using=using
            )
    return _report(done, winners)


def _plain(d: Succeeded) -> bool:
    """A success whose settle writes nothing but the wake's final state and its attempt row."""
    return d.scratch is KEEP and d.output is KEEP and (d.stop or not d.claim.wake.is_recurring)


def _settle_in_one_statement(using: str, done: list[Succeeded], now: datetime) -> list[Succeeded]:
    """Settle plain successes with one statement (PostgreSQL); return those still held under their tokens.

    ``UPDATE … FROM unnest(…) WHERE state = 'firing' AND claim_token = <the claim's>`` moves the rows
    still held to ``fired``/``expired`` and returns them, and the same statement inserts their
    attempts (a data-modifying CTE joined to the UPDATE's rows): the fenced conditional write and its
    record, one round trip and atomic on its own, where the general path pays a transaction of a
    locking read, an UPDATE and an INSERT.
    """
    connection = connections[using]
    with connection.cursor() as cursor:
        cursor.execute(
            _settle_statement(using),
            [
                [d.claim.wake.pk for d in done],
                [d.claim.token for d in done],
                [d.claim.expired for d in done],
                [d.claim.wake.attempts for d in done],
                [d.claim.runner_id for d in done],
                [d.claim.wake.fence for d in done],
                [d.claim.started_at for d in done],
                [d.finished_at for d in done],
                [str(d.outcome) for d in done],
                State.EXPIRED,
                State.FIRED,
                now,
                now,
                State.FIRING,
            ],
        )
        won = {(row[0], row[1]) for row in cursor.fetchall()}
    return [d for d in done if (d.claim.wake.pk, d.claim.token) in won]


_settle_statements: dict[str, str] = {}


def _settle_statement(using: str) -> str:
    """The SQL of :func:`_settle_in_one_statement` (built once per database from the models' columns)."""
    found = _settle_statements.get(using)
    if found is not None:
        return found
    qn = connections[using].ops.quote_name
    wake, attempt = qn(Wake._meta.db_table), qn(WakeAttempt._meta.db_table)

    def col(model: Any, name: str) -> str:
        return qn(model._meta.get_field(name).column)

    w = partial(col, Wake)
    a = partial(col, WakeAttempt)
    # Only quoted names from the models are interpolated; every value is a parameter.
    sql = f"""
        WITH d AS (
            SELECT * FROM unnest(%s::bigint[], %s::text[], %s::boolean[], %s::integer[], %s::text[], %s::bigint[],
                                 %s::timestamptz[], %s::timestamptz[], %s::text[])
                AS d(id, token, expired, number, runner_id, fence, started_at, finished_at, outcome)
        ),
        s AS (
            UPDATE {wake} AS w SET
                {w("state")} = CASE WHEN d.expired THEN %s ELSE %s END,
                {w("lane_lock")} = NULL, {w("lease_until")} = NULL, {w("claim_token")} = NULL,
                {w("last_error")} = '', {w("settled_at")} = %s, {w("updated_at")} = %s
            FROM d
            WHERE w.{w("id")} = d.id AND w.{w("state")} = %s AND w.{w("claim_token")} = d.token
            RETURNING w.{w("id")} AS id, d.token AS token
        ),
        a AS (
            INSERT INTO {attempt} ({a("wake")}, {a("number")}, {a("runner_id")}, {a("fence")}, {a("started_at")},
                                   {a("finished_at")}, {a("outcome")}, {a("error")}, {a("error_type")})
            SELECT d.id, d.number, d.runner_id, d.fence, d.started_at, d.finished_at, d.outcome, '', ''
            FROM d JOIN s ON s.id = d.id
        )
        SELECT id, token FROM s
    """  # noqa: S608
    _settle_statements[using] = sql
    return sql


def _report(done: list[Succeeded], winners: list[Succeeded]) -> list[FireOutcome]:
    """An outcome per settled success, in order: fired/expired/stopped, or fenced (logged) for the losers."""
    winner_ids = {id(d) for d in winners}
    outcomes = []
    for d in done:
        if id(d) not in winner_ids:
            outcomes.append(_fenced_out(d.claim))
            continue
        wake = d.claim.wake
        if logger.isEnabledFor(logging.DEBUG):  # per wake, so DEBUG (the runner logs a summary at INFO)
            logger.debug(
                "fired wake=%s kind=%s lane=%s outcome=%s lateness_ms=%d duration_ms=%d",
                wake.pk,
                wake.kind,
                wake.serial_key,
                d.outcome,
                ms(d.claim.started_at - (wake.due_at or d.claim.started_at)),
                ms(d.finished_at - d.claim.started_at),
                extra=about(wake, d.claim.runner_id),
            )
        outcomes.append(FireOutcome(Disposition(d.outcome), settled=True))
    return outcomes


def _settle_returned(claim: Claim, returned: Any) -> FireOutcome:
    try:
        scratch = returned.scratch if returned.scratch is KEEP else json_value(returned.scratch, name="scratch")
        if isinstance(returned, Retry):
            at = to_datetime(returned.at, name="Retry.at") if returned.at is not None else None
            reason = returned.reason or "retry requested"
            error_type = ""
            if returned.error is not None:
                reason, error_type = _format_error(returned.error), _error_type(returned.error)
            return _settle_failure(
                claim, reason, retry_at=at, outcome=Outcome.RETRY, scratch=scratch, error_type=error_type
            )
        if isinstance(returned, Defer):
            return _settle_defer(claim, returned, scratch=scratch)
    except InvalidWake as exc:  # a malformed Retry.at / Defer.until is a failed attempt, not a crashed pass
        return _settle_failure(claim, f"the sink returned an invalid {type(returned).__name__}: {exc}")
    return _settle_successes([Succeeded(claim, stop=isinstance(returned, Stop), finished_at=clock.now())])[0]
