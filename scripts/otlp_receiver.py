#!/usr/bin/env python3
"""A small OTLP/HTTP (protobuf) trace receiver for the tests and the demo.

Listens on 127.0.0.1 (`--port`, 0 for any free one; the port is printed on the first line of stdout), accepts
`POST /v1/traces` with an `ExportTraceServiceRequest` and appends one JSON object per span to `--out` (JSON lines):
trace and span ids in hex, the parent, name, kind, the resource's service.name, attributes, links. Answers as the
specification says (200, `application/x-protobuf`, an empty `ExportTraceServiceResponse`). `GET /spans` returns
every span received so far as a JSON array. It keeps nothing else and parses nothing but spans.
"""
import argparse
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest, ExportTraceServiceResponse

KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


def value(any_value):
    kind = any_value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [value(item) for item in any_value.array_value.values]
    if kind == "kvlist_value":
        return {item.key: value(item.value) for item in any_value.kvlist_value.values}
    if kind == "bytes_value":
        return any_value.bytes_value.hex()
    return getattr(any_value, kind)


def spans_of(request):
    for resource_spans in request.resource_spans:
        resource = {item.key: value(item.value) for item in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield {
                    "traceId": span.trace_id.hex(),
                    "spanId": span.span_id.hex(),
                    "parentSpanId": span.parent_span_id.hex(),
                    "name": span.name,
                    "kind": KINDS.get(span.kind, str(span.kind)),
                    "service": resource.get("service.name"),
                    "resource": resource,
                    "start": span.start_time_unix_nano,
                    "end": span.end_time_unix_nano,
                    "status": span.status.code,
                    "attributes": {item.key: value(item.value) for item in span.attributes},
                    "links": [{"traceId": link.trace_id.hex(), "spanId": link.span_id.hex()} for link in span.links],
                    "events": [event.name for event in span.events],
                    "eventTimes": [event.time_unix_nano for event in span.events],
                }


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--out", required=True)
    arguments = parser.parse_args()
    lock = threading.Lock()
    received = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path != "/v1/traces":
                self.send_response(404)
                self.end_headers()
                return
            request = ExportTraceServiceRequest()
            try:
                request.ParseFromString(body)
            except Exception as error:  # a malformed body is the exporter's bug: say so
                self.send_response(400)
                self.end_headers()
                self.wfile.write(str(error).encode())
                return
            spans = list(spans_of(request))
            with lock:
                received.extend(spans)
                with open(arguments.out, "a") as out:
                    for span in spans:
                        out.write(json.dumps(span) + "\n")
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def do_GET(self):
            with lock:
                body = json.dumps(received).encode()
            self.send_response(200 if self.path == "/spans" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", arguments.port), Handler)
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
