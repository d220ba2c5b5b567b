#!/usr/bin/env python3
"""The DRA side of the throughput run (throughput.sh --dra), over keep-alive HTTPS connections.

  dra_bench.py slices FORM NODES_FILE ORACLE
      replace every neuron.aws.com ResourceSlice with FORM's for each node of NODES_FILE (lines
      "name type ..."): `ours` is what `toposched dra-plugin` publishes by default (`ORACLE slices`,
      the production builder; on Trainium whole devices with AWS's group attributes), `ours-sets`
      what it publishes with --set-offers on (every legal set a device, shared counters), `aws` is
      AWS's form (the whole devices only, AWS's attributes, one slice, no counters)
  dra_bench.py create N CLASS COUNT [CEL] [MATCH_ATTRIBUTE]
      create ResourceClaims bench-0..N-1 (one request of CLASS: COUNT devices, the CEL selector
      and the matchAttribute constraint when given) and pods bench-0..N-1 using them
  dra_bench.py class NAME CEL
      create (or replace) DeviceClass NAME with the one CEL selector: a class per size, measured
      against a request selector over a shared class
  dra_bench.py delete
      delete every pod, then release and delete every ResourceClaim in default (no kubelet and
      no resourceclaim controller here: the allocation and reservation are cleared by hand)
  dra_bench.py claims
      print how many ResourceClaims default holds
  dra_bench.py check NODES_FILE ORACLE
      print "allocated illegal": whether each allocated claim's devices are one legal set of its
      node's type (`ORACLE legal`, the project's rule); each illegal one is named on stderr
Environment: API (https://127.0.0.1:PORT), TOKEN, CA (CA file).
"""
import http.client
import json
import os
import ssl
import subprocess
import sys
import threading
from urllib.parse import urlparse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

url = urlparse(os.environ["API"])
ctx = ssl.create_default_context(cafile=os.environ["CA"])
headers = {"Authorization": "Bearer " + os.environ["TOKEN"], "Content-Type": "application/json"}
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"


def conn():
    return http.client.HTTPSConnection(url.hostname, url.port, context=ctx, timeout=60)


def call(c, method, path, body=None, ok_missing=False):
    c.request(method, path, body=body, headers=headers)
    r = c.getresponse()
    data = r.read()
    if ok_missing and r.status == 404:
        return b"{}"
    if r.status >= 300:
        raise SystemExit(f"{method} {path}: {r.status} {data[:300]!r}")
    return data


def parallel(items, fn, threads=8):
    def worker(k):
        c = conn()
        for i in range(k, len(items), threads):
            fn(c, items[i])
    ts = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in ts: t.start()
    for t in ts: t.join()


def aws_form(slices):
    """AWS's form of a node: its whole devices with AWS's attributes only, in one slice."""
    devices = []
    for s in slices:
        for d in s["spec"].get("devices") or []:
            if d["attributes"].get("resourceType", {}).get("string") != "neuron_device":
                continue
            d = dict(d)
            d.pop("consumesCounters", None)
            d["attributes"] = {k: v for k, v in d["attributes"].items()
                               if not k.startswith("toposched.io/")}
            # AWS's driver also gives each device of an EFA-enabled instance its EFA BDF.
            device_id = d["attributes"]["deviceId"]["int"]
            d["attributes"]["resource.aws.com/devicegroup1_id"] = {"string": f"0000:{0x10 + device_id:02x}:00.0"}
            devices.append(d)
    first = slices[0]
    node = first["spec"]["nodeName"]
    return [{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
             "metadata": {"name": f"{node}-aws"},
             "spec": {"driver": first["spec"]["driver"], "nodeName": node,
                      "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                      "devices": devices}}]


def slices(form, nodes_file, dump):
    if form not in ("ours", "ours-sets", "aws"):
        raise SystemExit(f"slices: FORM {form!r} is none of ours, ours-sets, aws")
    c = conn()
    call(c, "DELETE", SLICES + "?fieldSelector=spec.driver%3Dneuron.aws.com")
    by_type = {}
    objects = []
    for line in open(nodes_file):
        name, typ = line.split()[:2]
        if typ not in by_type:
            oracle_form = "sets" if form == "ours-sets" else "auto"
            out = subprocess.run([dump, "slices", typ, "NODE-PLACEHOLDER", "0", oracle_form], check=True, capture_output=True,
                                 text=True).stdout
            by_type[typ] = out
        text = by_type[typ].replace("NODE-PLACEHOLDER", name)
        node_slices = [json.loads(l) for l in text.splitlines() if l.strip()]
        objects += aws_form(node_slices) if form == "aws" else node_slices
    parallel(objects, lambda c, o: call(c, "POST", SLICES, json.dumps(o)))
    devices = sum(len(o["spec"].get("devices") or []) for o in objects)
    print(f"{len(objects)} slices, {devices} devices", file=sys.stderr)


def create(n, cls, count, cel, match):
    request = {"name": "neurons", "exactly": {"deviceClassName": cls, "allocationMode": "ExactCount",
                                              "count": count}}
    if cel:
        request["exactly"]["selectors"] = [{"cel": {"expression": cel}}]
    spec = {"devices": {"requests": [request]}}
    if match:
        spec["devices"]["constraints"] = [{"requests": ["neurons"], "matchAttribute": match}]

    def make(c, i):
        claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                 "metadata": {"name": f"bench-{i}"}, "spec": spec}
        call(c, "POST", CLAIMS, json.dumps(claim))
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"bench-{i}", "labels": {"app": "bench"}},
               "spec": {"schedulerName": "my-scheduler", "terminationGracePeriodSeconds": 0,
                        "resourceClaims": [{"name": "neurons", "resourceClaimName": f"bench-{i}"}],
                        "containers": [{"name": "main", "image": "registry.invalid/neuron-app:1",
                                        "resources": {"claims": [{"name": "neurons"}],
                                                      "requests": {"cpu": "100m"}}}]}}
        call(c, "POST", "/api/v1/namespaces/default/pods", json.dumps(pod))
    parallel(list(range(n)), make)


