"""``manage.py wakes_demo``: schedule a delay, an event watch and an approval, then fire them all.

It lives in the testproject (it needs the testproject's ``demo.print`` sink and ``AUTHORIZE`` hook),
and ends by leaving one approval open for a human: it prints its link, the operator console's and the
dashboard's addresses, and a staff user to log in with (who may view and operate wakes, nothing else).
"""

from __future__ import annotations

import os
import secrets
import sys
import time
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management.base import BaseCommand, CommandError
from django.urls import reverse

import django_wakes
from django_wakes.runner import Sweeper
from django_wakes.sinks import registry
from django_wakes.testing import fake_clock


class Command(BaseCommand):
    help = "Show django-wakes at work: a delayed wake, an event-triggered one and an approval, all fired."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--delay", type=float, default=2.0, help="Seconds until the delayed wake (default %(default)r)."
        )
        parser.add_argument(
            "--base-url",
            default="http://127.0.0.1:8000",
            help="Where `manage.py runserver` serves the testproject, for the printed link (default %(default)r).",
        )

    def handle(self, *args: Any, delay: float, base_url: str, **options: Any) -> None:
        if registry.get("demo.print") is None:
            raise CommandError("the demo needs the 'demo.print' sink (testproject/wakes.py): run it in the testproject")
        stamp = int(time.time())
        out = self.stdout
        out.write(self.style.MIGRATE_HEADING("Scheduling three wakes"))
        timed = django_wakes.schedule(
            workspace_id="demo",
            session_id="session-1",
            delay=f"{delay}s",
            kind="demo.print",
            intent={"say": "the delayed wake"},
            idempotency_key=f"demo-delay-{stamp}",
        )
        out.write(f"  wake {timed.pk}: at +{delay:g}s (trigger 'at')")
        watcher = django_wakes.watch(
            workspace_id="demo",
            event_key=f"ci:pass:{stamp}",
            kind="demo.print",
            expires_in="1h",
            intent={"say": "CI passed"},
        )
        out.write(f"  wake {watcher.pk}: waits for event 'ci:pass:{stamp}'")
        approval = django_wakes.request_approval(
            workspace_id="demo",
            prompt="Deploy to production?",
            expires_in="1h",
            kind="demo.print",
            intent={"say": "approval answered"},
        )
        out.write(f"  wake {approval.wake.pk}: waits for an approval (token shown once: {approval.token[:6]}…)")

        runner = Sweeper(interval=0.2)
        out.write(self.style.MIGRATE_HEADING("Pass 1: nothing is due yet"))
        report = runner.run_once()
        out.write(f"  fired {report.fired}")

        out.write(self.style.MIGRATE_HEADING("Delivering the event and answering the approval"))
        accepted = django_wakes.deliver_event(workspace_id="demo", event_key=f"ci:pass:{stamp}", payload={"build": 42})
        out.write(f"  event accepted by {accepted} watcher(s)")
        django_wakes.resolve(approval.token, {"approved": True}, "demo")
        out.write("  approval resolved by 'demo'")
        report = runner.run_once()
        out.write(f"  pass 2 fired {report.fired}")

        out.write(self.style.MIGRATE_HEADING(f"Waiting for the delayed wake (~{delay:g}s)"))
        deadline = time.monotonic() + delay + 10
        timed.refresh_from_db()
        while timed.state != "fired" and time.monotonic() < deadline:
            runner.run_once()
            time.sleep(0.1)
            timed.refresh_from_db()
        if timed.state != "fired":
            raise CommandError(f"the delayed wake did not fire (state {timed.state})")
        out.write(self.style.SUCCESS("All three wakes fired."))
        self.agent_follow_up(runner)
        self.open_approval_for_a_human(base_url.rstrip("/"))

    def agent_follow_up(self, runner: Sweeper) -> None:
        """A model's tool call (as a host would dispatch it) books a follow-up; the turn comes back."""
        from django_wakes.agents import tools

        out = self.stdout
        out.write(self.style.MIGRATE_HEADING("An agent asks to be woken: dispatch('schedule_followup', ...)"))
        arguments = '{"delay": "10s", "note": "check whether the deploy finished"}'  # as a model emits it
        result = tools.dispatch(
            "schedule_followup",
            arguments,
            workspace_id="demo",
            session_id="agent-session-1",
            tool_call_id=f"demo-call-{int(time.time())}",
        )
        if "error" in result:
            raise CommandError(f"the tool call was refused: {result['error']}")
        out.write(f"  the model is told: {result}")
        later = datetime.fromisoformat(result["fire_at"]) + timedelta(seconds=1)
        with fake_clock(later):  # rather than wait 10 s, the demo moves its clock past the follow-up
            report = runner.run_once()
        out.write(f"  at {later:%H:%M:%S} the session's turn came back (fired {report.fired}), note and all")

    def open_approval_for_a_human(self, base_url: str) -> None:
        """Leave one approval open, refresh the ``demo`` staff user, and print where to go in a browser."""
        approval = django_wakes.request_approval(
            workspace_id="demo",
            prompt="Deploy build 42 to production?",
            expires_in="1d",
            kind="demo.print",
            intent={"deploy": "build 42", "to": "production"},
        )
        username, password = "demo", secrets.token_urlsafe(9)
        self.staff_user(username, password)
        python = os.path.relpath(sys.executable)
        python = python if not python.startswith("..") else "python"
        link = base_url + reverse("django_wakes:approve", args=[approval.token])
        out = self.stdout
        out.write(self.style.MIGRATE_HEADING("Now answer an approval in your browser"))
        out.write(f"  wake {approval.wake.pk} waits for your answer (expires in 1 day)")
        out.write(f"  1. start the web server:  {python} manage.py runserver")
        out.write(f"  2. open the link:         {link}")
        out.write(f"  3. log in as:             username {username}, password {password}")
        out.write(f"  4. answer, then fire it:  {python} manage.py runwakes --once")
        out.write(self.style.MIGRATE_HEADING("Then look at the operator console (same server, same login)"))
        out.write(f"  the wakes:     {base_url}{reverse('admin:django_wakes_wake_changelist')}")
        out.write(f"  the dashboard: {base_url}{reverse('admin:django_wakes_dashboard')}")
        out.write(f"  staff login:   username {username}, password {password}")

    def staff_user(self, username: str, password: str) -> None:
        """The ``demo`` user, staff, who may view every django-wakes page and operate wakes; a new password each run."""
        user_model = get_user_model()
        user, _ = user_model._default_manager.get_or_create(**{user_model.USERNAME_FIELD: username})
        user.set_password(password)  # a new one on every run: it is printed
        user.is_staff = True
        user.save()
        permissions = Permission.objects.filter(content_type__app_label="django_wakes").filter(
            codename__startswith="view_"
        ) | Permission.objects.filter(content_type__app_label="django_wakes", codename="operate_wake")
        user.user_permissions.add(*permissions)
