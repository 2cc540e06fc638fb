"""OpenTelemetry: follow a wake from the code that created it to the sink that ran it, hours later.

Active when ``opentelemetry-api`` is installed (the ``[otel]`` extra) *and* the process has a tracer
provider (``trace.set_tracer_provider``, or :func:`use_provider`); otherwise every hook here returns
at once, nothing is recorded on the wake and ``opentelemetry`` is never imported.

* **Create**: a ``wakes.create`` span (a child of the caller's current span, if any) wraps each
  insert, and its context is stored on the wake (``Wake.trace_context``, a W3C ``traceparent``
  carrier, written by the configured propagator). ``schedule_many`` makes one span for the batch.
  A recurring chain's next occurrence, booked by the runner, starts a trace of its own with a
  *link* to the previous occurrence's (one trace per occurrence, not one endless trace per chain).
* **Fire**: each claim is a ``wakes.fire`` span that **continues** the stored context (its parent is
  the wake's ``wakes.create`` span: one trace from the request to the sink, as Celery's
  instrumentation does), with children ``wakes.claim``, ``wakes.sink`` (current while the sink
  runs, so the sink's own spans, and wakes it creates, nest under it) and ``wakes.settle``;
  attributes ``wakes.wake_id``, ``wakes.kind``, ``wakes.attempt``, ``wakes.lane``,
  ``wakes.workspace_id``, ``wakes.runner_id``, ``wakes.takeover`` and, when it ends,
  ``wakes.outcome``. Every attempt of a wake (a retry, a re-drive after a lapsed lease, a retry
  from the dead letter) reads the same stored context, so all of them are children of the same
  create span, in one trace.

A claim is a batch, made before any span of its wakes could be current, so the ``wakes.fire`` and
``wakes.claim`` spans are given the claim's start and end times; a batched settle likewise.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .engine.leases import Claim
    from .models import Wake

#: The instrumentation scope's name.
SCOPE = "django_wakes"
#: Dispositions that mark a ``wakes.fire`` span as an error.
ERROR_OUTCOMES = frozenset({"failed", "dead", "interrupted"})

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
    from opentelemetry import context, propagate, trace

    parent = None
    links_found: tuple[Any, ...] = ()
    if follows is not None:
        parent = context.Context()  # a root: each occurrence of a chain is a trace of its own
        previous = trace.get_current_span(propagate.extract(follows)).get_span_context() if follows else None
        links_found = (trace.Link(previous),) if previous is not None and previous.is_valid else ()
    attributes = {"wakes.kind": fields.get("kind", ""), "wakes.workspace_id": fields.get("workspace_id", "")}
    if count != 1:
        attributes["wakes.count"] = count
    with found.start_as_current_span(
        "wakes.create", context=parent, kind=trace.SpanKind.PRODUCER, links=links_found, attributes=attributes
    ):
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        yield carrier or None


def created(wake: Wake) -> None:
    """Name the created wake on the current ``wakes.create`` span."""
    if _api is None or wake.trace_context is None:
        return
    span = _api.get_current_span()
    if span.is_recording():
        span.set_attribute("wakes.wake_id", wake.pk)


# -- fire ---------------------------------------------------------------------------------------------


def claimed(claims: list[Claim], started_ns: int, ended_ns: int) -> None:
    """Start a ``wakes.fire`` span per claim (continuing its wake's stored context) and its ``wakes.claim``."""
    found = tracer()
    if found is None:
        return
    from opentelemetry import propagate, trace

    for claim in claims:
        wake = claim.wake
        parent = propagate.extract(wake.trace_context) if wake.trace_context else None
        span = found.start_span(
            "wakes.fire",
            context=parent,
            kind=trace.SpanKind.CONSUMER,
            start_time=started_ns,
            attributes={
                "wakes.wake_id": wake.pk,
                "wakes.kind": wake.kind,
                "wakes.attempt": wake.attempts,
                "wakes.lane": wake.serial_key or "",
                "wakes.workspace_id": wake.workspace_id,
                "wakes.runner_id": claim.runner_id,
                "wakes.takeover": claim.takeover,
            },
        )
        found.start_span("wakes.claim", context=trace.set_span_in_context(span), start_time=started_ns).end(
            end_time=ended_ns
        )
        claim.trace = span


def sink(claim: Claim) -> contextlib.AbstractContextManager[Any]:
    """Wrap a sink's run: a ``wakes.sink`` span, current while it runs (its exception recorded)."""
    span = claim.trace
    if span is None or _api is None:
        return _NOTHING
    child = tracer_of(claim).start_span("wakes.sink", context=_api.set_span_in_context(span))
    using: contextlib.AbstractContextManager[Any] = _api.use_span(
        child, end_on_exit=True, record_exception=True, set_status_on_exception=True
    )
    return using


def settling(claim: Claim) -> contextlib.AbstractContextManager[Any]:
    """Wrap a settle of one claim (a failure, a retry, a defer): a ``wakes.settle`` span."""
    span = claim.trace
    if span is None or _api is None:
        return _NOTHING
    child = tracer_of(claim).start_span("wakes.settle", context=_api.set_span_in_context(span))
    using: contextlib.AbstractContextManager[Any] = _api.use_span(child, end_on_exit=True)
    return using


def settled_together(claims: list[Claim], started_ns: int, ended_ns: int) -> None:
    """A ``wakes.settle`` span for each claim of a batched settle (one transaction for all of them)."""
    if _api is None:
        return
    for claim in claims:
        span = claim.trace
        if span is not None:
            child = tracer_of(claim).start_span(
                "wakes.settle",
                context=_api.set_span_in_context(span),
                start_time=started_ns,
                attributes={"wakes.batch": len(claims)},
            )
            child.end(end_time=ended_ns)


def finished(claim: Claim, outcome: str) -> None:
    """End a claim's ``wakes.fire`` span with its outcome (once: later calls do nothing)."""
    span = claim.trace
    if span is None or _api is None:
        return
    claim.trace = None
    span.set_attribute("wakes.outcome", str(outcome))
    if str(outcome) in ERROR_OUTCOMES:
        span.set_status(_api.Status(_api.StatusCode.ERROR, str(outcome)))
    span.end()


def tracer_of(claim: Claim) -> Any:
    """The tracer a claim's spans come from (the one that started its fire span, even if tracing was
    switched off meanwhile)."""
    return tracer() or _api.NoOpTracer()  # type: ignore[union-attr]


def now_ns() -> int:
    """A span timestamp (nanoseconds since the epoch)."""
    return time.time_ns()
