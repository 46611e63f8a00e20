"""Export spans, metrics and logs to an OTLP/HTTP receiver with the
OpenTelemetry SDK's own exporters, and record what each export held and
whether the exporter reported it as a success.

Every item carries a unique `item.id` attribute (t-, m- or l-, then the
export's and the item's number). One thread per signal runs its exports
one after the other; logs are sent gzip-compressed. The report, written
at the end as JSON, lists every export: signal, ok, item ids.
"""

import argparse
import json
import os
import threading
import time

from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk._logs.export import LogRecordExportResult
from opentelemetry.sdk.metrics import Counter, MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    InMemoryMetricReader,
    MetricExportResult,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

RESOURCE = Resource.create({"service.name": "ringwal-otlp-crash-test"})


def traces(endpoint, timeout):
    """Spans made by the SDK's tracer, exported by OTLPSpanExporter."""
    provider = TracerProvider(resource=RESOURCE)
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("crash-test")
    exporter = OTLPSpanExporter(endpoint=endpoint + "/v1/traces", timeout=timeout)

    def export(ids):
        for item in ids:
            with tracer.start_as_current_span("work", attributes={"item.id": item}):
                pass
        spans = memory.get_finished_spans()
        memory.clear()
        return exporter.export(spans) == SpanExportResult.SUCCESS

    return "t", export


def metrics(endpoint, timeout):
    """Delta counter points, one per item, exported by OTLPMetricExporter."""
    reader = InMemoryMetricReader(preferred_temporality={Counter: AggregationTemporality.DELTA})
    provider = MeterProvider(resource=RESOURCE, metric_readers=[reader])
    counter = provider.get_meter("crash-test").create_counter("items")
    exporter = OTLPMetricExporter(endpoint=endpoint + "/v1/metrics", timeout=timeout)

    def export(ids):
        for item in ids:
            counter.add(1, {"item.id": item})
        data = reader.get_metrics_data()
        return exporter.export(data, timeout_millis=timeout * 1000) == MetricExportResult.SUCCESS

    return "m", export


def logs(endpoint, timeout):
    """Log records emitted through the SDK's logger, gzip-compressed."""
    provider = LoggerProvider(resource=RESOURCE)
    memory = InMemoryLogRecordExporter()
    provider.add_log_record_processor(SimpleLogRecordProcessor(memory))
    logger = provider.get_logger("crash-test")
    exporter = OTLPLogExporter(
        endpoint=endpoint + "/v1/logs", timeout=timeout, compression=Compression.Gzip
    )

    def export(ids):
        for item in ids:
            logger.emit(body="record " + item, attributes={"item.id": item})
        batch = memory.get_finished_logs()
        memory.clear()
        return exporter.export(batch) == LogRecordExportResult.SUCCESS

    return "l", export


def run(signal, make, args, report, lock):
    prefix, export = make(args.endpoint, args.timeout)
    for e in range(args.exports):
        ids = ["%s-%d-%d" % (prefix, e, i) for i in range(args.items)]
        ok = export(ids)
        with lock:
            report.append({"signal": signal, "ok": ok, "items": ids})
        time.sleep(args.pause_ms / 1000.0)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--endpoint", required=True, help="http://HOST:PORT")
    p.add_argument("--exports", type=int, default=100, help="exports per signal")
    p.add_argument("--items", type=int, default=20, help="items per export")
    p.add_argument("--pause-ms", type=float, default=10.0, help="pause between exports")
    p.add_argument("--timeout", type=float, default=30.0, help="exporter timeout, seconds")
    p.add_argument("--report", required=True, help="where to write the JSON report")
    args = p.parse_args()
    report, lock = [], threading.Lock()
    threads = [
        threading.Thread(target=run, args=(name, make, args, report, lock))
        for name, make in (("traces", traces), ("metrics", metrics), ("logs", logs))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with open(args.report + ".tmp", "w") as f:
        json.dump({"exports": report}, f)
    # Whole or absent: the test reads it only once this process exited.
    os.replace(args.report + ".tmp", args.report)


if __name__ == "__main__":
    main()
