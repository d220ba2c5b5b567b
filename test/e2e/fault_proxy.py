#!/usr/bin/env python3
"""A fault-injecting proxy between toposched's extender and kube-apiserver (test/e2e/faults.sh).

It terminates TLS with the API server's own certificate (its SAN has 127.0.0.1, so the extender's
kubeconfig only changes its port), forwards every request to the real API server over TLS, and
injects the faults a real cluster has, switched at run time by a JSON control file:

  bind_504         fraction of pod Bindings that are forwarded and APPLIED, then answered 504 (a
                   gateway timeout: the client cannot know the write landed); seeded, see `seed`
  bind_delay_ms    every pod Binding is held this long before it is forwarded, and forwarded even
                   when the client has gone meanwhile (a slow API server: the write was received)
  watch_delay_ms   every frame of a pod watch reaches the client this long after it arrived
  watch_410_every  a pod watch is ended with an ERROR event 410 (Expired) after this many frames
  expire           a number: when it changes, every open pod watch is ended with 410 at once
  stale_list_ms    the pod LIST that follows a 410 of ours is answered from a snapshot of the pod
                   list taken at least this long before (the proxy lists pods itself every 0.5 s
                   with the extender's credentials), with that snapshot's old resourceVersion
  seed             the random seed of bind_504 (re-seeded when it changes)
  hold_pod_lists   while true, pod LISTs wait (up to the lifetime) before they are forwarded
  refuse_pod_watches  while true, new pod watches are answered HTTP 410 (a client relists)

A current client (client-go's WatchListClient, on in the kubelet of 1.35+; toposched's informers
from 1.34) relists with a watch that asks for the initial events (sendInitialEvents=true) instead
of a LIST: that request is the relist, so refuse_pod_watches does not refuse it, hold_pod_lists
holds it as a LIST, and watch_410_every counts its frames only after the bookmark that ends its
initial events (no server ends a consistent read with 410). The extender's (no fieldSelector) is
served stale as its LIST would be: the snapshot's pods as ADDED events, then that bookmark at the
snapshot's old resourceVersion.

Everything else is forwarded as it is; watches of other resources are streamed untouched. One line
per fault (and per Binding) goes to stderr; `--status FILE` gets a JSON summary (counts, bindings held
in flight, Bindings answered 504 with their pods) after every change, for the scenario to poll.
It listens on 127.0.0.1 only and exits by itself after --lifetime seconds (and on SIGTERM).

Usage: fault_proxy.py --port P --upstream-port U --cert C --key K --ca CA --control FILE
                      --status FILE [--lifetime S]
"""
import argparse
import collections
import http.client
import json
import os
import queue
import random
import re
import signal
import socket
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, required=True)
ap.add_argument("--upstream-port", type=int, required=True)
ap.add_argument("--cert", required=True)
ap.add_argument("--key", required=True)
ap.add_argument("--ca", required=True)
ap.add_argument("--control", required=True)
ap.add_argument("--status", required=True)
ap.add_argument("--lifetime", type=float, default=600)
args = ap.parse_args()

BINDING = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/binding/?$")
POD_COLLECTION = "/api/v1/pods"
lock = threading.Lock()
control = {}
control_mtime = None
rng = random.Random(0)
rng_seed = None
stats = collections.Counter()
held = {}            # binding id -> pod, while held by bind_delay_ms
answered_504 = []    # pods whose Binding was applied and answered 504
stale_pending = 0    # LISTs to answer from a stale snapshot (one per 410 we sent)
list_auth = None     # (path, headers) of the extender's pod LIST, to take snapshots with
snapshots = collections.deque(maxlen=240)  # (time, body) of the pod list, every 0.5 s
binds_ok = collections.deque(maxlen=10000)  # times of Bindings the API server accepted
seq = 0


def say(msg):
    print(f"{time.time():.3f} {msg}", file=sys.stderr, flush=True)


def write_status():
    data = {"counts": dict(stats), "held": sorted(held.values()), "answered_504": answered_504,
            "open_pod_watches": stats["pod_watches_opened"] - stats["pod_watches_closed"]}
    tmp = args.status + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, args.status)