def delete():
    c = conn()
    call(c, "DELETE", "/api/v1/namespaces/default/pods?gracePeriodSeconds=0",
         json.dumps({"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}))
    claims = json.loads(call(c, "GET", CLAIMS))["items"]

    def release(c, claim):
        name = claim["metadata"]["name"]
        if claim.get("status"):
            claim["status"] = {}
            call(c, "PUT", f"{CLAIMS}/{name}/status", json.dumps(claim), ok_missing=True)
            claim = json.loads(call(c, "GET", f"{CLAIMS}/{name}", ok_missing=True))
            if not claim:
                return
        if claim["metadata"].get("finalizers"):
            claim["metadata"]["finalizers"] = []
            call(c, "PUT", f"{CLAIMS}/{name}", json.dumps(claim), ok_missing=True)
        call(c, "DELETE", f"{CLAIMS}/{name}", ok_missing=True)
    parallel(claims, release)


def check(nodes_file, oracle):
    from dra_names import devices_of
    types = dict(line.split()[:2] for line in open(nodes_file))
    claims = json.loads(call(conn(), "GET", CLAIMS))["items"]
    asked, names = [], []
    for claim in claims:
        results = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []
        if not results:
            continue
        pools = {r["pool"] for r in results}
        if len(pools) != 1:
            raise SystemExit(f"{claim['metadata']['name']}: devices of several nodes {pools}")
        ids = sorted(i for r in results for i in devices_of(r["device"], 1))
        asked.append(f"{types[pools.pop()]} {','.join(map(str, ids))}")
        names.append(f"{claim['metadata']['name']}: {[r['device'] for r in results]}")
    answers = subprocess.run([oracle, "legal"], input="\n".join(asked) + "\n", check=True,
                             capture_output=True, text=True).stdout.split()
    if len(answers) != len(asked):
        raise SystemExit(f"the oracle answered {len(answers)} of {len(asked)} sets")
    illegal = [n for n, a in zip(names, answers) if a != "legal"]
    for n in illegal:
        print(f"illegal: {n}", file=sys.stderr)
    print(f"{len(asked)} {len(illegal)}")


def device_class(name, cel):
    path = "/apis/resource.k8s.io/v1/deviceclasses"
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": cel}}]}}
    c = conn()
    call(c, "DELETE", f"{path}/{name}", ok_missing=True)
    call(c, "POST", path, json.dumps(body))


def main():
    cmd = sys.argv[1]
    if cmd == "slices":
        slices(sys.argv[2], sys.argv[3], sys.argv[4])
    elif cmd == "create":
        create(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]),
               sys.argv[5] if len(sys.argv) > 5 else "", sys.argv[6] if len(sys.argv) > 6 else "")
    elif cmd == "class":
        device_class(sys.argv[2], sys.argv[3])
    elif cmd == "delete":
        delete()
    elif cmd == "claims":
        print(len(json.loads(call(conn(), "GET", CLAIMS))["items"]))
    elif cmd == "check":
        check(sys.argv[2], sys.argv[3])
    else:
        raise SystemExit(f"unknown command {cmd}")


main()
