"""OpenTelemetry (``django_wakes.tracing``): a wake keeps its creator's trace context, and every attempt
to fire it, in whichever process, continues that trace with spans for claim, sink and settle.

The test process traces to an SDK ``TracerProvider`` with the SDK's ``InMemorySpanExporter``
(installed with :func:`django_wakes.tracing.use_provider`, so no other test runs with a provider).
Runner processes get their own provider that writes every span as a JSON line to a file
(``testproject/otel.py``, under ``WAKES_TEST_OTEL_SPANS``), which the test reads back. Without the
API installed, nothing is imported: a child process that cannot import ``opentelemetry`` proves it.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from opentelemetry import context as otel_context
from opentelemetry import propagate
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from django_wakes import Retry, engine, schedule, schedule_many, tracing
from django_wakes import clock as clock_module
from django_wakes.models import State, Wake
from django_wakes.runner import Sweeper
from django_wakes.testing import FakeClock
from django_wakes.web.webhooks import sign
from tests.processes import Procs, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

WS = "ws-trace"
RUNNER = "host-trace:1:abc"


class Traced:
    """The test process's tracer and what it exported."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("tests.request")

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if name is None or s.name == name]

    def of(self, operation: str) -> list[ReadableSpan]:
        """The spans of one messaging operation (``create``, ``send``, ``receive``, ``process``, ``settle``)."""
        return [
            s
            for s in self.exporter.get_finished_spans()
            if (s.attributes or {}).get("messaging.operation.type") == operation
        ]


@pytest.fixture
def traced() -> Iterator[Traced]:
    found = Traced()
    tracing.use_provider(found.provider)
    try:
        yield found
    finally:
        tracing.use_provider(None)
        found.provider.shutdown()


def hex_id(value: int, width: int = 32) -> str:
    return f"0x{value:0{width}x}"


# --------------------------------------------------------------------------------------------------
# Create: the caller's trace is recorded on the wake
# --------------------------------------------------------------------------------------------------


def test_a_create_records_its_span_a_child_of_the_callers(sinks, traced):
    sinks("t.ok")
    with traced.tracer.start_as_current_span("POST /orders") as request:
        wake = schedule(workspace_id=WS, delay="1h", kind="t.ok")

    (create,) = traced.of("create")
    assert create.parent is not None and create.parent.span_id == request.get_span_context().span_id
    assert create.context.trace_id == request.get_span_context().trace_id
    assert create.kind == SpanKind.PRODUCER
    assert create.name == "create t.ok"
    assert dict(create.attributes or {}) == {
        "messaging.system": "django_wakes",
        "messaging.operation.type": "create",
        "messaging.operation.name": "create",
        "messaging.destination.name": "t.ok",
        "messaging.message.id": str(wake.pk),
        "wakes.kind": "t.ok",
        "wakes.workspace_id": WS,
        "wakes.wake_id": wake.pk,
    }
    stored = Wake.objects.get(pk=wake.pk).trace_context
    assert list(stored) == ["traceparent"]
    assert stored["traceparent"].startswith(f"00-{create.context.trace_id:032x}-{create.context.span_id:016x}-")


def test_a_create_outside_any_span_starts_a_trace(sinks, traced):
    sinks("t.ok")
    wake = schedule(workspace_id=WS, delay="1h", kind="t.ok")
    (create,) = traced.of("create")
    assert create.parent is None
    assert Wake.objects.get(pk=wake.pk).trace_context["traceparent"].split("-")[1] == f"{create.context.trace_id:032x}"


def test_schedule_many_is_one_create_span_for_the_batch(sinks, traced):
    sinks("t.ok")
    with traced.tracer.start_as_current_span("import"):
        wakes = schedule_many([{"delay": "1h"} for _ in range(5)], workspace_id=WS, kind="t.ok")
    (create,) = traced.of("send")
    assert create.name == "send t.ok" and create.kind == SpanKind.PRODUCER
    assert create.attributes["wakes.count"] == 5 == create.attributes["messaging.batch.message_count"]
    contexts = {json.dumps(w.trace_context) for w in Wake.objects.filter(pk__in=[w.pk for w in wakes])}
    assert len(contexts) == 1 and f"{create.context.span_id:016x}" in contexts.pop()


def test_without_a_tracer_provider_nothing_is_recorded(sinks):
    """The API is installed here, but the process configured no provider: no span, no stored context."""
    sinks("t.ok")
    assert not tracing.enabled()
    wake = schedule(workspace_id=WS, delay="0s", kind="t.ok")
    assert Wake.objects.get(pk=wake.pk).trace_context is None
    (claim,) = engine.claim_batch(runner_id=RUNNER)
    assert claim.trace is None
    assert engine.fire(claim).outcome == "fired"


