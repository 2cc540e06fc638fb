"""The state machine, one module per stage of a wake's flow, and the only code that writes a wake.

* :mod:`.create` — ``schedule``, ``schedule_many``; booking a chain's next occurrence;
* :mod:`.waiting` — ``watch``, ``request_approval`` (wakes that wait for an event or an answer);
* :mod:`.insert` — ``create_wake``, every insert's one door (idempotency, coalescing, budgets);
* :mod:`.approvals` — ``reissue_approval``: the host's explicit new link for a waiting approval (bounded);
* :mod:`.triggers` — ``deliver_event``, ``waiting_approval``/``open_approval``/``resolve``, ``cancel``, ``requeue``;
* :mod:`.claim` — the claim pass (one statement on PostgreSQL, steps elsewhere); :mod:`.claim_rows` — deciding
  and updating the locked rows; :mod:`.takeover` — lapsed leases; :mod:`.leases` — ``Claim``, fences, renewal;
* :mod:`.settle` — run a sink, settle its outcome under the claim's fence; :mod:`.failures` — failures, defers,
  outages, superseded; :mod:`.fencing` — the fence every settle writes under, handing claims back, the dead letter;
* :mod:`.passes` — the one pass loop (``run_due``, ``recover``, the runner) and ``gc``;
* :mod:`.runners` — the runner registry rows;
* :mod:`.schedules` — operator transitions on a recurring chain (pause, resume, trigger now, backfill);
* :mod:`.operate` — operator transitions on one wake or lane (fire now, reschedule, extend expiry, pause a lane).

Every exit from ``pending`` is a conditional UPDATE whose row count picks the single winner.
Modules outside this package read wakes freely but change them only through these functions.
"""

from __future__ import annotations

from .aio import (
    acancel,
    adeliver_event,
    anudge_session,
    areissue_approval,
    arequest_approval,
    aresolve,
    aresume_session,
    aschedule,
    aschedule_many,
    astop_session,
    awatch,
)
from .approvals import MAX_REISSUES, reissue_approval
from .claim import claim_batch
from .create import book_next, schedule, schedule_many
from .fencing import FireOutcome, release
from .insert import create_wake
from .leases import Claim, next_fence, renew_leases
from .operate import cancel_wake, extend_expiry, fire_now, pause_lane, reschedule, resume_lane, retry_wake
from .passes import (
    RunReport,
    fire_claims,
    gc,
    hand_back,
    next_due_at,
    observe_unwakeable,
    recover,
    run_due,
    unwakeable_log,
)
from .retention import forget_deliveries
from .schedules import Backfill, backfill_chain, pause_chain, resume_chain, trigger_chain
from .sessions import nudge_session, resume_session, stop_session
from .settle import (
    Succeeded,
    fire,
    prepare_sink,
    run_sink,
    settle_successes,
    sink_raised,
    sink_returned,
)
from .shared import TRANSIENT_ERRORS, backoff_delay, db_alias, default_runner_id, drop_broken_connections, hash_token
from .takeover import take_over_lapsed, takeovers_held_back
from .triggers import cancel, deliver_event, open_approval, requeue, resolve, resolve_hashed, waiting_approval
from .waiting import ApprovalRequest, request_approval, watch

__all__ = [
    "acancel",
    "adeliver_event",
    "anudge_session",
    "arequest_approval",
    "areissue_approval",
    "aresolve",
    "aresume_session",
    "aschedule",
    "aschedule_many",
    "astop_session",
    "awatch",
    "TRANSIENT_ERRORS",
    "backoff_delay",
    "drop_broken_connections",
    "ApprovalRequest",
    "Backfill",
    "backfill_chain",
    "pause_chain",
    "resume_chain",
    "trigger_chain",
    "Claim",
    "FireOutcome",
    "RunReport",
    "Succeeded",
    "book_next",
    "cancel",
    "cancel_wake",
    "extend_expiry",
    "fire_now",
    "pause_lane",
    "reschedule",
    "resume_lane",
    "retry_wake",
    "claim_batch",
    "create_wake",
    "db_alias",
    "default_runner_id",
    "deliver_event",
    "fire",
    "fire_claims",
    "gc",
    "forget_deliveries",
    "hand_back",
    "hash_token",
    "next_due_at",
    "next_fence",
    "nudge_session",
    "observe_unwakeable",
    "open_approval",
    "prepare_sink",
    "recover",
    "release",
    "renew_leases",
    "request_approval",
    "requeue",
    "reissue_approval",
    "MAX_REISSUES",
    "resolve",
    "resolve_hashed",
    "resume_session",
    "run_due",
    "run_sink",
    "schedule",
    "schedule_many",
    "settle_successes",
    "sink_raised",
    "sink_returned",
    "stop_session",
    "take_over_lapsed",
    "takeovers_held_back",
    "unwakeable_log",
    "waiting_approval",
    "watch",
]
