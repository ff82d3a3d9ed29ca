#!/usr/bin/env python3
"""A small in-memory S3 object store on loopback, for the restartable tansu broker of the chaos run.

tansu 0.6's only storage that survives a broker restart here is its S3 engine (postgres:// is not compiled in;
../shared/notes/infra.md). Behind it, moto answers every request through Flask, boto's models and response
templates, and lists a prefix by walking every key of the bucket: with one object per produced batch, a fetch
costs more the fuller the bucket gets, and in the chaos run moto used a whole core while the workers drained a few
records per second (docs/chaos.md). This server answers the part of S3 that tansu's object_store client uses, and
nothing else, from a dict and a sorted key list:

  PUT /bucket                              create a bucket
  PUT /bucket/key                          store (If-None-Match: * and If-Match: "etag" answer 412 when unmet)
  GET|HEAD /bucket/key                     read (Range, If-Match, If-None-Match)
  DELETE /bucket/key                       delete
  POST /bucket?delete                      delete several (DeleteObjects)
  GET /bucket?list-type=2                  ListObjectsV2 (prefix, delimiter, start-after, continuation-token,
                                           max-keys)

Requests are not authenticated (loopback, test data only). Objects live as long as the process: a broker killed
and restarted finds what it stored, as it would on S3. Every request is one critical section, so a conditional
write is atomic the way S3's is. Usage: object-store.py [-p] PORT (scripts/services.sh env exports its path as
PIPELINE_OBJECT_STORE_BIN; the persistent test brokers and scripts/chaos.py start one each).
"""
import bisect
import hashlib
import sys
import threading
import time
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, unquote, urlsplit
from xml.sax.saxutils import escape

LOCK = threading.Lock()
BUCKETS = {}  # name -> {"objects": {key: (body, etag, mtime, listing entry)}, "keys": sorted list of keys}
# tansu lists a partition's whole records/ prefix for every fetch, without start-after: the listing's cost is what
# bounds a consumer deep in a topic. Each object's <Contents> entry is made once, when it is stored, and a listing
# only joins them; without max-keys a page holds up to PAGE keys (S3 stops at 1 000; clients follow IsTruncated
# whatever the page size), so a fetch costs one request, not one per thousand records before its offset.
PAGE = 100_000
NAMESPACE = "http://s3.amazonaws.com/doc/2006-03-01/"


