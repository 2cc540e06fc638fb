"""Structured logs: every record of the ``django_wakes`` logger carries wake_id, kind, lane, workspace_id
and runner_id as attributes (``django_wakes.logs``), so a JSON formatter emits them as fields.

Records are captured from a real pass of a :class:`~django_wakes.runner.Sweeper` over wakes that
fire, fail, die, are retried and have no sink, and from a real ``runwakes`` process logging JSON
through python-json-logger as docs/operations.md configures it.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest

from django_wakes import Retry, schedule
from django_wakes.logs import FIELDS, WakeFields, running_as
from django_wakes.models import State, Wake
from django_wakes.runner import Sweeper
from tests.factories import WakeFactory
from tests.processes import Procs, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

WS = "ws-logs"
RUNNER = "host-logs:1:abc"
WAKE_IN_TEXT = re.compile(r"\bwake[ =](\d+)\b")


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def records() -> Iterator[list[logging.LogRecord]]:
    """Every record of the ``django_wakes`` logger, DEBUG and up, while the test runs."""
    logger = logging.getLogger("django_wakes")
    handler, level = Records(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_every_record_of_a_pass_carries_the_wake_and_the_runner(sinks, records):
    own = logging.getLogger("django_wakes")

    def chatty(wake: Any, result: Any) -> None:
        own.info("inside the sink")  # no extra: the filter finds the firing wake

    sinks("logs.ok", chatty)
    sinks("logs.fail", RuntimeError("boom"))
    sinks("logs.retry", lambda wake, result: Retry(reason="later"))
    fired = schedule(workspace_id=WS, delay="0s", kind="logs.ok", serial_key="lane-a")
    dead = schedule(workspace_id="ws-other", delay="0s", kind="logs.fail", max_attempts=1)
    retried = schedule(workspace_id=WS, delay="0s", kind="logs.retry")
    WakeFactory(workspace_id=WS, kind="logs.nobody")  # no sink here: a warning about its kind
    records.clear()

    Sweeper(runner_id=RUNNER, listen=False).run_once()

    assert Wake.objects.get(pk=dead.pk).state == State.DEAD
    assert Wake.objects.get(pk=retried.pk).state == State.PENDING
    assert len(records) >= 5, [r.getMessage() for r in records]
    wakes = {w.pk: w for w in Wake.objects.all()}
    about_a_wake = 0
    for record in records:
        message = record.getMessage()
        for name in FIELDS:
            assert hasattr(record, name), f"{name} missing on {message!r}"
        assert record.runner_id == RUNNER, message
        mentioned = WAKE_IN_TEXT.search(message)
        if mentioned:
            wake = wakes[int(mentioned.group(1))]
            about_a_wake += 1
            if "has no sink" in message:  # about a kind, naming one of its wakes
                assert (record.wake_id, record.kind) == (wake.pk, wake.kind), message
                continue
            assert (record.wake_id, record.kind, record.workspace_id) == (wake.pk, wake.kind, wake.workspace_id), (
                message
            )
    assert about_a_wake >= 4  # fired, failed, dead, and the kind without a sink
    inside = [r for r in records if r.getMessage() == "inside the sink"]
    assert [(r.wake_id, r.kind, r.lane, r.workspace_id) for r in inside] == [(fired.pk, "logs.ok", "lane-a", WS)]
    (dead_line,) = [r for r in records if "is dead after" in r.getMessage()]
    assert dead_line.workspace_id == "ws-other"


def test_records_outside_a_runner_and_a_wake_carry_the_fields_as_none(records):
    logging.getLogger("django_wakes").warning("nothing in particular")
    (record,) = records
    assert all(getattr(record, name) is None for name in FIELDS)
    with running_as("r-1"):
        logging.getLogger("django_wakes").warning("in a runner")
    assert records[-1].runner_id == "r-1"


def test_the_filter_on_a_handler_marks_other_loggers_records_inside_a_sink(sinks):
    """What docs/operations.md suggests for the sinks' own loggers (an HTTP client's, the project's)."""
    theirs = logging.getLogger("myproject.billing")
    handler = Records()
    handler.addFilter(WakeFields())
    theirs.addHandler(handler)
    theirs.setLevel(logging.INFO)
    try:
        sinks("logs.billing", lambda wake, result: theirs.info("charged"))
        wake = schedule(workspace_id=WS, delay="0s", kind="logs.billing")
        Sweeper(runner_id=RUNNER, listen=False).run_once()
    finally:
        theirs.removeHandler(handler)
    (record,) = handler.records
    assert (record.wake_id, record.kind, record.workspace_id, record.runner_id) == (
        wake.pk,
        "logs.billing",
        WS,
        RUNNER,
    )


