#!/usr/bin/env python3
"""The invariant of test/e2e/faults.sh, over every pod and the real kubelet's device state.

  fault_check.py PODS_JSON NODES_JSON TOPOSCHED_BIN CHECKPOINT KUBELET_NODE

1. Records: no device (or core) of a node is in the toposched.io/allocation record of two live pods
   (bound, not Succeeded/Failed, not being deleted). Counted per node and per phase (the node label
   toposched.io/e2e-phase).
2. The kubelet: in kubelet's device-manager checkpoint (what its PodResources API serves), no device
   id is given to two live pods; and in the AllocateResponse kubelet stored for each container (the
   device nodes the container really gets: /dev/neuronN), no device goes to two live pods. A pod
   whose record differs from what its container got is reported as drift.
3. Every pod that fits is bound: an unbound pod asking for devices is an error when some node its
   nodeSelector allows has room for it around the records there (`toposched allocate --used`).
Prints one line per finding and a SUMMARY line; exits 1 when an id is given twice or a pod that
fits is unbound.
"""
import base64
import collections
import json
import os
import re
import subprocess
import sys

pods_file, nodes_file, toposched, checkpoint, kubelet_node = sys.argv[1:6]
pods = json.load(open(pods_file))["items"]
nodes = {n["metadata"]["name"]: n for n in json.load(open(nodes_file))["items"]}
DEV = "aws.amazon.com/neuron"
CORE = "aws.amazon.com/neuroncore"


def phase_of(node):
    n = nodes.get(node)
    return ((n or {}).get("metadata", {}).get("labels") or {}).get("toposched.io/e2e-phase", "?")


def live(p):
    return (p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
            and p.get("status", {}).get("phase") not in ("Succeeded", "Failed"))


findings = []
holders = collections.defaultdict(set)   # (node, device) -> pods
used = collections.defaultdict(set)      # node -> devices
record_of = {}                           # uid -> device ids of its record
n_live = 0
for p in pods:
    if not live(p):
        continue
    n_live += 1
    name, node = p["metadata"]["name"], p["spec"]["nodeName"]
    rec = (p["metadata"].get("annotations") or {}).get("toposched.io/allocation")
    if not rec:
        continue
    r = json.loads(rec)
    if r.get("node") != node:
        findings.append(f"record of {name} names node {r.get('node')}, the pod is on {node}")
    devs = set()
    for c in r.get("containers", []):
        for i in c["ids"]:
            # Core pods: the cores of one device are 2 on every type used here (inf2, trn1).
            devs.add(i if c["resource"] == DEV else i // 2)
    record_of[p["metadata"]["uid"]] = devs
    for d in devs:
        holders[(node, d)].add(name)
        used[node].add(d)

doubled = {k: v for k, v in holders.items() if len(v) > 1}
by_phase = collections.Counter(phase_of(n) for n, _ in doubled)
for (node, d), who in sorted(doubled.items()):
    findings.append(f"records: {node} device {d} is given to {len(who)} live pods: {', '.join(sorted(who))}")

# 3. every pod that fits is bound
unbound_fitting = 0
n_unbound = 0
for p in pods:
    if p["spec"].get("nodeName") or p["metadata"].get("deletionTimestamp"):
        continue
    lim = {}
    for c in p["spec"]["containers"]:
        for k, v in ((c.get("resources") or {}).get("limits") or {}).items():
            lim[k] = lim.get(k, 0) + int(v)
    want = lim.get(DEV, 0)
    if not want:
        continue
    n_unbound += 1
    sel = p["spec"].get("nodeSelector") or {}
    for name, n in nodes.items():
        labels = n["metadata"].get("labels") or {}
        if any(labels.get(k) != v for k, v in sel.items()):
            continue
        itype = labels.get("node.kubernetes.io/instance-type")
        alloc = int((n.get("status", {}).get("allocatable") or {}).get(DEV, "0"))
        if not itype or alloc == 0:
            continue
        args = [toposched, "allocate", "-t", itype, "-d", str(want)]
        if used[name]:
            args += ["--used", ",".join(map(str, sorted(used[name])))]
        if subprocess.run(args, capture_output=True).returncode == 0:
            unbound_fitting += 1
            findings.append(f"unbound: {p['metadata']['name']} ({want} devices) fits on {name} "
                            f"(held there: {sorted(used[name])}) but is not bound")
            break

# 2. the kubelet
kubelet_double = granted_double = drift = 0
kubelet_pods = {p["metadata"]["uid"]: p["metadata"]["name"] for p in pods
                if live(p) and p["spec"]["nodeName"] == kubelet_node}
if kubelet_pods:
    if not os.path.exists(checkpoint):
        findings.append(f"kubelet: no checkpoint at {checkpoint}")
        kubelet_double = -1
    else:
        data = json.load(open(checkpoint))["Data"]
        books = collections.defaultdict(set)
        granted = collections.defaultdict(set)
        got = collections.defaultdict(set)
        for e in data.get("PodDeviceEntries") or []:
            uid = e["PodUID"]
            if uid not in kubelet_pods or e["ResourceName"] != DEV:
                continue
            d = e["DeviceIDs"]
            vals = [v for vs in d.values() for v in vs] if isinstance(d, dict) else d
            for v in vals:
                books[int(re.sub(r"\D", "", v))].add(kubelet_pods[uid])
            resp = base64.b64decode(e.get("AllocResp") or "")
            for m in re.findall(rb"/dev/neuron(\d+)", resp):
                granted[int(m)].add(kubelet_pods[uid])
                got[uid].add(int(m))
        for d, who in sorted(books.items()):
            if len(who) > 1:
                kubelet_double += 1
                findings.append(f"kubelet's books: {kubelet_node} device {d} is allocated to {', '.join(sorted(who))}")
        for d, who in sorted(granted.items()):
            if len(who) > 1:
                granted_double += 1
                findings.append(f"kubelet's Allocate responses: /dev/neuron{d} on {kubelet_node} goes to "
                                f"{', '.join(sorted(who))}")
        for uid, name in kubelet_pods.items():
            if uid in got and uid in record_of and got[uid] != record_of[uid]:
                drift += 1
                findings.append(f"drift: {name}'s container got devices {sorted(got[uid])}, its record "
                                f"says {sorted(record_of[uid])}")
        print(f"kubelet {kubelet_node}: {len(kubelet_pods)} live pods, "
              f"{sum(1 for u in kubelet_pods if u in got)} with devices from Allocate")

for f in findings:
    print(f)
per_phase = collections.Counter(by_phase)
if kubelet_pods:
    per_phase[phase_of(kubelet_node)] += max(kubelet_double, 0) + granted_double
for ph, n in sorted(per_phase.items()):
    print(f"phase {ph}: {n} devices given twice (records and the kubelet)")
phases = " ".join(f"{k}={v}" for k, v in sorted(by_phase.items())) or "none"
print(f"SUMMARY pods={len(pods)} live={n_live} unbound={n_unbound} ids_twice_records={len(doubled)} "
      f"(by phase: {phases}) ids_twice_kubelet={kubelet_double} ids_twice_granted={granted_double} "
      f"drift={drift} unbound_that_fit={unbound_fitting}")
sys.exit(1 if doubled or kubelet_double or granted_double or unbound_fitting else 0)
