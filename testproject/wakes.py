"""Demo sinks and host hooks for the testproject (autodiscovered by django-wakes)."""

from __future__ import annotations

import logging
from typing import Any

from django_wakes import sink

logger = logging.getLogger("testproject")


def spawn_turn(session_id: str, result: dict[str, Any]) -> None:
    """Stand-in for an agent host: print the turn a real host would start (with a tool-made wake's note)."""
    from django_wakes.agents.tools import turn_context

    context = turn_context(session_id, result)
    note = (context["wake"] or {}).get("note")
    print(f"  -> session {session_id} resumes with {result}" + (f", note: {note!r}" if note else ""), flush=True)


def authorize(actor: Any, workspace_id: str) -> bool:
    """Demo policy: anyone named in the workspace id may approve; 'demo' approves everything."""
    return str(actor) == "demo" or str(actor) in workspace_id


@sink("demo.print")
def print_intent(wake: Any, result: dict[str, Any]) -> None:
    print(f"  -> wake {wake.pk} ({wake.trigger_type}) fired with intent={wake.intent} result={result}", flush=True)


# Probe sinks used by the multi-process tests and the benchmark (inert unless their kinds are scheduled).
from testproject import probe_sinks  # noqa: E402,F401