def test_a_disabled_level_builds_no_fields_per_wake(sinks, monkeypatch):
    """The per-fire DEBUG line builds its fields only when DEBUG is on (a runner at -v 1 pays nothing)."""
    from django_wakes.engine import settle

    built: list[Any] = []
    real = settle.about
    monkeypatch.setattr(settle, "about", lambda *a, **k: built.append(a) or real(*a, **k))
    sinks("logs.quiet")
    for _ in range(3):
        schedule(workspace_id=WS, delay="0s", kind="logs.quiet")
    logger = logging.getLogger("django_wakes")
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        Sweeper(runner_id=RUNNER, listen=False).run_once()
    finally:
        logger.setLevel(level)
    assert Wake.objects.filter(state=State.FIRED).count() == 3
    assert built == []
    logger.setLevel(logging.DEBUG)
    try:
        schedule(workspace_id=WS, delay="0s", kind="logs.quiet")
        Sweeper(runner_id=RUNNER, listen=False).run_once()
    finally:
        logger.setLevel(level)
    assert len(built) == 1, "and the fields are there when the level is on"


def test_a_runner_process_logging_json_emits_the_fields(procs: Procs):
    """docs/operations.md's JSON config (python-json-logger) on a real ``runwakes --once``."""
    wake = schedule(workspace_id=WS, delay="0s", kind="probe.intent", intent={}, serial_key="lane-j")
    result = procs.manage("runwakes", "--once", "-v", "2", WAKES_LOG_FORMAT="json")  # -v 2: the per-wake line
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    assert lines, result.stderr
    (fired,) = [line for line in lines if line["message"].startswith("fired wake=")]
    assert {name: fired[name] for name in FIELDS if name != "runner_id"} == {
        "wake_id": wake.pk,
        "kind": "probe.intent",
        "lane": "lane-j",
        "workspace_id": WS,
    }
    assert fired["level"] == "DEBUG" and fired["logger"] == "django_wakes"
    (summary,) = [line for line in lines if "one pass (--once)" in line["message"]]
    assert fired["runner_id"] == summary["runner_id"]
    assert summary["runner_id"].split(":")[1].isdigit() and summary["wake_id"] is None


def test_a_runner_at_the_default_verbosity_logs_a_summary_not_a_line_per_wake(procs: Procs):
    """``runwakes`` at -v 1: no ``fired wake=`` line per wake; one summary line with the counts and lateness.

    The summary comes once a minute from a busy runner, and once more when it stops (SIGTERM here).
    """
    for n in range(12):
        schedule(workspace_id=WS, delay="0s", kind="probe.intent", intent={"fail": n < 2}, max_attempts=1)
    runner = procs.runner("summary", "--interval", "0.2")
    wait_for(
        lambda: (
            Wake.objects.filter(workspace_id=WS, state__in=[State.FIRED, State.DEAD]).count() == 12
            or procs.alive(runner)
        ),
        timeout=60,
        what="ten wakes to fire and two to fail",
    )
    assert procs.stop(runner) == 0
    log = procs.log(runner)
    assert "fired wake=" not in log, log
    summaries = [line for line in log.splitlines() if re.search(r": last \d+s: fired=", line)]
    assert len(summaries) == 1, log
    (line,) = summaries
    assert " INFO " in line and "fired=10 failed=2 retried=0 dead=2 " in line, line
    p50, p99 = (int(n) for n in re.findall(r"late_p(?:50|99)_ms=(\d+)", line))
    assert 0 <= p50 <= p99 < 60_000, line