def count(key, n=1):
    with lock:
        stats[key] += n
        write_status()


def conf():
    """The control file, re-read when it changed (atomic replace by the scenario)."""
    global control, control_mtime, rng_seed
    try:
        st = os.stat(args.control)
        if st.st_mtime_ns != control_mtime:
            with open(args.control) as f:
                new = json.load(f)
            with lock:
                control, control_mtime = new, st.st_mtime_ns
                if new.get("seed") != rng_seed:
                    rng_seed = new.get("seed")
                    rng.seed(rng_seed)
            say(f"control {json.dumps(new, sort_keys=True)}")
    except (OSError, ValueError) as e:  # a half-written file is read again next time
        say(f"control file unreadable: {e}")
    return control


upstream_ctx = ssl.create_default_context(cafile=args.ca)


def upstream(timeout=60):
    return http.client.HTTPSConnection("127.0.0.1", args.upstream_port, context=upstream_ctx,
                                       timeout=timeout)


FORWARDED = ("authorization", "content-type", "accept", "user-agent")


def snapshotter():
    """Lists pods with the extender's credentials every 0.5 s, keeping the bodies for stale LISTs."""
    while True:
        time.sleep(0.5)
        with lock:
            la = list_auth if control.get("stale_list_ms") else None
        if not la:
            continue
        try:
            c = upstream(10)
            c.request("GET", la[0], headers=la[1])
            r = c.getresponse()
            body = r.read()
            c.close()
            if r.status == 200:
                with lock:
                    snapshots.append((time.time(), body))
                count("snapshots")
        except (OSError, http.client.HTTPException) as e:
            say(f"snapshot list failed: {e}")


