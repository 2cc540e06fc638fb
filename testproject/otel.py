"""OpenTelemetry in the processes of ``tests/test_tracing.py``: ``WAKES_TEST_OTEL_SPANS=<file>`` gives
the process an SDK tracer provider that exports every span, as it ends, as one JSON line to that file
(the SDK's own ``ConsoleSpanExporter`` pointed at a file, through a ``SimpleSpanProcessor``)."""

from __future__ import annotations


def export_spans_to(path: str) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

    out = open(path, "a", encoding="utf-8")  # noqa: SIM115 - open for the life of the process
    provider = TracerProvider(resource=Resource.create({"service.name": "runwakes"}))
    exporter = ConsoleSpanExporter(out=out, formatter=lambda span: span.to_json(indent=None) + "\n")
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
