"""``WAKES["READ_DATABASE"]``: where the wake list, the dashboard and the metrics read, and what they say about it.

Here the alias is ``default`` itself (not a replica: every database of the suite says so). A real
streaming replica, the Patroni standby, is in ``tests/test_ha.py``: there the pages read wakes only
from it, say how far behind it is, and an action posted from the list still runs on the primary.
"""

from __future__ import annotations

import pytest
from django.test import RequestFactory
from django.urls import resolve

import django_wakes
from django_wakes.console import reads

pytestmark = pytest.mark.django_db

LIST = "/admin/django_wakes/wake/"
DASHBOARD = "/admin/django_wakes/wake/dashboard/"
METRICS = "/wakes/metrics/"


@pytest.fixture
def read_default(settings):
    settings.WAKES = {**settings.WAKES, "READ_DATABASE": "default"}


def test_without_read_database_the_pages_read_where_django_reads_and_say_nothing(admin_client, sinks):
    assert reads.alias() == "default"
    assert reads.replica_lag() is None
    sinks("test.reads")
    django_wakes.schedule(workspace_id="w", kind="test.reads", delay="1h")
    for url in (LIST, DASHBOARD):
        page = admin_client.get(url).content.decode()
        assert "Read from" not in page
    assert "read_database_lag_seconds" not in admin_client.get(METRICS).content.decode()


def test_a_read_database_that_is_no_replica_is_said_to_be_none(admin_client, read_default):
    lag = reads.replica_lag()
    assert lag is not None
    assert (lag.alias, lag.replica, lag.seconds, lag.error) == ("default", False, 0.0, "")
    assert lag.summary == "default: not a replica (reads see every committed change)"
    assert "Read from default: not a replica" in admin_client.get(LIST).content.decode()
    assert "Read from default: not a replica" in admin_client.get(DASHBOARD).content.decode()
    lines = admin_client.get(METRICS).content.decode().splitlines()
    assert 'django_wakes_read_database_lag_seconds{database="default"} 0' in lines


def test_only_reading_the_list_goes_to_the_read_database(read_default):
    factory = RequestFactory()
    for method, url, listing in (
        ("get", LIST, True),
        ("head", LIST, True),
        ("post", LIST, False),  # an action posted from the list: the primary
        ("get", DASHBOARD, False),  # the dashboard reads through console.stats, not the admin's queryset
    ):
        request = getattr(factory, method)(url)
        request.resolver_match = resolve(url)
        assert reads.for_listing(request) is listing, (method, url)


def test_the_lag_summary_says_what_is_known():
    assert reads.ReplicaLag("r", True, 2.34, True).summary == "r: 2.3s behind"
    assert reads.ReplicaLag("r", True, None, True).summary == "r: an unknown time behind"
    assert "receiving nothing" in reads.ReplicaLag("r", True, 0.0, False).summary
    assert "could not be asked" in reads.ReplicaLag("r", None, None, None, error="refused").summary
