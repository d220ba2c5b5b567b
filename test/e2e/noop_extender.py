#!/usr/bin/env python3
"""The protocol's floor for the throughput run: a kube-scheduler extender that does nothing.

POST /filter returns every node name it is given (names only: nodeCacheCapable true); POST
/prioritize scores every node 0. Each reply is written in one piece (headers and body together)
with TCP_NODELAY, as a fast extender must (a split reply costs 40 ms per call with delayed ACKs).
Usage: noop_extender.py PORT   (listens on 127.0.0.1)
"""
import json
import socket
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def reply(self, code, obj):
        body = json.dumps(obj).encode()
        head = (f"HTTP/1.1 {code} OK\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        self.wfile.write(head + body)

    def do_GET(self):
        self.reply(200, {"ok": True})

    def do_POST(self):
        args = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        names = args.get("NodeNames")
        if names is None and args.get("Nodes"):
            names = [n["metadata"]["name"] for n in args["Nodes"]["items"]]
        names = names or []
        if self.path.endswith("/filter"):
            self.reply(200, {"NodeNames": names, "FailedNodes": {}, "Error": ""})
        elif self.path.endswith("/prioritize"):
            self.reply(200, [{"Host": n, "Score": 0} for n in names])
        else:
            self.reply(404, {"Error": "unknown verb"})

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
