"""Periodic tasks: declarations (``periodic()``, ``WAKES["PERIODIC"]``) reconciled by ``sync_periodic``.

Concurrent syncs and runners booting together are in ``tests/test_tasks_processes.py``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from django_wakes.tasks import framework_available
from tests.tasks_framework import no_tasks_framework

if not framework_available():
    no_tasks_framework()

import django_wakes
from django_wakes.exceptions import InvalidSchedule
from django_wakes.models import LIVE_STATES, State, Wake, WorkspaceLock
from django_wakes.tasks import TASK_KIND, periodic, sync_periodic, sync_periodic_on_boot
from django_wakes.tasks.compat import FRAMEWORK, TaskResultStatus, task_backends
from django_wakes.tasks.exceptions import PeriodicTaskError
from django_wakes.tasks.periodic_tasks import declared
from testproject import tasks

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _isolated_declarations() -> Iterator[None]:
    """Each test starts with no declaration and leaves none behind."""
    saved = declared.snapshot()
    declared.restore({})
    yield
    declared.restore(saved)


def live_chains() -> list[Wake]:
    return list(Wake.objects.filter(kind=TASK_KIND, state__in=LIVE_STATES).order_by("id"))


def test_a_declaration_is_booked_once_however_often_it_is_synced(clock):
    periodic(tasks.record, cron="*/5 * * * *", tz="Europe/Paris", args=["tick"])
    first = sync_periodic()
    assert first.booked == ["testproject.tasks.record"] and first.changed
    again = sync_periodic()
    assert again.kept == ["testproject.tasks.record"] and not again.changed
    (wake,) = live_chains()
    assert wake.cron == "*/5 * * * *" and wake.tz == "Europe/Paris" and wake.catch_up == "latest"
    assert wake.intent["task"] == "testproject.tasks.record" and wake.intent["args"] == ["tick"]
    assert wake.intent["periodic"] == "testproject.tasks.record"
    assert wake.fire_at == clock.now().replace(minute=5)


def test_an_occurrence_runs_the_task_and_books_the_next(clock):
    periodic(tasks.record, cron="*/5 * * * *", args=["tick"])
    sync_periodic()
    (first,) = live_chains()
    clock.advance("5m")
    assert django_wakes.run_due().fired == 1
    assert tasks.record.get_result(str(first.pk)).return_value == "tick"
    (second,) = live_chains()
    assert second.chain_id == first.chain_id and second.pk != first.pk
    assert second.intent == first.intent
    assert sync_periodic().kept == ["testproject.tasks.record"]  # the chain goes on; no second one


def test_a_changed_declaration_is_replanned():
    periodic(tasks.record, cron="*/5 * * * *", args=["old"])
    sync_periodic()
    (old,) = live_chains()
    declared.restore({})
    periodic(tasks.record, cron="*/5 * * * *", args=["new"])
    report = sync_periodic()
    assert report.replanned == ["testproject.tasks.record"]
    (new,) = live_chains()
    assert new.intent["args"] == ["new"] and new.chain_id != old.chain_id
    assert Wake.objects.get(pk=old.pk).state == State.CANCELLED


def test_any_setting_counts_as_a_change():
    periodic(tasks.record, cron="0 9 * * *", args=["x"])
    sync_periodic()
    for change in ({"cron": "0 10 * * *"}, {"tz": "Asia/Tokyo"}, {"catch_up": "skip"}):
        declared.restore({})
        periodic(tasks.record, **{"cron": "0 9 * * *", "args": ["x"], **change})
        assert sync_periodic().replanned == ["testproject.tasks.record"], change
    declared.restore({})
    periodic(tasks.record.using(priority=5), cron="0 9 * * *", args=["x"])
    assert sync_periodic().replanned == ["testproject.tasks.record"]
    assert len(live_chains()) == 1


def test_a_removed_declaration_is_ended():
    periodic(tasks.record, cron="*/5 * * * *", args=["x"])
    periodic(tasks.add, every="1h", args=[1, 2])
    sync_periodic()
    declared.remove("testproject.tasks.record")
    report = sync_periodic()
    assert report.ended == ["testproject.tasks.record"] and report.kept == ["testproject.tasks.add"]
    assert [w.intent["periodic"] for w in live_chains()] == ["testproject.tasks.add"]


def test_a_chain_ended_while_it_fires_books_no_successor(clock):
    periodic(tasks.record, cron="*/5 * * * *", args=["x"])
    sync_periodic()
    clock.advance("5m")
    claims = django_wakes.engine.claim_batch(runner_id="r")
    assert len(claims) == 1  # the occurrence is firing
    declared.restore({})
    assert sync_periodic().ended == ["testproject.tasks.record"]
    django_wakes.engine.fire(claims[0])
    assert live_chains() == []
    assert Wake.objects.get(pk=claims[0].wake.pk).state == State.FIRED


def test_two_declarations_of_one_task_need_names():
    periodic(tasks.record, cron="0 9 * * *", args=["morning"])
    with pytest.raises(PeriodicTaskError, match="name="):
        periodic(tasks.record, cron="0 18 * * *", args=["evening"])
    periodic(tasks.record, cron="0 18 * * *", args=["evening"], name="evening-record")
    assert sorted(sync_periodic().booked) == ["evening-record", "testproject.tasks.record"]
    periodic(tasks.record, cron="0 9 * * *", args=["morning"])  # the same declaration again: fine (a re-import)


def test_the_settings_table_declares_periodic_tasks_too(settings):
    settings.WAKES = {
        **settings.WAKES,
        "PERIODIC": [
            {"task": "testproject.tasks.report", "cron": "0 6 * * *", "tz": "UTC", "args": ["daily"]},
            {"task": "testproject.tasks.add", "every": "30m", "kwargs": {"a": 1, "b": 2}, "name": "adder"},
        ],
    }
    report = sync_periodic()
    assert sorted(report.booked) == ["adder", "testproject.tasks.report"]
    by_name = {w.intent["periodic"]: w for w in live_chains()}
    assert by_name["testproject.tasks.report"].queue_name == "reports"  # the task's own queue
    assert by_name["adder"].every is not None
    settings.WAKES = {**settings.WAKES, "PERIODIC": []}
    assert sorted(sync_periodic().ended) == ["adder", "testproject.tasks.report"]


@pytest.mark.parametrize(
    "table, message",
    [
        ({"task": "testproject.tasks.not_a_task", "cron": "* * * * *"}, "not .*a task|decorated"),
        ({"task": "testproject.tasks.nowhere", "cron": "* * * * *"}, "cannot import"),
        ({"task": "testproject.tasks.add", "cron": "* * * * *", "when": "now"}, "must be a dict"),
        ({"task": "testproject.tasks.add"}, "exactly one of cron= or every="),
        ({"task": "testproject.tasks.record", "cron": "* * * * *", "args": "x"}, "args must be a list"),
    ],
)
def test_a_bad_settings_entry_is_refused_and_nothing_changes(settings, table, message):
    periodic(tasks.record, cron="*/5 * * * *", args=["kept"])
    sync_periodic()
    settings.WAKES = {**settings.WAKES, "PERIODIC": [table]}
    with pytest.raises(PeriodicTaskError, match=message):
        sync_periodic()
    assert [w.intent["args"] for w in live_chains()] == [["kept"]]


def test_bad_declarations_are_refused_before_anything_is_written():
    with pytest.raises(InvalidSchedule):
        periodic(tasks.record, cron="every monday", args=["x"])
    with pytest.raises(InvalidSchedule):
        periodic(tasks.record, cron="0 9 * * *", tz="Mars/Olympus", args=["x"])
    with pytest.raises(PeriodicTaskError):
        periodic(tasks.record, cron="0 9 * * *", every="1h", args=["x"])
    with pytest.raises(PeriodicTaskError):
        periodic(tasks.not_a_task, cron="0 9 * * *")  # type: ignore[arg-type]
    with pytest.raises(PeriodicTaskError, match="run_after"):
        periodic(tasks.record.using(run_after=django_wakes.clock.now()), cron="0 9 * * *", args=["x"])
    with pytest.raises(Exception, match="JSON"):
        periodic(tasks.record, cron="0 9 * * *", args=[object()])
    assert declared.all() == {}
    assert not Wake.objects.exists()


def test_a_task_on_another_backend_is_refused(settings):
    immediate = f"{FRAMEWORK}.backends.immediate.ImmediateBackend"
    settings.TASKS = {**settings.TASKS, "immediate": {"BACKEND": immediate}}
    with pytest.raises(PeriodicTaskError, match="not django_wakes.tasks.WakesBackend"):
        periodic(tasks.record.using(backend="immediate"), cron="0 9 * * *", args=["x"])


def test_the_sync_periodic_command_reports_what_it_did():
    periodic(tasks.record, cron="*/5 * * * *", args=["x"])
    out = StringIO()
    call_command("wakes", "sync-periodic", stdout=out)
    assert "booked: testproject.tasks.record" in out.getvalue()
    assert "1 booked, 0 re-planned, 0 ended, 0 unchanged" in out.getvalue()
    out = StringIO()
    call_command("wakes", "sync-periodic", stdout=out)
    assert "0 booked, 0 re-planned, 0 ended, 1 unchanged" in out.getvalue()


def test_the_sync_periodic_command_fails_cleanly_on_a_bad_table(settings):
    settings.WAKES = {**settings.WAKES, "PERIODIC": "not a list"}
    with pytest.raises(CommandError, match="must be a list"):
        call_command("wakes", "sync-periodic", stdout=StringIO())


def test_wakes_status_counts_tasks():
    tasks.add.enqueue(1, 2)
    tasks.fail.enqueue("x")
    django_wakes.schedule(workspace_id="w", kind="demo.print", delay="1h")  # not a task
    django_wakes.run_due()
    out = StringIO()
    call_command("wakes", "status", "--json", stdout=out)
    snap: dict[str, Any] = json.loads(out.getvalue())
    assert snap["tasks"]["fired"] == 1 and snap["tasks"]["dead"] == 1 and snap["tasks"]["pending"] == 0
    assert snap["states"]["pending"] == 1
    out = StringIO()
    call_command("wakes", "status", stdout=out)
    assert "Tasks (django.tasks) by state" in out.getvalue()
    assert tasks.fail.get_result(str(Wake.objects.filter(state=State.DEAD).get().pk)).status == TaskResultStatus.FAILED


def test_runwakes_boot_sync_books_and_reports(caplog):
    periodic(tasks.record, cron="*/5 * * * *", args=["x"])
    with caplog.at_level(logging.INFO, logger="django_wakes"):
        sync_periodic_on_boot()
    assert "periodic tasks synced: booked=testproject.tasks.record" in caplog.text
    assert len(live_chains()) == 1


def test_runwakes_boot_sync_takes_no_lock_when_there_is_nothing_to_sync():
    sync_periodic_on_boot()
    assert not WorkspaceLock.objects.exists()
    assert not Wake.objects.exists()


def test_runwakes_boot_sync_logs_a_bad_declaration_and_goes_on(settings, caplog):
    settings.WAKES = {**settings.WAKES, "PERIODIC": [{"task": "testproject.tasks.nowhere", "cron": "* * * * *"}]}
    with caplog.at_level(logging.ERROR, logger="django_wakes"):
        sync_periodic_on_boot()  # does not raise: the runner still serves everything else
    assert "periodic tasks were not synced" in caplog.text and "cannot import" in caplog.text


def test_a_periodic_setting_that_cannot_be_booked_is_reported_once_by_the_apps_check(settings):
    """A bad WAKES['PERIODIC'] entry is the app's E014 (naming the setting and value), not repeated by the backend."""
    from django_wakes.checks import check_wakes_settings

    backend = task_backends["default"]
    assert backend.check() == []
    settings.WAKES = {**settings.WAKES, "PERIODIC": [{"task": "testproject.tasks.add", "cron": "61 * * * *"}]}
    assert backend.check() == []
    (error,) = [message for message in check_wakes_settings() if message.id == "django_wakes.E014"]
    assert "WAKES['PERIODIC']" in error.msg and "61 * * * *" in error.msg