# --------------------------------------------------------------------------------------------------
# Fire: one trace from the request to the sink, retries and re-drives included
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def trace_sink(sinks, traced) -> None:
    """``t.trace``: ``probe.trace`` (testproject/probe_sinks.py) in this process, its span from ``traced``.

    (A sink's own spans come from whatever tracer it uses; the runner processes' ``probe.trace`` uses
    the global provider, which this process leaves unset.)
    """

    def run(wake: Any, result: Any) -> Any:
        steer = wake.intent or {}
        with traced.tracer.start_as_current_span("probe.work", attributes={"probe.wake": wake.pk}):
            if steer.get("spawn") and wake.attempts == 1:
                schedule(workspace_id=wake.workspace_id, kind="t.trace", delay="0s", intent={"spawned_by": wake.pk})
        if wake.attempts <= steer.get("retries", 0):
            return Retry(at=clock_module.now(), reason="again")
        if steer.get("fail"):
            raise RuntimeError("t.trace fails on purpose")
        return None

    sinks("t.trace", run)


def children(spans: list[ReadableSpan], parent: ReadableSpan) -> dict[str, ReadableSpan]:
    return {s.name: s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id}


def test_each_attempt_is_a_fire_span_continuing_the_wakes_trace(clock: FakeClock, traced, trace_sink):
    with traced.tracer.start_as_current_span("POST /orders") as request:
        wake = schedule(
            workspace_id=WS, delay="0s", kind="t.trace", serial_key="order:7", intent={"retries": 1}, max_attempts=2
        )
    (create,) = traced.of("create")
    sweeper = Sweeper(runner_id=RUNNER, listen=False)

    sweeper.run_once()  # attempt 1: Retry
    clock.advance("1s")
    sweeper.run_once()  # attempt 2: fired
    assert Wake.objects.get(pk=wake.pk).state == State.FIRED

    fires = sorted(traced.of("process"), key=lambda s: s.attributes["wakes.attempt"])
    assert [f.attributes["wakes.outcome"] for f in fires] == ["retry", "fired"]
    spans = traced.spans()
    for number, fire in enumerate(fires, 1):
        assert fire.context.trace_id == request.get_span_context().trace_id, "one trace from the request"
        assert fire.parent.span_id == create.context.span_id, "a child of the create span (continuing)"
        assert fire.kind == SpanKind.CONSUMER
        assert {k: fire.attributes[k] for k in ("wakes.wake_id", "wakes.kind", "wakes.attempt", "wakes.lane")} == {
            "wakes.wake_id": wake.pk,
            "wakes.kind": "t.trace",
            "wakes.attempt": number,
            "wakes.lane": "order:7",
        }
        assert fire.attributes["wakes.runner_id"] == RUNNER
        steps = children(spans, fire)
        assert set(steps) == {"receive t.trace", "wakes.sink", "settle t.trace"}, sorted(steps)
        claim, run, settle = steps["receive t.trace"], steps["wakes.sink"], steps["settle t.trace"]
        assert claim.start_time == fire.start_time <= claim.end_time
        assert claim.end_time <= run.start_time <= run.end_time
        assert run.end_time <= settle.start_time <= fire.end_time
        assert fire.name == "process t.trace"
        assert {k: fire.attributes[k] for k in fire.attributes if k.startswith("messaging.")} == {
            "messaging.system": "django_wakes",
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": "t.trace",
            "messaging.message.id": str(wake.pk),
            "messaging.client.id": RUNNER,
        }
        assert claim.attributes["messaging.operation.type"] == "receive"
        assert settle.attributes["messaging.operation.type"] == "settle"
        assert "error.type" not in fire.attributes
        (link,) = fire.links  # the conventions: a process span links to the message's creation context
        assert link.context.span_id == create.context.span_id
        (work,) = children(spans, steps["wakes.sink"]).values()
        assert work.name == "probe.work", "the sink's own spans nest under wakes.sink"


