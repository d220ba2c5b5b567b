#!/usr/bin/env python3
"""A stand-in for the extender's Service in the takeover scenario (no kube-proxy runs here).

Every PROBE seconds it asks each backend's GET /readyz, as the kubelet's readiness probe does, and
keeps the ready ones as the Service's endpoints; each request is forwarded to the first endpoint.
With none ready it answers 503 itself, as a Service without endpoints refuses the connection.
It counts what it answered by status and prints the counts to stderr on SIGTERM.
Usage: ready_proxy.py PORT PROBE_SECONDS BACKEND_PORT...   (everything on 127.0.0.1)
"""
import http.client
import signal
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT, PROBE, BACKENDS = int(sys.argv[1]), float(sys.argv[2]), [int(p) for p in sys.argv[3:]]
endpoints = []
answered = Counter()
lock = threading.Lock()


def ready(port):
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
        conn.request("GET", "/readyz")
        return conn.getresponse().status == 200
    except OSError:
        return False


def prober():
    global endpoints
    while True:
        now_ready = [p for p in BACKENDS if ready(p)]
        with lock:
            if now_ready != endpoints:
                print(f"{time.time():.3f} endpoints {now_ready}", file=sys.stderr, flush=True)
            endpoints = now_ready
        time.sleep(PROBE)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, code, body, ctype="application/json"):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        with lock:
            answered[code] += 1

    def forward(self, method):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
        with lock:
            target = endpoints[0] if endpoints else None
        if target is None:
            return self.reply(503, b'{"Error":"no ready extender endpoint"}')
        try:
            conn = http.client.HTTPConnection("127.0.0.1", target, timeout=30)
            conn.request(method, self.path, body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            self.reply(resp.status, resp.read(), resp.getheader("Content-Type", "application/json"))
        except OSError as e:  # the endpoint died under the request
            self.reply(502, ('{"Error":"%s"}' % str(e).replace('"', "'")).encode())

    def do_GET(self):
        self.forward("GET")

    def do_POST(self):
        self.forward("POST")


def stop(*_):
    with lock:
        print("answered " + " ".join(f"{k}:{v}" for k, v in sorted(answered.items())),
              file=sys.stderr, flush=True)
    sys.exit(0)


signal.signal(signal.SIGTERM, stop)
threading.Thread(target=prober, daemon=True).start()
ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