def watchdog():
    time.sleep(args.lifetime)
    say(f"lifetime of {args.lifetime:.0f} s is over: exiting")
    os._exit(0)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def send(self, code, body, ctype="application/json", extra=()):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def headers_out(self):
        return {k: v for k, v in self.headers.items() if k.lower() in FORWARDED}

    def do_any(self, method):
        global list_auth
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = self.path
        base, _, query = path.partition("?")
        params = dict(p.partition("=")[::2] for p in query.split("&") if p)
        watch = params.get("watch") in ("1", "true")
        c = conf()
        if method == "POST" and BINDING.match(base):
            return self.binding(path, body, c)
        watch_list = watch and params.get("sendInitialEvents") == "true"
        if method == "GET" and base == POD_COLLECTION and watch_list:
            extenders = "fieldSelector" not in params  # the kubelet's names its node
            if extenders:
                with lock:
                    if list_auth is None:
                        list_auth = (POD_COLLECTION + "?limit=500", self.headers_out())
            self.hold_pod_list(path)
            if extenders and self.stale_watch_list(c):
                return
            return self.stream(path, pod=True, initial_events=True)
        if method == "GET" and base == POD_COLLECTION and watch:
            if c.get("refuse_pod_watches"):
                count("pod_watches_refused_410")
                self.close_connection = True
                return self.send(410, json.dumps({
                    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": "too old resource version (fault proxy)", "reason": "Expired",
                    "code": 410}).encode())
            return self.stream(path, pod=True)
        if watch:
            return self.stream(path, pod=False)
        if method == "GET" and base == POD_COLLECTION and "continue" not in params:
            with lock:
                if list_auth is None:
                    list_auth = (path, self.headers_out())
            self.hold_pod_list(path)
            if self.stale_list(c):
                return
        self.forward(method, path, body)

    def hold_pod_list(self, path):
        """While hold_pod_lists is on, the relist (a LIST, or a watch-list) waits."""
        if not conf().get("hold_pod_lists"):
            return
        count("pod_lists_held")
        say(f"pod LIST held: {path}")
        while conf().get("hold_pod_lists"):
            time.sleep(0.05)
        say("pod LIST released")

    do_GET = lambda self: self.do_any("GET")  # noqa: E731
    do_POST = lambda self: self.do_any("POST")  # noqa: E731
    do_PUT = lambda self: self.do_any("PUT")  # noqa: E731
    do_PATCH = lambda self: self.do_any("PATCH")  # noqa: E731
    do_DELETE = lambda self: self.do_any("DELETE")  # noqa: E731

    def forward(self, method, path, body):
        try:
            conn = upstream()
            conn.request(method, path, body=body if body else None, headers=self.headers_out())
            r = conn.getresponse()
            data = r.read()
            conn.close()
        except (OSError, http.client.HTTPException) as e:
            return self.send(502, json.dumps({"kind": "Status", "message": f"fault proxy: {e}",
                                              "code": 502}).encode())
        self.send(r.status, data, r.getheader("Content-Type", "application/json"))
        return r.status, data

    def stale_snapshot(self, c, what):
        """A snapshot at least stale_list_ms old for the relist that follows one of our 410s."""
        global stale_pending
        stale_ms = c.get("stale_list_ms", 0)
        with lock:
            if not stale_pending or not stale_ms:
                return None
            stale_pending -= 1
            cutoff = time.time() - stale_ms / 1000
            old = [s for s in snapshots if s[0] <= cutoff]
            if not old:
                return None
            taken, body = old[-1]
            since = sum(1 for t in binds_ok if t > taken)
        rv = re.search(rb'"resourceVersion": *"(\d+)"', body)
        say(f"stale {what}: pods as of {time.time() - taken:.1f} s ago (resourceVersion "
            f"{rv.group(1).decode() if rv else '?'}), {since} Bindings committed since")
        count("stale_lists")
        count("binds_missing_from_stale_lists", since)
        return body

    def stale_list(self, c):
        body = self.stale_snapshot(c, "LIST")
        if body is None:
            return False
        self.send(200, body)
        return True

    def stale_watch_list(self, c):
        """The snapshot as a watch list: ADDED per pod, the initial-events-end bookmark, the end."""
        body = self.stale_snapshot(c, "watch list")
        if body is None:
            return False
        snapshot = json.loads(body)
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for item in snapshot.get("items", []):
                self.chunk(json.dumps({"type": "ADDED", "object": item}).encode() + b"\n")
            self.chunk(json.dumps({"type": "BOOKMARK", "object": {
                "kind": "Pod", "apiVersion": "v1", "metadata": {
                    "resourceVersion": snapshot.get("metadata", {}).get("resourceVersion", ""),
                    "annotations": {"k8s.io/initial-events-end": "true"}}}}).encode() + b"\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            pass  # the client went away
        return True

    def binding(self, path, body, c):
        global seq
        name = BINDING.match(path.partition("?")[0]).group(2)
        delay = c.get("bind_delay_ms", 0)
        with lock:
            seq += 1
            my = seq
            fail = rng.random() < c.get("bind_504", 0)
        if delay:
            with lock:
                held[my] = name
                stats["bindings_held"] += 1
                write_status()
            say(f"binding {name}: held {delay} ms before it is forwarded")
            time.sleep(delay / 1000)
        try:
            conn = upstream()
            conn.request("POST", path, body=body, headers=self.headers_out())
            r = conn.getresponse()
            data = r.read()
            conn.close()
        except (OSError, http.client.HTTPException) as e:
            with lock:
                held.pop(my, None)
            count("bindings_upstream_errors")
            return self.safe_send(502, json.dumps({"kind": "Status", "code": 502,
                                                   "message": f"fault proxy: {e}"}).encode())
        with lock:
            held.pop(my, None)
            if r.status == 201:
                binds_ok.append(time.time())
        say(f"binding {name}: API server answered {r.status}"
            + (" -> answered 504 to the client (applied)" if fail and r.status == 201 else "")
            + (f" after {delay} ms held" if delay else ""))
        if fail and r.status == 201:
            with lock:
                answered_504.append(name)
            count("bindings_applied_answered_504")
            return self.safe_send(504, json.dumps({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "the server was unable to return a response in the time allotted, "
                           "but may still be processing the request (fault proxy)",
                "reason": "Timeout", "code": 504}).encode())
        count(f"bindings_{r.status}")
        self.safe_send(r.status, data, r.getheader("Content-Type", "application/json"))

    def safe_send(self, code, body, ctype="application/json"):
        try:
            self.send(code, body, ctype)
        except OSError:  # the client gave up (a SIGTERMed or SIGKILLed extender): the write stands
            count("answers_to_gone_clients")
            self.close_connection = True

    def stream(self, path, pod, initial_events=False):
        """A watch: frames forwarded as chunks; for pods, delayed or ended with 410 as told.
        A watch list's (initial_events, JSON) frames count toward watch_410_every only after the
        bookmark that ends its initial events."""
        try:
            conn = upstream(timeout=None)
            conn.request("GET", path, headers=self.headers_out())
            r = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            self.close_connection = True
            return self.send(502, json.dumps({"kind": "Status", "code": 502,
                                              "message": f"fault proxy: {e}"}).encode())
        if r.status != 200:
            data = r.read()
            conn.close()
            self.close_connection = True
            return self.send(r.status, data, r.getheader("Content-Type", "application/json"))
        self.close_connection = True
        ctype = r.getheader("Content-Type", "application/json")
        is_json = "json" in ctype
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        frames = queue.Queue()
        done = threading.Event()

        def reader():
            # JSON watches are one event a line; others (the kubelet's protobuf) are passed on as
            # the bytes arrive: a binary frame need not contain a newline.
            try:
                while not done.is_set():
                    data = r.readline() if is_json else r.read1(65536)
                    if not data:
                        break
                    frames.put((time.time(), data))
            except Exception:  # noqa: BLE001 - the stream was shut down under the read
                pass
            frames.put(None)

        threading.Thread(target=reader, daemon=True).start()
        if pod:
            count("pod_watches_opened")
        expire0 = conf().get("expire", 0)
        n = 0
        try:
            while True:
                c = conf()
                if pod and c.get("expire", 0) != expire0:
                    return self.end_410("expired by the scenario", is_json)
                try:
                    item = frames.get(timeout=0.1)
                except queue.Empty:
                    continue
                if item is None:
                    break
                arrived, line = item
                if pod:
                    wait = arrived + c.get("watch_delay_ms", 0) / 1000 - time.time()
                    if wait > 0:
                        count("pod_watch_frames_delayed")
                        time.sleep(wait)
                self.chunk(line)
                if initial_events and is_json:
                    initial_events = b"initial-events-end" not in line
                    continue
                n += 1
                every = c.get("watch_410_every", 0) if pod else 0
                if every and n >= every and b'"type":"BOOKMARK"' not in line:
                    return self.end_410(f"after {n} frames", is_json)
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass  # the client went away
        finally:
            done.set()
            try:
                conn.sock and conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()
            if pod:
                count("pod_watches_closed")

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def end_410(self, why, json_stream=True):
        global stale_pending
        if not json_stream:  # protobuf (kubelet): end the stream; its next watch is refused
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            say(f"pod watch ended ({why})")
            count("pod_watches_ended")
            return
        ev = {"type": "ERROR", "object": {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": f"too old resource version: injected by the fault proxy ({why})",
            "reason": "Expired", "code": 410}}
        self.chunk(json.dumps(ev).encode() + b"\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        with lock:
            stale_pending += 1
        say(f"pod watch ended with 410 ({why})")
        count("pod_watches_ended_410")


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64


def stop(*_):
    with lock:
        say("stopping: " + json.dumps(dict(stats), sort_keys=True))
    os._exit(0)


signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
threading.Thread(target=watchdog, daemon=True).start()
threading.Thread(target=snapshotter, daemon=True).start()
server = Server(("127.0.0.1", args.port), Handler)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(args.cert, args.key)
server.socket = ctx.wrap_socket(server.socket, server_side=True)
write_status()
say(f"listening on https://127.0.0.1:{args.port}, forwarding to https://127.0.0.1:{args.upstream_port}")
server.serve_forever()
