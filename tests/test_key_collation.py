"""Keys compare byte for byte on every database (MySQL's default collations fold case and spaces)."""

from __future__ import annotations

import pytest

import django_wakes
from django_wakes.models import Wake

pytestmark = pytest.mark.django_db

KIND = "t.collation"


@pytest.fixture(autouse=True)
def kind(sinks):
    return sinks(KIND)


@pytest.mark.parametrize(("one", "other"), [("ABC", "abc"), ("a", "a "), ("straße", "strasse"), ("😀", "😁")])
def test_idempotency_keys_that_differ_make_different_wakes(one, other):
    first = django_wakes.schedule(workspace_id="ws", kind=KIND, delay="1h", idempotency_key=one)
    second = django_wakes.schedule(workspace_id="ws", kind=KIND, delay="1h", idempotency_key=other)
    assert first.pk != second.pk
    assert django_wakes.schedule(workspace_id="ws", kind=KIND, delay="1h", idempotency_key=one).pk == first.pk


def test_event_keys_match_exactly():
    django_wakes.watch(workspace_id="ws", kind=KIND, event_key="Build.Done")
    assert django_wakes.deliver_event(workspace_id="ws", event_key="build.done") == 0
    assert django_wakes.deliver_event(workspace_id="ws", event_key="Build.Done") == 1


def test_lanes_that_differ_in_case_are_different_lanes(kind):
    upper = django_wakes.schedule(workspace_id="ws", kind=KIND, delay="0s", serial_key="Lane")
    lower = django_wakes.schedule(workspace_id="ws", kind=KIND, delay="0s", serial_key="lane")
    report = django_wakes.run_due()
    assert report.fired == 2  # both lanes free: both fire in one pass
    assert sorted(kind.ids) == sorted([upper.pk, lower.pk])


@pytest.mark.django_db(transaction=True)  # once() commits its receipt before fn runs
def test_once_keys_that_differ_in_case_run_separately():
    ran: list[str] = []
    django_wakes.once("s", "Key", lambda: ran.append("Key"))
    django_wakes.once("s", "key", lambda: ran.append("key"))
    assert ran == ["Key", "key"]
    assert Wake.objects.count() == 0


@pytest.mark.parametrize(
    "kwargs", [{"runner_id": "a\x00b"}, {"lanes": ["ok", "\x00"]}, {"lanes": [3]}, {"limit": 0}, {"runner_id": ""}]
)
def test_run_due_refuses_what_a_database_would(kwargs):
    with pytest.raises(django_wakes.InvalidWake):
        django_wakes.run_due(**kwargs)
