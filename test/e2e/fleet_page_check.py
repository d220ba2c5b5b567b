#!/usr/bin/env python3
"""Checks the fleet page as Chromium rendered it (--dump-dom) against the API server's pods.

fleet_page_check.py PAGE.html PODS.json [--pending NS/NAME --pending-kind KIND --pending-node NODE]
                    [--focus NS/NAME] [--only-nodes NODE,...]

Every bound pod with a toposched.io/allocation record must be drawn on exactly the units the
record names: device ids as whole devices, core ids as those cores, on the node the record names.
Prints what it checked; exits 1 with the differences."""
import argparse
import json
import sys
from html.parser import HTMLParser


class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.node = None
        self.cores = {}         # node -> {core: owner}
        self.device_of = {}     # node -> {core: device}
        self.fills = {}         # node -> {core: fill}
        self.pending = {}       # pod -> {kind: text}
        self.focus = {}         # pod -> text
        self.rendered_ms = None
        self._row = None
        self._kind = None
        self._focus = None
        self.charts = 0         # figures of the last hours with at least one line
        self._chart = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.rendered_ms = a.get("data-rendered-ms")
        if tag == "svg" and "node" in (a.get("class") or "").split():
            self.node = a.get("data-node")
            self.cores.setdefault(self.node, {})
            self.device_of.setdefault(self.node, {})
            self.fills.setdefault(self.node, {})
        if tag == "rect" and a.get("class") == "core" and self.node is not None:
            first, last = (int(x) for x in a["data-cores"].split("-"))
            for c in range(first, last + 1):
                self.cores[self.node][c] = a.get("data-owner") or ""
                self.device_of[self.node][c] = int(a["data-device"])
                self.fills[self.node][c] = a.get("fill")
        if tag == "tr" and a.get("class") == "pending":
            self._row = a.get("data-pod")
            self.pending[self._row] = {}
        if tag == "div" and self._row is not None and a.get("data-kind"):
            self._kind = a["data-kind"]
            self.pending[self._row][self._kind] = ""
        if tag == "figure" and a.get("class") == "chart":
            self._chart = True
        if tag == "polyline" and self._chart:
            self.charts += 1
            self._chart = False
        if tag == "div" and a.get("data-focus"):
            self._focus = a["data-focus"]
            self.focus[self._focus] = ""

    def handle_endtag(self, tag):
        if tag == "svg":
            self.node = None
        if tag == "figure":
            self._chart = False
        if tag == "tr":
            self._row = None
        if tag == "div":
            self._kind = None
            self._focus = None

    def handle_data(self, data):
        if self._row is not None and self._kind is not None:
            self.pending[self._row][self._kind] += data
        if self._focus is not None:
            self.focus[self._focus] += data


def expected_cores(record, cores_per_device):
    cores = set()
    for c in record["containers"]:
        for i in c["ids"]:
            if c["resource"].endswith("neuroncore"):
                cores.add(i)
            else:
                cores.update(range(i * cores_per_device, (i + 1) * cores_per_device))
    return cores


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("page")
    ap.add_argument("pods")
    ap.add_argument("--pending")
    ap.add_argument("--pending-kind")
    ap.add_argument("--pending-node")
    ap.add_argument("--focus")
    ap.add_argument("--only-nodes")
    ap.add_argument("--charts", type=int, help="charts of the last hours, each with a line")
    args = ap.parse_args()
    page = Page()
    page.feed(open(args.page, encoding="utf-8").read())
    pods = json.load(open(args.pods))["items"]
    bad = []
    checked = 0
    for p in pods:
        ann = p["metadata"].get("annotations") or {}
        if "toposched.io/allocation" not in ann or not p["spec"].get("nodeName"):
            continue
        key = f'{p["metadata"]["namespace"]}/{p["metadata"]["name"]}'
        record = json.loads(ann["toposched.io/allocation"])
        node = record["node"]
        if args.only_nodes and node not in args.only_nodes.split(","):
            continue
        if node not in page.cores:
            bad.append(f"{key}: node {node} is not drawn")
            continue
        per_device = sum(1 for d in page.device_of[node].values() if d == 0)
        want = expected_cores(record, per_device)
        drawn = {c for c, owner in page.cores[node].items() if owner == key}
        if drawn != want:
            bad.append(f"{key}: drawn on cores {sorted(drawn)} of {node}, its record names {sorted(want)}")
        checked += 1
    if args.only_nodes:
        shown = set(page.cores)
        if shown != set(args.only_nodes.split(",")):
            bad.append(f"nodes drawn: {sorted(shown)}, expected only {args.only_nodes}")
    if checked == 0 and not args.only_nodes:
        bad.append("no bound pod with an allocation record to check")
    if args.pending:
        kinds = page.pending.get(args.pending)
        if kinds is None:
            bad.append(f"{args.pending} is not listed as pending (listed: {sorted(page.pending)})")
        elif args.pending_kind not in kinds:
            bad.append(f"{args.pending}: no reason of kind {args.pending_kind} (kinds: {kinds})")
        elif args.pending_node and args.pending_node not in kinds[args.pending_kind]:
            bad.append(f"{args.pending}: the {args.pending_kind} reason does not name {args.pending_node}: {kinds[args.pending_kind]!r}")
    if args.focus:
        text = page.focus.get(args.focus)
        pod = next((p for p in pods if f'{p["metadata"]["namespace"]}/{p["metadata"]["name"]}' == args.focus), None)
        if text is None or pod is None or pod["spec"].get("nodeName", "") not in text:
            bad.append(f"focus on {args.focus}: {text!r} does not name its node")
        for node, owners in page.cores.items():
            for c, owner in owners.items():
                pale = page.fills[node][c] == "#cfcfcf"
                if owner and (owner == args.focus) == pale:
                    bad.append(f"{node} core {c} of {owner} is {'pale' if pale else 'coloured'}")
                    break
    if args.charts is not None and page.charts != args.charts:
        bad.append(f"{page.charts} charts of the last hours have a line, expected {args.charts}")
    if page.rendered_ms is None:
        bad.append("the page never finished loading (no data-rendered-ms on body)")
    if bad:
        print("\n".join(bad))
        return 1
    print(f"{checked} bound pods drawn on exactly their records' units across {len(page.cores)} nodes"
          + (f"; {args.pending} pending ({args.pending_kind}: {page.pending[args.pending][args.pending_kind].strip()[:160]})" if args.pending else "")
          + (f"; {page.charts} charts of the last minutes" if args.charts is not None else "")
          + f"; loaded in {page.rendered_ms} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