def test_the_backends_check_wants_the_app_installed():
    installed = [app for app in django_settings.INSTALLED_APPS if app not in ("django_wakes", "testproject")]
    with override_settings(INSTALLED_APPS=installed):
        (error,) = task_backends["default"].check()
    assert error.id == "django_wakes.tasks.E001"


def test_an_ended_chain_is_booked_again_though_an_extra_firing_of_it_is_pending(clock):
    """An operator's one-shot firing (trigger now) books nothing after it: it does not keep the task scheduled."""
    periodic(tasks.record, cron="*/5 * * * *", args=["x"])
    sync_periodic()
    (chain,) = live_chains()
    extra = django_wakes.trigger_chain(chain.chain_id)
    assert django_wakes.cancel(chain.pk)  # the chain is ended (by an operator, say)
    report = sync_periodic()
    assert report.booked == ["testproject.tasks.record"]
    (recurring,) = [w for w in live_chains() if w.is_recurring]
    assert recurring.chain_id != chain.chain_id
    assert Wake.objects.get(pk=extra.pk).state == State.PENDING  # the operator's extra firing still runs
    assert sync_periodic().kept == ["testproject.tasks.record"]


def test_a_replanned_chain_is_kept_while_the_old_chains_last_occurrence_finishes(clock):
    periodic(tasks.record, cron="*/5 * * * *", args=["old"])
    sync_periodic()
    clock.advance("5m")
    (claim,) = django_wakes.engine.claim_batch(runner_id="r")  # the old chain's occurrence is firing
    declared.restore({})
    periodic(tasks.record, cron="*/5 * * * *", args=["new"])
    assert sync_periodic().replanned == ["testproject.tasks.record"]
    (new,) = Wake.objects.filter(kind=TASK_KIND, state=State.PENDING)
    again = sync_periodic()  # another runner boots while the old occurrence still fires
    assert again.kept == ["testproject.tasks.record"] and not again.changed
    assert Wake.objects.get(pk=new.pk).state == State.PENDING  # not cancelled and booked a third time
    django_wakes.engine.fire(claim)
    assert [w.pk for w in live_chains()] == [new.pk]


def test_a_paused_periodic_task_stays_paused_when_its_declaration_changes(clock):
    periodic(tasks.record, cron="*/5 * * * *", args=["old"])
    sync_periodic()
    (old,) = live_chains()
    django_wakes.pause_chain(old.chain_id)
    declared.restore({})
    periodic(tasks.record, cron="*/5 * * * *", args=["new"])
    assert sync_periodic().replanned == ["testproject.tasks.record"]
    (new,) = live_chains()
    assert new.intent["args"] == ["new"] and new.paused_at is not None and new.due_at is None  # held
    clock.advance("1h")
    assert django_wakes.run_due().fired == 0
    assert sync_periodic().kept == ["testproject.tasks.record"]
    django_wakes.resume_chain(new.chain_id)
    assert django_wakes.run_due().fired == 1
