"""OpenTelemetry: follow a wake from the code that created it to the sink that ran it, hours later.

Active when ``opentelemetry-api`` is installed (the ``[otel]`` extra) *and* the process has a tracer
provider (``trace.set_tracer_provider``, or :func:`use_provider`); otherwise every hook here returns
at once, nothing is recorded on the wake and ``opentelemetry`` is never imported.

Spans follow OpenTelemetry's messaging conventions (a wake is a message, its ``kind`` the
destination): ``messaging.system`` ``django_wakes``, ``messaging.operation.type`` and ``.name``,
``messaging.destination.name`` (the kind), ``messaging.message.id`` (the wake's id), ``error.type``
on failure, names ``<operation> <kind>``; the ``wakes.*`` attributes stay.

* **Create**: a ``create <kind>`` span (PRODUCER) wraps each insert (``schedule_many``: one ``send
  <kind>`` span for the batch), and its context is stored on the wake (``Wake.trace_context``): the
  W3C ``traceparent`` and ``tracestate`` only, validated, the tracestate capped at 512 characters and
  32 members. Never baggage or another propagator's headers: what is stored is written with the W3C
  propagator whatever the process configured (:func:`carrier_of`).
* **Whose trace**: the create span is a child of the caller's current span when the caller is the
  host's own code (a view, a sink, a management command). When the trace came from outside the host
  (:func:`from_outside`: the package's own surfaces that a sender or a model reaches, the signed
  webhook and MCP, mark themselves with :func:`foreign_caller`; and any create whose current span
  is a remote context, or a SERVER span whose parent is remote, as an instrumented request's is), the
  create span starts a trace of its own with a *link* to the caller's span: a caller can neither
  choose the trace id the runner's spans carry nor put anything else into the stored context. A
  recurring chain's next occurrence, booked by the runner, likewise starts a trace of its own linked
  to the previous occurrence's (one trace per occurrence, not one endless trace per chain).
* **Fire**: each claim is a ``process <kind>`` span (CONSUMER) that **continues** the stored context
  (its parent is the wake's create span, and it links to it as the conventions ask: one trace from
  the host's request to the sink, as Celery's instrumentation does), with children ``receive
  <kind>`` (the claim), ``wakes.sink`` (current while the sink runs, so the sink's own spans, and
  wakes it creates, nest under it) and ``settle <kind>``; attributes ``wakes.wake_id``,
  ``wakes.kind``, ``wakes.attempt``, ``wakes.lane``, ``wakes.workspace_id``, ``wakes.runner_id``
  (also ``messaging.client.id``), ``wakes.takeover`` and, when it ends, ``wakes.outcome``. Every
  attempt of a wake reads the same stored context, so all of them are children of one create span.

A claim is a batch, made before any span of its wakes could be current, so the ``process`` and
``receive`` spans are given the claim's start and end times; a batched settle likewise.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
import time
from collections.abc import Iterator, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .engine.leases import Claim
    from .models import Wake

#: The instrumentation scope's name.
SCOPE = "django_wakes"
#: Dispositions that mark a ``process`` span as an error.
ERROR_OUTCOMES = frozenset({"failed", "dead", "interrupted"})
#: ``messaging.system``: what the conventions call the messaging system the spans describe.
SYSTEM = "django_wakes"

#: A W3C ``traceparent`` of version 00: version, trace id, parent id, flags.
TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")
#: One ``tracestate`` list member (W3C Trace Context: a key and an opaque value of printable ASCII).
TRACESTATE_MEMBER = re.compile(
    r"[a-z0-9][a-z0-9_\-*/]{0,240}(@[a-z][a-z0-9_\-*/]{0,13})?=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]"
)
#: The most ``tracestate`` members kept (the W3C limit) and characters (what every vendor must propagate).
TRACESTATE_MAX_MEMBERS = 32
TRACESTATE_MAX_LENGTH = 512

_outside: contextvars.ContextVar[bool] = contextvars.ContextVar("django_wakes_trace_from_outside", default=False)

_api: ModuleType | None = None  # opentelemetry.trace, once loaded
_checked = False
_provider: Any = None  # use_provider()'s, else the global one
_tracers: dict[int, Any] = {}
_global: tuple[float, Any] = (0.0, None)  # (when to look for a global provider again, its tracer)
#: While no global tracer provider is set, how often (seconds) to look again.
RECHECK_SECONDS = 1.0
_NOTHING: contextlib.nullcontext[None] = contextlib.nullcontext()  # every hook's answer when tracing is off


def _load() -> ModuleType | None:
    """``opentelemetry.trace`` if the API is installed (tried once: when absent, nothing is imported)."""
    global _api, _checked
    if not _checked:
        _checked = True
        try:
            from opentelemetry import trace
        except ImportError:  # the [otel] extra is not installed: tracing stays off
            return None
        _api = trace
    return _api


def use_provider(provider: Any) -> None:
    """Trace to ``provider`` instead of the global tracer provider (``None``: back to the global one)."""
    global _provider, _global
    _provider = provider
    _tracers.clear()
    _global = (0.0, None)


def tracer() -> Any:
    """This package's tracer, or ``None`` when tracing is off (no API, or no provider configured).

    Asked per wake, so it is cheap: the global provider is looked up again at most once every
    :data:`RECHECK_SECONDS` while there is none (a provider set after start-up is picked up within
    that), and never again once there is one (OpenTelemetry sets the global provider once).
    """
    global _global
    api = _load()
    if api is None:
        return None
    if _provider is not None:
        return _tracer_of(_provider)
    recheck_at, found = _global
    if found is not None:
        return found
    now = time.monotonic()
    if now < recheck_at:
        return None
    provider = api.get_tracer_provider()
    if isinstance(provider, api.ProxyTracerProvider | api.NoOpTracerProvider):
        _global = (now + RECHECK_SECONDS, None)  # the API alone: spans would be no-ops, with no context to keep
        return None
    found = _tracer_of(provider)
    _global = (0.0, found)
    return found


def _tracer_of(provider: Any) -> Any:
    found = _tracers.get(id(provider))
    if found is None:
        found = _tracers[id(provider)] = provider.get_tracer(SCOPE)
    return found


def enabled() -> bool:
    """Whether spans are recorded (the engine asks before timing a claim for them)."""
    return tracer() is not None


# -- the stored context: W3C traceparent and tracestate only ---------------------------------------------


def carrier_of(value: Any) -> dict[str, str] | None:
    """Return the part of a carrier that may be stored or continued: a valid ``traceparent`` and at most
    :data:`TRACESTATE_MAX_LENGTH` characters of ``tracestate``; ``None`` if there is no valid traceparent.

    Everything else a propagator writes (``baggage``, B3, a vendor's headers) is left out: it is the
    caller's to send, not the wake's to keep, and it would be stored outside ``INTENT_MAX_BYTES``.
    """
    if not isinstance(value, Mapping):
        return None
    parent = value.get("traceparent")
    found = TRACEPARENT.fullmatch(parent) if isinstance(parent, str) else None
    if found is None or set(found.group(1)) == {"0"} or set(found.group(2)) == {"0"}:
        return None
    kept = {"traceparent": found.group(0)}
    state = value.get("tracestate")
    if isinstance(state, str):
        members: list[str] = []
        for member in (m.strip(" \t") for m in state.split(",")):
            if len(members) == TRACESTATE_MAX_MEMBERS:
                break
            if TRACESTATE_MEMBER.fullmatch(member) and len(",".join([*members, member])) <= TRACESTATE_MAX_LENGTH:
                members.append(member)
        if members:
            kept["tracestate"] = ",".join(members)
    return kept


@contextlib.contextmanager
def foreign_caller() -> Iterator[None]:
    """Mark what runs inside as done for a caller outside the host (a webhook's sender, an MCP client).

    A wake created meanwhile starts a trace of its own, with a link to the caller's span, instead of
    continuing the caller's trace (:func:`from_outside`). Costs a context variable; imports nothing.
    """
    token = _outside.set(True)
    try:
        yield
    finally:
        _outside.reset(token)


def from_outside(span: Any) -> bool:
    """Whether a create under ``span`` (the current one) is for a caller outside the host.

    True inside :func:`foreign_caller`, when ``span`` is a remote context itself (a carrier extracted
    and attached with no span of the host's), and when it is a SERVER span whose parent is remote (an
    incoming request an instrumentation such as OpenTelemetry's Django or ASGI one continued).
    """
    if _outside.get():
        return True
    context = span.get_span_context()
    if context.is_remote:
        return True
    parent = getattr(span, "parent", None)  # the SDK's spans know it; others do not say
    return bool(parent is not None and parent.is_remote and getattr(span, "kind", None) == _api.SpanKind.SERVER)  # type: ignore[union-attr]


def _messaging(operation: str, kind: str) -> dict[str, Any]:
    return {
        "messaging.system": SYSTEM,
        "messaging.operation.type": operation,
        "messaging.operation.name": operation,
        "messaging.destination.name": kind,
    }


# -- create ------------------------------------------------------------------------------------------


def creating(
    fields: Mapping[str, Any], *, count: int = 1, follows: Mapping[str, Any] | None = None
) -> contextlib.AbstractContextManager[dict[str, str] | None]:
    """Wrap an insert in a ``wakes.create`` span; yield its context to store as ``trace_context`` (or None).

    ``follows`` (a chain's next occurrence): the stored context of the occurrence before it; the
    new span starts a trace of its own, linked to that one (when it has a context).
    """
    found = tracer()
    if found is None:
        return _NOTHING
    return _creating(found, fields, count, follows)


@contextlib.contextmanager
def _creating(
    found: Any, fields: Mapping[str, Any], count: int, follows: Mapping[str, Any] | None
) -> Iterator[dict[str, str] | None]:
    from opentelemetry import context, trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    w3c = TraceContextTextMapPropagator()
    parent = None
    links_found: tuple[Any, ...] = ()
    if follows is not None:
        parent = context.Context()  # a root: each occurrence of a chain is a trace of its own
        stored = carrier_of(follows)
        previous = trace.get_current_span(w3c.extract(stored)).get_span_context() if stored else None
        links_found = (trace.Link(previous),) if previous is not None and previous.is_valid else ()
    else:
        current = trace.get_current_span()
        caller = current.get_span_context()
        if caller.is_valid and from_outside(current):
            parent = context.Context()  # the caller's trace is linked, never continued
            links_found = (trace.Link(caller, {"wakes.link": "caller"}),)
    kind = str(fields.get("kind", ""))
    operation = "create" if count == 1 else "send"
    attributes = {
        **_messaging(operation, kind),
        "wakes.kind": kind,
        "wakes.workspace_id": fields.get("workspace_id", ""),
    }
    if count != 1:
        attributes["wakes.count"] = count
        attributes["messaging.batch.message_count"] = count
    with found.start_as_current_span(
        f"{operation} {kind}", context=parent, kind=trace.SpanKind.PRODUCER, links=links_found, attributes=attributes
    ):
        carrier: dict[str, str] = {}
        w3c.inject(carrier)
        yield carrier_of(carrier)


def created(wake: Wake) -> None:
    """Name the created wake on the current ``create`` span."""
    if _api is None or wake.trace_context is None:
        return
    span = _api.get_current_span()
    if span.is_recording():
        span.set_attribute("wakes.wake_id", wake.pk)
        span.set_attribute("messaging.message.id", str(wake.pk))


# -- fire ---------------------------------------------------------------------------------------------


def claimed(claims: list[Claim], started_ns: int, ended_ns: int) -> None:
    """Start a ``process`` span per claim (continuing its wake's stored context) and its ``receive``."""
    found = tracer()
    if found is None:
        return
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    for claim in claims:
        wake = claim.wake
        stored = carrier_of(wake.trace_context)  # a row written before this release may hold more: not read
        parent = TraceContextTextMapPropagator().extract(stored) if stored else None
        created = trace.get_current_span(parent).get_span_context() if parent is not None else None
        span = found.start_span(
            f"process {wake.kind}",
            context=parent,
            kind=trace.SpanKind.CONSUMER,
            start_time=started_ns,
            links=(trace.Link(created),) if created is not None and created.is_valid else (),
            attributes={
                **_messaging("process", wake.kind),
                "messaging.message.id": str(wake.pk),
                "messaging.client.id": claim.runner_id,
                "wakes.wake_id": wake.pk,
                "wakes.kind": wake.kind,
                "wakes.attempt": wake.attempts,
                "wakes.lane": wake.serial_key or "",
                "wakes.workspace_id": wake.workspace_id,
                "wakes.runner_id": claim.runner_id,
                "wakes.takeover": claim.takeover,
            },
        )
        found.start_span(
            f"receive {wake.kind}",
            context=trace.set_span_in_context(span),
            start_time=started_ns,
            attributes={**_messaging("receive", wake.kind), "messaging.message.id": str(wake.pk)},
        ).end(end_time=ended_ns)
        claim.trace = span


def sink(claim: Claim) -> contextlib.AbstractContextManager[Any]:
    """Wrap a sink's run: a ``wakes.sink`` span, current while it runs (its exception recorded, and its
    class, as ``error.type``, on the ``process`` span)."""
    span = claim.trace
    if span is None or _api is None:
        return _NOTHING
    return _sink(claim, span)


@contextlib.contextmanager
def _sink(claim: Claim, span: Any) -> Iterator[None]:
    child = tracer_of(claim).start_span("wakes.sink", context=_api.set_span_in_context(span))  # type: ignore[union-attr]
    with _api.use_span(child, end_on_exit=True, record_exception=True, set_status_on_exception=True):  # type: ignore[union-attr]
        try:
            yield
        except BaseException as exc:
            span.set_attribute("error.type", f"{type(exc).__module__}.{type(exc).__qualname__}")
            raise


def settling(claim: Claim) -> contextlib.AbstractContextManager[Any]:
    """Wrap a settle of one claim (a failure, a retry, a defer): a ``settle`` span."""
    span = claim.trace
    if span is None or _api is None:
        return _NOTHING
    child = tracer_of(claim).start_span(
        f"settle {claim.wake.kind}",
        context=_api.set_span_in_context(span),
        attributes={**_messaging("settle", claim.wake.kind), "messaging.message.id": str(claim.wake.pk)},
    )
    using: contextlib.AbstractContextManager[Any] = _api.use_span(child, end_on_exit=True)
    return using


def settled_together(claims: list[Claim], started_ns: int, ended_ns: int) -> None:
    """A ``settle`` span for each claim of a batched settle (one transaction for all of them)."""
    if _api is None:
        return
    for claim in claims:
        span = claim.trace
        if span is not None:
            child = tracer_of(claim).start_span(
                f"settle {claim.wake.kind}",
                context=_api.set_span_in_context(span),
                start_time=started_ns,
                attributes={
                    **_messaging("settle", claim.wake.kind),
                    "messaging.message.id": str(claim.wake.pk),
                    "wakes.batch": len(claims),
                },
            )
            child.end(end_time=ended_ns)


def finished(claim: Claim, outcome: str) -> None:
    """End a claim's ``process`` span with its outcome (once: later calls do nothing).

    A failed one carries ``error.type``: the class the sink raised (set as it raised), else the outcome
    (``interrupted``, ``dead`` when a lease lapsed on the last attempt).
    """
    span = claim.trace
    if span is None or _api is None:
        return
    claim.trace = None
    span.set_attribute("wakes.outcome", str(outcome))
    if str(outcome) in ERROR_OUTCOMES:
        if "error.type" not in (getattr(span, "attributes", None) or {}):
            span.set_attribute("error.type", str(outcome))
        span.set_status(_api.Status(_api.StatusCode.ERROR, str(outcome)))
    span.end()


def tracer_of(claim: Claim) -> Any:
    """The tracer a claim's spans come from (the one that started its fire span, even if tracing was
    switched off meanwhile)."""
    return tracer() or _api.NoOpTracer()  # type: ignore[union-attr]


def now_ns() -> int:
    """A span timestamp (nanoseconds since the epoch)."""
    return time.time_ns()
