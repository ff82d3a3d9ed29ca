#!/usr/bin/env python3
"""A webhook receiver for the demo (scripts/run.sh) and a model for yours: verifies every delivery as the Standard
Webhooks specification says (HMAC-SHA256 over "id.timestamp.body" with the base64 key after "whsec_", any of the
space-separated v1 signatures, a timestamp within five minutes), deduplicates by webhook-id, and prints one line
per event. Python's standard library only.

    WEBHOOK_SECRET=whsec_... python3 scripts/webhook-receiver.py PORT [LOG_FILE]
"""
import base64, hashlib, hmac, json, os, signal, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SECRET = base64.b64decode(os.environ["WEBHOOK_SECRET"].removeprefix("whsec_"))
LOG = open(sys.argv[2], "a", buffering=1) if len(sys.argv) > 2 else sys.stdout
seen = set()


def verified(headers, body):
    msg_id, timestamp = headers.get("webhook-id", ""), headers.get("webhook-timestamp", "0")
    if abs(time.time() - int(timestamp)) > 300:
        return False
    expected = base64.b64encode(hmac.new(SECRET, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()).decode()
    return any(hmac.compare_digest(entry.removeprefix("v1,"), expected) for entry in headers.get("webhook-signature", "").split())


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        ok = verified(self.headers, body)
        self.send_response(200 if ok else 401)
        self.end_headers()
        if not ok:
            print("REFUSED: bad signature", file=LOG)
            return
        event = json.loads(body)
        duplicate = event["id"] in seen
        seen.add(event["id"])
        data = event.get("data") or {}
        after = data.get("after") or {}
        print(f"verified  {event['type']:<26} {event['subject']:<18} #{data.get('sequence') or '-':<3} "
              f"{after.get('status', '-')} (active {after.get('isActive', '-')}){'  (duplicate)' if duplicate else ''}", file=LOG)

    def log_message(self, *args):
        pass


# SIGTERM ends it even when started by a process that ignores SIGTERM (an ignored signal is inherited).
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Receiver).serve_forever()
