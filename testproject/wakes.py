"""Demo sinks and host hooks for the testproject (autodiscovered by django-wakes)."""

from __future__ import annotations

import logging
from typing import Any

from django_wakes import sink

logger = logging.getLogger("testproject")


def spawn_turn(session_id: str, result: dict[str, Any], *, workspace_id: str) -> None:
    """Stand-in for an agent host: print the turn a real host would start (with a tool-made wake's note)."""
    from django_wakes.agents.tools import turn_context

    context = turn_context(session_id, result, workspace_id=workspace_id)
    note = (context["wake"] or {}).get("note")
    said = f"  -> session {workspace_id}/{session_id} resumes with {result}" + (f", note: {note!r}" if note else "")
    print(said, flush=True)


def authorize(actor: Any, workspace_id: str) -> bool:
    """Demo policy: anyone named in the workspace id may approve; 'demo' approves everything."""
    return str(actor) == "demo" or str(actor) in workspace_id


def mcp_auth(request: Any) -> tuple[str, str] | None:
    """``WAKES["MCP_AUTH"]`` of the demo: a bearer token names one agent session.

    A real host looks the token up in its own table of agent sessions; this one reads
    ``WAKES_TEST_MCP_TOKENS`` (JSON ``{token: [workspace_id, session_id]}``), for the tests' servers.
    """
    import hmac
    import json
    import os

    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token:
        return None
    for known, identity in json.loads(os.environ.get("WAKES_TEST_MCP_TOKENS", "{}")).items():
        if hmac.compare_digest(known.encode(), token.encode()):
            return (identity[0], identity[1])
    return None


def on_approval(wake: Any, token: str) -> None:
    """``WAKES["ON_APPROVAL"]`` of the demo: where a human would get the link (the tests read it back)."""
    import json
    import os

    from django.urls import reverse

    link = reverse("django_wakes:approve", args=[token])
    print(f"  -> approval {wake.pk} for session {wake.session_id}: {link}", flush=True)
    probe_dir = os.environ.get("WAKES_PROBE_DIR")
    if probe_dir:
        with open(os.path.join(probe_dir, "approvals.jsonl"), "a", encoding="utf-8") as out:
            out.write(json.dumps({"wake_id": wake.pk, "token": token}) + "\n")


@sink("demo.print")
def print_intent(wake: Any, result: dict[str, Any]) -> None:
    print(f"  -> wake {wake.pk} ({wake.trigger_type}) fired with intent={wake.intent} result={result}", flush=True)


# Probe sinks used by the multi-process tests and the benchmark (inert unless their kinds are scheduled).
from testproject import probe_sinks  # noqa: E402,F401