def test_a_failure_a_dead_letter_and_its_retry_stay_in_one_trace(clock: FakeClock, traced, trace_sink):
    with traced.tracer.start_as_current_span("POST /jobs") as request:
        wake = schedule(workspace_id=WS, delay="0s", kind="t.trace", intent={"fail": True}, max_attempts=1)
    sweeper = Sweeper(runner_id=RUNNER, listen=False)
    sweeper.run_once()
    assert Wake.objects.get(pk=wake.pk).state == State.DEAD
    assert engine.requeue(wake.pk)  # an operator's retry from the dead letter
    sweeper.run_once()

    fires = traced.of("process")
    assert [f.attributes["wakes.outcome"] for f in fires] == ["dead", "dead"]
    assert {f.context.trace_id for f in fires} == {request.get_span_context().trace_id}
    assert all(f.status.status_code.name == "ERROR" for f in fires)
    assert [f.attributes["error.type"] for f in fires] == ["builtins.RuntimeError"] * 2  # the class the sink raised
    sinks = [s for s in traced.spans("wakes.sink")]
    assert all(s.events and s.events[0].name == "exception" for s in sinks), "the sink's exception is recorded"


def test_a_wake_created_inside_a_sink_continues_the_trace(clock: FakeClock, traced, trace_sink):
    with traced.tracer.start_as_current_span("POST /signup") as request:
        parent = schedule(workspace_id=WS, delay="0s", kind="t.trace", intent={"spawn": True})
    sweeper = Sweeper(runner_id=RUNNER, listen=False)
    sweeper.run_once()
    sweeper.run_once()
    spawned = Wake.objects.exclude(pk=parent.pk).get()
    assert spawned.state == State.FIRED
    fires = {f.attributes["wakes.wake_id"]: f for f in traced.of("process")}
    assert fires[spawned.pk].context.trace_id == request.get_span_context().trace_id
    (work,) = [s for s in traced.spans("probe.work") if s.attributes["probe.wake"] == parent.pk]
    spawned_create = [s for s in traced.of("create") if s.attributes.get("wakes.wake_id") == spawned.pk]
    assert spawned_create[0].parent.span_id == work.context.span_id


def test_a_chains_next_occurrence_starts_a_trace_linked_to_the_previous(clock: FakeClock, traced, trace_sink):
    with traced.tracer.start_as_current_span("POST /reports") as request:
        first = schedule(workspace_id=WS, kind="t.trace", every="1m")
    clock.advance("1m")
    Sweeper(runner_id=RUNNER, listen=False).run_once()
    second = Wake.objects.exclude(pk=first.pk).get(chain_id=first.chain_id)
    creates = {s.attributes.get("wakes.wake_id"): s for s in traced.of("create")}
    assert creates[second.pk].parent is None, "a trace of its own, not one endless trace per chain"
    assert creates[second.pk].context.trace_id != request.get_span_context().trace_id
    (link,) = creates[second.pk].links
    assert link.context.span_id == creates[first.pk].context.span_id


# --------------------------------------------------------------------------------------------------
# Across processes: a real runwakes exports its spans
# --------------------------------------------------------------------------------------------------


