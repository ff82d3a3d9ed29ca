#!/usr/bin/env python3
"""Draws one trace as a waterfall (SVG) from the spans scripts/otlp_receiver.py wrote (JSON lines).

    scripts/trace_picture.py SPANS.jsonl OUT.svg [--trace TRACE_ID]

Without --trace: the trace of the first notification that reached a webhook (a trace with spans from ingest, the
worker and webhooks). docs/tracing.md shows the result.
"""
import argparse
import html
import json
from collections import defaultdict

COLOURS = {"ingest": "#4e79a7", "worker": "#f28e2b", "webhooks": "#59a14f", "customer-api": "#b07aa1", "pipelinectl": "#9c755f"}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("spans")
    parser.add_argument("out")
    parser.add_argument("--trace")
    arguments = parser.parse_args()
    spans = [json.loads(line) for line in open(arguments.spans) if line.strip()]
    traces = defaultdict(list)
    for span in spans:
        traces[span["traceId"]].append(span)
    trace = arguments.trace or next(
        trace for trace, members in traces.items() if {"ingest", "worker", "webhooks"} <= {span["service"] for span in members})
    members = traces[trace]
    children = defaultdict(list)
    ids = {span["spanId"] for span in members}
    for span in members:
        children[span["parentSpanId"] if span["parentSpanId"] in ids else ""].append(span)
    ordered = []

    def walk(parent, depth):
        for span in sorted(children[parent], key=lambda span: span["start"]):
            ordered.append((span, depth))
            walk(span["spanId"], depth + 1)

    walk("", 0)
    start = min(span["start"] for span in members)
    end = max(span["end"] for span in members)
    width, label_width, row = 1100, 430, 26
    scale = (width - label_width - 20) / max(end - start, 1)
    height = row * len(ordered) + 60
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="DejaVu Sans, sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
           f'<text x="10" y="20" font-size="14" font-weight="bold">trace {trace} · {(end - start) / 1e6:.1f} ms · {len(members)} spans</text>']
    for index, (span, depth) in enumerate(ordered):
        y = 40 + index * row
        x = label_width + (span["start"] - start) * scale
        w = max((span["end"] - span["start"]) * scale, 2)
        colour = COLOURS.get(span["service"], "#bab0ac")
        attributes = span["attributes"]
        detail = attributes.get("appstore.notification.outcome") or attributes.get("http.response.status_code") or attributes.get("messaging.destination.name") or ""
        label = f'{span["service"]}: {span["name"]} ({span["kind"]})'
        out.append(f'<text x="{10 + depth * 14}" y="{y + 16}">{html.escape(label)}</text>')
        out.append(f'<rect x="{x:.1f}" y="{y + 4}" width="{w:.1f}" height="{row - 8}" fill="{colour}" rx="3"/>')
        for name, time in zip(span.get("events", []), span.get("eventTimes", [])):
            ex = label_width + (time - start) * scale
            out.append(f'<line x1="{ex:.1f}" y1="{y + 1}" x2="{ex:.1f}" y2="{y + row - 1}" stroke="#222" stroke-width="2"><title>{html.escape(name)}</title></line>')
            detail = f"{name} at {(time - span['start']) / 1e6:.2f} ms · {detail}"
        out.append(f'<text x="{min(x + w + 4, width - 160):.1f}" y="{y + 16}" fill="#333">{(span["end"] - span["start"]) / 1e6:.2f} ms {html.escape(str(detail))}</text>')
    out.append("</svg>")
    with open(arguments.out, "w") as handle:
        handle.write("\n".join(out))


if __name__ == "__main__":
    main()
