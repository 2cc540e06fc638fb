"""Control characters in identifiers (issue 26, finding 5): refused at every entry point, escaped wherever printed.

A session id holding a line feed forged a second log line, and ``wakes status`` wrote ANSI/OSC escapes to the
terminal. Every identifier the public API takes is refused with ``InvalidWake`` naming the field when it
holds a control or format character; rows that hold one anyway (older, or written by raw SQL) are escaped in
both log formats (a real ``runwakes`` process) and in ``manage.py wakes status`` (read from a real pty).
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client

import django_wakes
from django_wakes import engine
from django_wakes.agents import tools
from django_wakes.exceptions import InvalidWake
from django_wakes.models import SessionControl, Wake, WebhookDelivery
from django_wakes.text import control_character, printable
from django_wakes.validation import key, printable_identifier
from django_wakes.web.webhooks import sign
from tests.processes import ROOT, Procs

pytestmark = pytest.mark.django_db

WS, KIND = "ws-ids", "t.ids"
#: One of each family: C0 (line feed, tab, ESC), DEL, C1 (NEL, CSI), bidi override, line/paragraph separators,
#: zero-width space, a language tag (a format character beyond the BMP).
CONTROLS = ["\n", "\t", "\x1b", "\x7f", "\x85", "\x9b", "\u202e", "\u2028", "\u2029", "\u200b", "\U000e0041"]
FORGED = "\n2030-01-01 00:00:00,000 CRITICAL django_wakes forged line"


@pytest.mark.parametrize("char", CONTROLS, ids=[f"U+{ord(c):04X}" for c in CONTROLS])
def test_the_validator_refuses_each_family_and_names_the_field(char):
    with pytest.raises(
        InvalidWake, match=rf"^session_id contains a control character \(U\+{ord(char):04X}\) at position 1"
    ):
        key(f"a{char}b", name="session_id")
    assert control_character(f"a{char}b") == (1, char)
    assert control_character(printable(f"a{char}b")) is None


def test_printable_text_of_any_script_is_left_alone():
    for text in ("sess:42", "équipe/été", "数据-会话", "שלום", "🙂 ok", "a b", "back\\slash"):
        assert key(text, name="k") == text and printable(text) is text
    assert printable_identifier("plain", name="limit_key") == "plain"  # what another field's validation calls
    assert printable("a\nb\x1b[31mc\u202ed") == "a\\x0ab\\x1b[31mc\\u202ed"


@pytest.fixture
def calls(sinks):
    return sinks(KIND)


def _entry_points() -> dict[str, Any]:
    bad = "x" + FORGED
    return {
        "schedule workspace_id": lambda: django_wakes.schedule(workspace_id=bad, kind=KIND, delay="1m"),
        "schedule session_id": lambda: django_wakes.schedule(workspace_id=WS, session_id=bad, kind=KIND, delay="1m"),
        "schedule serial_key": lambda: django_wakes.schedule(workspace_id=WS, serial_key=bad, kind=KIND, delay="1m"),
        "schedule idempotency_key": lambda: django_wakes.schedule(
            workspace_id=WS, idempotency_key=bad, kind=KIND, delay="1m"
        ),
        "schedule queue_name": lambda: django_wakes.schedule(workspace_id=WS, queue_name=bad, kind=KIND, delay="1m"),
        "schedule_many": lambda: django_wakes.schedule_many(
            [{"delay": "1m"}, {"delay": "1m", "serial_key": bad}], workspace_id=WS, kind=KIND
        ),
        "watch event_key": lambda: django_wakes.watch(workspace_id=WS, event_key=bad, kind=KIND),
        "watch event_keys": lambda: django_wakes.watch(workspace_id=WS, event_keys=["ok", bad], kind=KIND),
        "deliver_event": lambda: django_wakes.deliver_event(workspace_id=WS, event_key=bad),
        "request_approval": lambda: django_wakes.request_approval(
            workspace_id=WS, session_id=bad, kind=KIND, prompt="ok?", expires_in="1h"
        ),
        "stop_session": lambda: django_wakes.stop_session(bad, workspace_id=WS),
        "nudge_session": lambda: django_wakes.nudge_session("s", workspace_id=bad),
        "once": lambda: django_wakes.once("s", bad, lambda: 1, workspace_id=WS),
        "pause_lane": lambda: engine.pause_lane(bad),
        "dispatch session_id": lambda: tools.dispatch("list_wakes", {}, workspace_id=WS, session_id=bad),
    }


@pytest.mark.parametrize("entry", list(_entry_points()))
def test_every_entry_point_refuses_a_control_character_and_writes_nothing(calls, spawned, entry):
    with pytest.raises(InvalidWake, match="control character"):
        _entry_points()[entry]()
    assert not Wake.objects.exists() and not SessionControl.objects.exists()


def test_a_model_gets_a_refusal_naming_the_event_key(spawned):
    refused = tools.dispatch("watch_event", {"event_key": "ci:" + FORGED}, workspace_id=WS, session_id="s")
    assert refused["error"]["field"] == "event_key" and "control character" in refused["error"]["message"]
    assert not Wake.objects.exists()


def test_a_tool_call_id_with_a_control_character_is_hashed_into_the_key(spawned):
    made = tools.dispatch(
        "schedule_followup",
        {"delay": "1h", "note": "n"},
        workspace_id=WS,
        session_id="s",
        tool_call_id="call\x1b]0;x\x07",
    )
    assert "error" not in made
    assert Wake.objects.get().idempotency_key.startswith("tool:sha256:")


def test_the_tasks_backend_refuses_one(db):
    pytest.importorskip("testproject.tasks")
    from testproject import tasks

    with pytest.raises(InvalidWake, match="control character"):
        tasks.add.using(serial_key="lane\x1b[2J").enqueue(1, 2)
    assert not Wake.objects.exists()


def test_a_webhook_map_returning_one_is_a_400_and_stores_nothing(client: Client, clock, settings):
    settings.WAKES = {
        **settings.WAKES,
        "WEBHOOKS": {"provider": {"SECRETS": ["s3cr3t-ids"], "MAP": "tests.test_webhooks.from_provider"}},
    }
    body = json.dumps({"kind": "build", "project": WS, "status": "pass" + FORGED, "sha": "abc", "build": 1}).encode()
    ts = str(int(clock.now().timestamp()))
    response = client.post(
        "/wakes/events/provider/",
        data=body,
        content_type="application/json",
        HTTP_X_WAKES_TIMESTAMP=ts,
        HTTP_X_WAKES_DELIVERY="d-ids",
        HTTP_X_WAKES_SIGNATURE=sign("s3cr3t-ids", ts, "d-ids", body),
    )
    assert response.status_code == 400 and "control character" in response.content.decode()
    assert not WebhookDelivery.objects.exists()


# -- escaped wherever printed: rows that hold one anyway --------------------------------------------------


def _smuggle(wake: Wake, **fields: str) -> None:
    """Write identifiers past the validation, as a row from before it or raw SQL would hold them."""
    Wake.objects.filter(pk=wake.pk).update(**fields)


@pytest.mark.multiprocess
@pytest.mark.parametrize("log_format", ["plain", "json"])
def test_a_runner_process_escapes_them_in_its_log_lines(procs: Procs, log_format):
    wake = django_wakes.schedule(workspace_id=WS, delay="0s", kind="probe.intent", intent={}, serial_key="lane")
    _smuggle(wake, serial_key="lane" + FORGED, workspace_id="ws\x1b]0;pwned\x07\u202e")
    result = procs.manage("runwakes", "--once", "-v", "2", WAKES_LOG_FORMAT=log_format)  # -v 2: the per-wake line
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert not [line for line in lines if "forged line" in line and not line.startswith(("20", "{"))], lines
    assert "\x1b" not in result.stderr and "\u202e" not in result.stderr
    (fired,) = [line for line in lines if "fired wake=" in line]
    if log_format == "json":
        record = json.loads(fired)
        assert record["lane"] == "lane\\x0a2030-01-01 00:00:00,000 CRITICAL django_wakes forged line"
        assert record["workspace_id"] == "ws\\x1b]0;pwned\\x07\\u202e"
    else:
        assert "\\x0a2030-01-01 00:00:00,000 CRITICAL django_wakes forged line" in fired


def _in_a_terminal(procs: Procs, *args: str) -> bytes:
    """Run ``manage.py ARGS`` with a pseudo-terminal as its stdout and stderr; return every byte it wrote."""
    leader, follower = pty.openpty()
    child = subprocess.Popen(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=procs.env(TERM="xterm-256color"),
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
    )
    os.close(follower)
    output = b""
    try:
        while True:
            ready, _, _ = select.select([leader], [], [], 60)
            if not ready:
                break
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the child closed the terminal (EIO on Linux)
                break
            if not chunk:
                break
            output += chunk
    finally:
        os.close(leader)
        child.wait(timeout=60)
    assert child.returncode == 0, output
    return output


@pytest.mark.multiprocess
def test_wakes_status_in_a_real_terminal_gets_no_escape_sequence_from_the_data(procs: Procs, sinks):
    sinks("t.unfired")
    django_wakes.stop_session("s-ok", reason="ok", workspace_id=WS)
    SessionControl.objects.filter(session_id="s-ok").update(
        session_id="s\x1b]0;pwned\x07\x1b[2J", stop_reason="r\u202eeverse" + FORGED
    )
    overdue = django_wakes.clock.now() - timedelta(minutes=5)  # shown as "Oldest overdue", with its kind
    wake = django_wakes.schedule(workspace_id=WS, at=overdue, kind="t.unfired")
    _smuggle(wake, kind="k\x1b[31mred")
    plain = _in_a_terminal(procs, "wakes", "status", "--no-color")
    assert b"\x1b" not in plain and b"\xe2\x80\xae" not in plain  # no ESC, no U+202E (UTF-8) from the data
    assert b"s\\x1b]0;pwned\\x07\\x1b[2J" in plain and b"r\\u202eeverse\\x0a2030" in plain
    coloured = _in_a_terminal(procs, "wakes", "status")  # the command's own colours stay; the data's do not
    assert b"\x1b]0;" not in coloured and b"\x1b[2J" not in coloured and b"\x1b[31mred" not in coloured
    assert b"k\\x1b[31mred" in coloured
