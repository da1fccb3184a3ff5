#!/usr/bin/env python3
"""A loopback HTTP server for stoke::remote's tests: the files of a folder with Range support, and
paths that misbehave on purpose. Prints its port on the first line of stdout, then serves until
killed.

    range_server.py FOLDER

    /files/NAME        the file, with Range (206) and HEAD
    /norange/NAME      the file whole (200), whatever the Range says
    /flaky/N/NAME      503 for the first N requests of that path, then as /files/NAME
    /stall/NAME        headers and half of what was asked, then silence for 60 s (an index,
                       NAME.stoke-idx, comes whole)
    /forbidden/NAME    403
    anything else      404
"""
import http.server
import os
import re
import sys
import threading
import time

FOLDER = sys.argv[1]
FLAKY = {}  # path -> failures so far
LOCK = threading.Lock()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the client reuses its connections

    def log_message(self, *args):
        pass

    def do_HEAD(self):
        self.answer(body=False)

    def do_GET(self):
        self.answer(body=True)

    def fail(self, status):
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def answer(self, body):
        parts = self.path.split("/")
        kind, name = parts[1] if len(parts) > 2 else "", parts[-1]
        if kind == "forbidden":
            return self.fail(403)
        if kind == "flaky":
            with LOCK:
                seen = FLAKY.get(self.path, 0)
                FLAKY[self.path] = seen + 1
            if seen < int(parts[2]):
                return self.fail(503)
        path = os.path.join(FOLDER, name)
        if kind not in ("files", "norange", "flaky", "stall") or not os.path.isfile(path):
            return self.fail(404)
        with open(path, "rb") as f:
            data = f.read()
        start, end = 0, len(data) - 1
        ranged = self.headers.get("Range")
        if ranged and kind != "norange":
            m = re.match(r"bytes=(\d+)-(\d*)", ranged)
            start = int(m.group(1))
            end = min(int(m.group(2)) if m.group(2) else len(data) - 1, len(data) - 1)
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        else:
            self.send_response(200)
        chunk = data[start:end + 1]
        self.send_header("Content-Length", str(len(chunk)))
        self.end_headers()
        if not body:
            return
        if kind == "stall" and not name.endswith(".stoke-idx"):
            self.wfile.write(chunk[:len(chunk) // 2])
            self.wfile.flush()
            time.sleep(60)
            return
        self.wfile.write(chunk)


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
server.handle_error = lambda request, address: None  # a client that hangs up on purpose is no error
print(server.server_address[1], flush=True)
server.serve_forever()
