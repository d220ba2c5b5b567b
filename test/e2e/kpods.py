#!/usr/bin/env python3
"""Fast pod bookkeeping for the throughput run, over keep-alive HTTPS connections.

  kpods.py create N RESOURCE COUNT [KEY=VALUE]
                                     create pods bench-0..N-1 in default for my-scheduler (with
                                     the label KEY=VALUE too, when given)
  kpods.py delete                    delete every pod in default at once (grace period 0)
  kpods.py unbound                   print how many pods in default have no node yet
Environment: API (https://127.0.0.1:PORT), TOKEN, CA (CA file).
"""
import http.client
import json
import os
import ssl
import sys
import threading
from urllib.parse import urlparse

url = urlparse(os.environ["API"])
ctx = ssl.create_default_context(cafile=os.environ["CA"])
headers = {"Authorization": "Bearer " + os.environ["TOKEN"], "Content-Type": "application/json"}


def conn():
    return http.client.HTTPSConnection(url.hostname, url.port, context=ctx, timeout=60)


def call(c, method, path, body=None):
    c.request(method, path, body=body, headers=headers)
    r = c.getresponse()
    data = r.read()
    if r.status >= 300:
        raise SystemExit(f"{method} {path}: {r.status} {data[:300]!r}")
    return data


def create(n, res, count, label=""):
    labels = {"app": "bench"}
    if label:
        key, _, value = label.partition("=")
        labels[key] = value
    def worker(k, step):
        c = conn()
        for i in range(k, n, step):
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": f"bench-{i}", "labels": labels},
                   "spec": {"schedulerName": "my-scheduler", "terminationGracePeriodSeconds": 0,
                            "containers": [{"name": "main", "image": "registry.invalid/neuron-app:1",
                                            "resources": {"limits": {res: str(count)},
                                                          "requests": {"cpu": "100m"}}}]}}
            call(c, "POST", "/api/v1/namespaces/default/pods", json.dumps(pod))
    threads = [threading.Thread(target=worker, args=(k, 8)) for k in range(8)]
    for t in threads: t.start()
    for t in threads: t.join()


def main():
    cmd = sys.argv[1]
    if cmd == "create":
        create(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5] if len(sys.argv) > 5 else "")
    elif cmd == "delete":
        call(conn(), "DELETE", "/api/v1/namespaces/default/pods?gracePeriodSeconds=0",
             json.dumps({"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}))
    elif cmd == "unbound":
        data = call(conn(), "GET", "/api/v1/namespaces/default/pods?fieldSelector=spec.nodeName%3D")
        print(len(json.loads(data)["items"]))
    elif cmd == "count":
        data = call(conn(), "GET", "/api/v1/namespaces/default/pods?limit=1")
        d = json.loads(data)
        print(len(d["items"]) + int(d["metadata"].get("remainingItemCount") or 0))


main()
