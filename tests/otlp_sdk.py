"""The OpenTelemetry Python SDK exporting to Sextant (tests/otlp.rs).

    otlp_sdk.py grpc|http HTTP_URL GRPC_ENDPOINT API_KEY RUN

Exports, with the SDK's own OTLP exporters over the given transport: a trace of two spans (the
child with an error status and a recorded exception), an ERROR log line emitted inside it, and
host metrics (system.cpu.utilization, system.memory.usage, system.filesystem.utilization,
system.network.io as a delta counter) plus one application metric Sextant does not store.
Fails unless every export succeeded; prints {"trace_id", "span_id"} as JSON.
"""

import json
import logging
import sys

from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider, ObservableCounter, Counter
from opentelemetry.sdk.metrics.export import AggregationTemporality, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode

transport, http_url, grpc_endpoint, api_key, run = sys.argv[1:6]

if transport == "grpc":
    from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    def endpoint(_signal):
        return {"endpoint": grpc_endpoint, "insecure": True}

elif transport == "http":
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    def endpoint(signal):
        return {"endpoint": f"{http_url}/v1/{signal}"}

else:
    sys.exit(f"unknown transport {transport}")

RESULTS = []


def recording(cls):
    """The exporter class, recording what each export returned."""

    class Recording(cls):
        def export(self, *args, **kwargs):
            result = super().export(*args, **kwargs)
            RESULTS.append((cls.__name__, getattr(result, "name", str(result))))
            return result

    return Recording


headers = {"x-api-key": api_key}
resource = Resource.create(
    {"service.name": f"otlp-{transport}-{run}", "host.name": f"host-{transport}-{run}", "deployment.environment": "test"}
)

# Traces: a server span and a child that fails with an exception.
tracer_provider = TracerProvider(resource=resource)
tracer_provider.add_span_processor(
    SimpleSpanProcessor(recording(OTLPSpanExporter)(headers=headers, **endpoint("traces")))
)
tracer = tracer_provider.get_tracer("otlp-e2e", "1.0")

# Logs through the standard logging module.
logger_provider = LoggerProvider(resource=resource)
logger_provider.add_log_record_processor(
    SimpleLogRecordProcessor(recording(OTLPLogExporter)(headers=headers, **endpoint("logs")))
)
log = logging.getLogger(f"otlp-e2e-{transport}")
log.propagate = False
log.setLevel(logging.INFO)
log.addHandler(LoggingHandler(level=logging.INFO, logger_provider=logger_provider))

with tracer.start_as_current_span("POST /checkout", kind=SpanKind.SERVER) as root:
    with tracer.start_as_current_span("charge card", kind=SpanKind.CLIENT) as child:
        try:
            raise ValueError(f"card declined for order {run}")
        except ValueError as e:
            child.record_exception(e)
            child.set_status(Status(StatusCode.ERROR, "declined"))
            log.error("payment failed for order %s marker%s", run, transport)
        ids = {"trace_id": f"{child.get_span_context().trace_id:032x}", "span_id": f"{child.get_span_context().span_id:016x}"}


# Host metrics, by the system-metrics semantic conventions.
def cpu(_options: CallbackOptions):
    yield Observation(0.25, {"cpu": "0", "state": "idle"})
    yield Observation(0.70, {"cpu": "0", "state": "user"})
    yield Observation(0.75, {"cpu": "1", "state": "idle"})


def memory(_options: CallbackOptions):
    yield Observation(2_000_000_000, {"state": "used"})
    yield Observation(6_000_000_000, {"state": "free"})


def filesystem(_options: CallbackOptions):
    yield Observation(0.5, {"device": "sda1", "mountpoint": "/"})


def network(_options: CallbackOptions):
    yield Observation(10_000, {"device": "eth0", "direction": "receive"})
    yield Observation(5_000, {"device": "eth0", "direction": "transmit"})


metric_exporter = recording(OTLPMetricExporter)(
    headers=headers,
    preferred_temporality={ObservableCounter: AggregationTemporality.DELTA, Counter: AggregationTemporality.DELTA},
    **endpoint("metrics"),
)
# Exports only when flushed below.
reader = PeriodicExportingMetricReader(metric_exporter, export_interval_millis=3_600_000)
meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
meter = meter_provider.get_meter("otlp-e2e")
meter.create_observable_gauge("system.cpu.utilization", [cpu], unit="1")
meter.create_observable_up_down_counter("system.memory.usage", [memory], unit="By")
meter.create_observable_gauge("system.filesystem.utilization", [filesystem], unit="1")
meter.create_observable_counter("system.network.io", [network], unit="By")
meter.create_counter("orders.placed").add(3)

assert meter_provider.force_flush(), "metrics flush failed"
for provider in (tracer_provider, logger_provider, meter_provider):
    provider.shutdown()

kinds = sorted({name for name, _ in RESULTS})
failed = [(name, result) for name, result in RESULTS if result != "SUCCESS"]
if failed or len(kinds) != 3:
    sys.exit(f"exports did not all succeed: {RESULTS}")
print(json.dumps(ids))