def read_spans(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.mark.multiprocess
def test_a_runner_process_continues_the_trace_of_the_request_that_created_the_wake(procs: Procs, traced):
    with traced.tracer.start_as_current_span("POST /orders") as request:
        ok = schedule(workspace_id=WS, delay="0s", kind="probe.trace", intent={"retries": 1, "spawn": True})
        failing = schedule(workspace_id=WS, delay="0s", kind="probe.trace", intent={"fail": True}, max_attempts=1)
    trace_id = hex_id(request.get_span_context().trace_id)
    creates = {s.attributes["wakes.wake_id"]: s for s in traced.of("create")}
    spans_file = procs.workdir / "spans.jsonl"
    runner = procs.runner("traced", "--interval", "0.2", WAKES_TEST_OTEL_SPANS=str(spans_file))

    def settled() -> bool:
        states = dict(Wake.objects.values_list("pk", "state"))
        return len(states) == 3 and set(states.values()) == {State.FIRED, State.DEAD}

    wait_for(lambda: settled() or procs.alive(runner), timeout=120, what="the wakes to settle in the runner")
    assert engine.requeue(failing.pk)  # re-driven from the dead letter: one more attempt, same trace
    wait_for(
        lambda: Wake.objects.get(pk=failing.pk).state == State.DEAD and Wake.objects.get(pk=failing.pk).attempts == 1,
        timeout=120,
        what="the re-driven wake to die again",
    )
    wait_for(
        lambda: (
            len([s for s in read_spans(spans_file) if s["name"] == "process probe.trace"]) == 5 or procs.alive(runner)
        ),
        timeout=60,
        what="five fire spans (ok twice, failing twice, the spawned wake once)",
    )
    assert procs.stop(runner) == 0
    spans = read_spans(spans_file)
    by_id = {s["context"]["span_id"]: s for s in spans}
    fires = [s for s in spans if s["name"] == "process probe.trace"]
    spawned = Wake.objects.exclude(pk__in=[ok.pk, failing.pk]).get()

    for wake, outcomes in ((ok, ["retry", "fired"]), (failing, ["dead", "dead"])):
        mine = sorted((f for f in fires if f["attributes"]["wakes.wake_id"] == wake.pk), key=lambda f: f["start_time"])
        assert [f["attributes"]["wakes.outcome"] for f in mine] == outcomes
        for fire in mine:
            assert fire["context"]["trace_id"] == trace_id, "the runner's spans are in the request's trace"
            assert fire["parent_id"] == hex_id(creates[wake.pk].context.span_id, 16)
            assert fire["attributes"]["wakes.runner_id"].split(":")[1] == str(runner.pid)
            steps = {s["name"] for s in spans if s["parent_id"] == fire["context"]["span_id"]}
            assert steps == {"receive probe.trace", "wakes.sink", "settle probe.trace"}, steps

    (spawned_fire,) = [f for f in fires if f["attributes"]["wakes.wake_id"] == spawned.pk]
    assert spawned_fire["context"]["trace_id"] == trace_id, "a wake made inside a sink stays in the trace"
    spawned_create = by_id[spawned_fire["parent_id"]]
    assert spawned_create["name"] == "create probe.trace"
    assert by_id[spawned_create["parent_id"]]["name"] == "probe.work"
    assert by_id[by_id[spawned_create["parent_id"]]["parent_id"]]["name"] == "wakes.sink"


# --------------------------------------------------------------------------------------------------
# Without the extra: nothing imported
# --------------------------------------------------------------------------------------------------

WITHOUT_OTEL = """
import importlib.abc, sys

class NoOpenTelemetry(importlib.abc.MetaPathFinder):  # as if the [otel] extra were not installed
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None

sys.meta_path.insert(0, NoOpenTelemetry())
import django
django.setup()
import django_wakes
from django_wakes import tracing
from django_wakes.models import Wake
wake = django_wakes.schedule(workspace_id="ws-no-otel", delay="0s", kind="probe.record")
report = django_wakes.run_due()
print("RESULT", tracing.enabled(), Wake.objects.get(pk=wake.pk).trace_context, report.fired,
      sorted(m for m in sys.modules if m.startswith("opentelemetry")))
"""


@pytest.mark.multiprocess
def test_without_the_extra_opentelemetry_is_never_imported(procs: Procs):
    child = procs.start(["-c", WITHOUT_OTEL], name="no-otel")
    assert child.wait(timeout=120) == 0, procs.log(child)
    (line,) = [line for line in procs.log(child).splitlines() if line.startswith("RESULT")]
    assert line == "RESULT False None 1 []", line
    assert "opentelemetry" in sys.modules, "(here, with the extra, it is: the child's [] is not vacuous)"


# --------------------------------------------------------------------------------------------------
# Issue 26, finding 7: what is stored of a caller's context, and whose trace the runner's spans are in
# --------------------------------------------------------------------------------------------------

CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"  # chosen by the caller
CALLER_PARENT = f"00-{CALLER_TRACE}-b7ad6b7169203331-01"


@contextlib.contextmanager
def incoming(headers: dict[str, str]) -> Iterator[None]:
    """What an instrumentation does with a request's headers: extract them (the global propagator, which
    reads ``traceparent``, ``tracestate`` and ``baggage``) and make that the current context."""
    token = otel_context.attach(propagate.extract(headers))
    try:
        yield
    finally:
        otel_context.detach(token)


def test_only_a_valid_traceparent_and_a_capped_tracestate_are_stored(sinks, traced):
    """A 7.7 kB baggage was stored whole on the wake, outside INTENT_MAX_BYTES."""
    sinks("t.ok")
    members = ",".join(f"vendor{i}=" + "v" * 60 for i in range(20))  # 20 members, 1.4 kB
    headers = {"traceparent": CALLER_PARENT, "tracestate": members, "baggage": "user=" + "x" * 7700}
    with incoming(headers), traced.tracer.start_as_current_span("worker", kind=SpanKind.CONSUMER):
        wake = schedule(workspace_id=WS, delay="1h", kind="t.ok")
    stored = Wake.objects.get(pk=wake.pk).trace_context
    assert sorted(stored) == ["traceparent", "tracestate"]
    assert len(stored["tracestate"]) <= tracing.TRACESTATE_MAX_LENGTH
    assert stored["tracestate"].startswith("vendor0=") and len(stored["tracestate"].split(",")) == 7
    assert tracing.carrier_of({"traceparent": "00-" + "0" * 32 + "-b7ad6b7169203331-01"}) is None
    assert tracing.carrier_of({"traceparent": "junk", "baggage": "x"}) is None


@pytest.mark.parametrize("how", ["a bare remote context", "a SERVER span continuing it"])
def test_a_caller_from_outside_is_linked_and_its_trace_id_never_reaches_the_runner(clock, traced, trace_sink, how):
    """A caller-chosen trace id was continued into the runner's spans."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(incoming({"traceparent": CALLER_PARENT}))
        if how != "a bare remote context":  # as OpenTelemetry's Django or ASGI instrumentation makes it
            stack.enter_context(traced.tracer.start_as_current_span("POST /hook", kind=SpanKind.SERVER))
        wake = schedule(workspace_id=WS, delay="0s", kind="t.trace")
    Sweeper(runner_id=RUNNER, listen=False).run_once()
    (create,) = traced.of("create")
    assert create.parent is None, "a trace of its own"
    (link,) = create.links
    assert f"{link.context.trace_id:032x}" == CALLER_TRACE and link.attributes == {"wakes.link": "caller"}
    assert CALLER_TRACE not in json.dumps(Wake.objects.get(pk=wake.pk).trace_context)
    (fire,) = traced.of("process")
    assert fire.context.trace_id == create.context.trace_id and f"{fire.context.trace_id:032x}" != CALLER_TRACE
    assert fire.parent.span_id == create.context.span_id
    assert all(f"{s.context.trace_id:032x}" != CALLER_TRACE for s in traced.spans() if s.name != "POST /hook")


def test_a_wake_made_while_the_signed_webhook_runs_links_to_the_request(clock, traced, trace_sink, settings):
    """The webhook marks its caller as from outside: even under the host's own span, a wake its MAP makes links."""

    def make_a_wake(delivery: Any) -> None:
        schedule(workspace_id=WS, delay="0s", kind="t.trace", intent={"from": delivery.id})
        return None

    settings.WAKES = {
        **settings.WAKES,
        "WEBHOOKS": {"ci": {"SECRETS": ["s3cr3t"], "WORKSPACE": WS, "MAP": make_a_wake}},
    }
    body, stamp = b'{"any": 1}', str(int(clock_module.now().timestamp()))
    signed = {
        "X-Wakes-Timestamp": stamp,
        "X-Wakes-Delivery": "d-7",
        "X-Wakes-Signature": sign("s3cr3t", stamp, "d-7", body),
    }
    with traced.tracer.start_as_current_span("host middleware") as host:
        response = Client().post("/wakes/events/ci/", data=body, content_type="application/json", headers=signed)
    assert response.json() == {"accepted": 0}
    (create,) = traced.of("create")
    assert create.parent is None and create.context.trace_id != host.get_span_context().trace_id
    assert [link.context.span_id for link in create.links] == [host.get_span_context().span_id]
    with traced.tracer.start_as_current_span("host view"):  # the host's own code, outside the webhook
        schedule(workspace_id=WS, delay="1h", kind="t.trace")
    assert traced.of("create")[-1].parent is not None, "the host's own creates still continue its trace"


def test_a_stored_context_that_is_not_valid_starts_a_fresh_trace_at_fire(clock, traced, trace_sink):
    wake = schedule(workspace_id=WS, delay="0s", kind="t.trace")
    Wake.objects.filter(pk=wake.pk).update(trace_context={"traceparent": "00-junk", "baggage": "x" * 8000})
    Sweeper(runner_id=RUNNER, listen=False).run_once()
    (fire,) = traced.of("process")
    assert fire.parent is None and fire.links == () and fire.attributes["wakes.outcome"] == "fired"


def test_an_mcp_clients_trace_is_linked_and_never_continued(clock, traced, spawned):
    """The MCP SDK continues a client's ``_meta.traceparent``: the wake a tool call makes links to it instead."""
    from asgiref.sync import async_to_sync
    from mcp import Client as McpClient

    from django_wakes.agents import mcp_server

    async def call() -> Any:
        mcp_server._identity.set((WS, "sess-trace"))
        async with McpClient(mcp_server.build_server()) as client:
            return await client.call_tool(
                "schedule_followup", {"delay": "1h", "note": "traced"}, meta={"traceparent": CALLER_PARENT}
            )

    made = async_to_sync(call)()
    assert not made.is_error, made.structured_content
    (create,) = traced.of("create")
    assert create.parent is None and f"{create.context.trace_id:032x}" != CALLER_TRACE
    assert [f"{link.context.trace_id:032x}" for link in create.links] == [CALLER_TRACE]
    assert CALLER_TRACE not in json.dumps(Wake.objects.get(pk=made.structured_content["wake_id"]).trace_context)