def iso(seconds):
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(seconds))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: with Nagle's algorithm on, the body waits for the client's delayed
    # ACK of the headers (40 ms on Linux), which made every request of a fetch cost 40 ms.
    disable_nagle_algorithm = True

    def log_message(self, *arguments):
        pass

    # -- plumbing

    def target(self):
        parts = urlsplit(self.path)
        path = unquote(parts.path).lstrip("/")
        bucket, _, key = path.partition("/")
        return bucket, key, parse_qs(parts.query, keep_blank_values=True)

    def body(self):
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("content-length", 0) or 0))

    def answer(self, status, body=b"", headers=None, content_type="application/xml"):
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if body or status not in (204, 304):
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and status not in (204, 304):
            self.wfile.write(body)

    def error(self, status, code, message):
        xml = f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>{escape(message)}</Message></Error>'
        self.answer(status, xml.encode())

    def unmet(self, current):
        """The first unmet precondition of If-Match / If-None-Match against the current object (or None)."""
        if_match, if_none_match = self.headers.get("if-match"), self.headers.get("if-none-match")
        if if_match is not None and (current is None or (if_match != "*" and if_match.strip() != current[1])):
            return 412
        if if_none_match is not None and current is not None and (if_none_match == "*" or if_none_match.strip() == current[1]):
            return 304 if self.command in ("GET", "HEAD") else 412
        return None

    # -- verbs

    def do_PUT(self):
        bucket, key, _ = self.target()
        data = self.body()
        with LOCK:
            if not key:
                BUCKETS.setdefault(bucket, {"objects": {}, "keys": []})
                return self.answer(200)
            store = BUCKETS.get(bucket)
            if store is None:
                return self.error(404, "NoSuchBucket", bucket)
            current = store["objects"].get(key)
            if self.unmet(current):
                return self.error(412, "PreconditionFailed", "At least one of the preconditions you specified did not hold.")
            etag, mtime = '"' + hashlib.md5(data).hexdigest() + '"', time.time()
            if current is None:
                bisect.insort(store["keys"], key)
            entry = (f"<Contents><Key>{escape(key)}</Key><LastModified>{iso(mtime)}</LastModified><ETag>{escape(etag)}</ETag>"
                     f"<Size>{len(data)}</Size><StorageClass>STANDARD</StorageClass></Contents>")
            store["objects"][key] = (data, etag, mtime, entry)
        self.answer(200, headers={"ETag": etag})

    def do_GET(self):
        bucket, key, query = self.target()
        if not key:
            return self.list_objects(bucket, query)
        with LOCK:
            store = BUCKETS.get(bucket)
            current = store["objects"].get(key) if store else None
        if store is None:
            return self.error(404, "NoSuchBucket", bucket)
        if current is None:
            return self.error(404, "NoSuchKey", key)
        status = self.unmet(current)
        if status:
            return self.answer(status) if status == 304 else self.error(412, "PreconditionFailed", key)
        data, etag, mtime, _ = current
        headers = {"ETag": etag, "Last-Modified": formatdate(mtime, usegmt=True), "Accept-Ranges": "bytes"}
        wanted = self.headers.get("range")
        if wanted and wanted.startswith("bytes="):
            first, _, last = wanted[6:].partition("-")
            if first == "":
                start, end = max(0, len(data) - int(last)), len(data) - 1
            else:
                start, end = int(first), min(len(data) - 1, int(last)) if last else len(data) - 1
            if start >= len(data):
                return self.error(416, "InvalidRange", key)
            headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
            return self.answer(206, data[start:end + 1], headers, "application/octet-stream")
        self.answer(200, data, headers, "application/octet-stream")

    do_HEAD = do_GET

    def do_DELETE(self):
        bucket, key, _ = self.target()
        with LOCK:
            store = BUCKETS.get(bucket)
            if store is not None and key in store["objects"]:
                del store["objects"][key]
                store["keys"].pop(bisect.bisect_left(store["keys"], key))
        self.answer(204)

    def do_POST(self):
        bucket, _, query = self.target()
        data = self.body()
        if "delete" not in query:
            return self.error(501, "NotImplemented", "only DeleteObjects is answered")
        import xml.etree.ElementTree as tree
        deleted = []
        with LOCK:
            store = BUCKETS.get(bucket, {"objects": {}, "keys": []})
            for element in tree.fromstring(data).iter():
                if element.tag.endswith("Key") and element.text:
                    key = element.text
                    if key in store["objects"]:
                        del store["objects"][key]
                        store["keys"].pop(bisect.bisect_left(store["keys"], key))
                    deleted.append(key)
        xml = "".join(f"<Deleted><Key>{escape(key)}</Key></Deleted>" for key in deleted)
        self.answer(200, f'<?xml version="1.0" encoding="UTF-8"?><DeleteResult xmlns="{NAMESPACE}">{xml}</DeleteResult>'.encode())

    def list_objects(self, bucket, query):
        first = lambda name, default="": query.get(name, [default])[0]
        prefix, delimiter = first("prefix"), first("delimiter")
        after = max(first("start-after"), unquote(first("continuation-token")))
        limit = int(first("max-keys", str(PAGE)))
        contents, prefixes, truncated, last = [], [], False, ""
        with LOCK:
            store = BUCKETS.get(bucket)
            if store is None:
                return self.error(404, "NoSuchBucket", bucket)
            keys = store["keys"]
            if after and delimiter and after.endswith(delimiter) and after.startswith(prefix):
                index = bisect.bisect_left(keys, after[:-1] + chr(ord(delimiter[-1]) + 1))  # past a common prefix
            elif after:
                index = max(bisect.bisect_right(keys, after), bisect.bisect_left(keys, prefix))
            else:
                index = bisect.bisect_left(keys, prefix)
            while index < len(keys) and keys[index].startswith(prefix):
                key = keys[index]
                if len(contents) + len(prefixes) >= limit:
                    truncated = True
                    break
                rest = key[len(prefix):]
                if delimiter and delimiter in rest:
                    common = prefix + rest.split(delimiter, 1)[0] + delimiter
                    prefixes.append(common)
                    last = common
                    # skip every key under this common prefix
                    index = bisect.bisect_left(keys, common[:-1] + chr(ord(delimiter[-1]) + 1))
                    continue
                contents.append(store["objects"][key][3])
                last = key
                index += 1
        parts = [f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="{NAMESPACE}">',
                 f"<Name>{escape(bucket)}</Name><Prefix>{escape(prefix)}</Prefix><KeyCount>{len(contents) + len(prefixes)}</KeyCount>",
                 f"<MaxKeys>{limit}</MaxKeys><IsTruncated>{'true' if truncated else 'false'}</IsTruncated>"]
        if delimiter:
            parts.append(f"<Delimiter>{escape(delimiter)}</Delimiter>")
        parts.extend(contents)
        for common in prefixes:
            parts.append(f"<CommonPrefixes><Prefix>{escape(common)}</Prefix></CommonPrefixes>")
        if truncated:
            parts.append(f"<NextContinuationToken>{quote(last, safe='')}</NextContinuationToken>")
        parts.append("</ListBucketResult>")
        self.answer(200, "".join(parts).encode())


def main():
    arguments = [argument for argument in sys.argv[1:] if argument != "-p"]
    if len(arguments) != 1 or not arguments[0].isdigit():
        sys.exit("usage: object-store.py [-p] PORT")
    server = ThreadingHTTPServer(("127.0.0.1", int(arguments[0])), Handler)
    server.daemon_threads = True
    print(f"object store on 127.0.0.1:{arguments[0]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
