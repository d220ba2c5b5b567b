#!/usr/bin/env python3
"""Checks the Grafana dashboard and the Prometheus alerting rules (docs/observability.md).

  observability_check.py rules
      promtool check rules on deploy/prometheus/toposched-rules.yaml, promtool test rules on
      test/prometheus/toposched-rules.test.yaml, and that the unit tests see every alert fire.
      Exit 77 (ctest SKIP) without promtool (Debian's prometheus package).
  observability_check.py dashboard TOPOSCHED_BINARY
      Every panel of deploy/grafana/toposched-dashboard.json has a query; every metric a query
      names is in the /metrics of a real `toposched extender --offline-nodes` after a filter and
      a bind (a metric that only an error creates is allowed where the query says `or vector(0)`);
      the bind is counted as bound; GET /v1/history has a sample, and ?since= only newer ones.
  observability_check.py queries
      Prints each panel's queries with Grafana's variables filled in, one JSON string per line.
  observability_check.py prometheus URL
      Against a Prometheus that scrapes an extender and loaded the rules (test/e2e/
      fleet_prometheus.sh): every panel query returns data, every rule is evaluated without error.
Polls with bounded waits; never sleeps to synchronise.
"""
import json
import pathlib
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "deploy/grafana/toposched-dashboard.json"
RULES = ROOT / "deploy/prometheus/toposched-rules.yaml"
RULE_TESTS = ROOT / "test/prometheus/toposched-rules.test.yaml"
SKIP = 77
METRIC = re.compile(r"\btoposched_[a-z0-9_]+")
# What Grafana puts in place of its variables when it runs a query (the dashboard's own
# variables: every instance type).
VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h",
             "$instance_type": ".*", "${instance_type}": ".*"}


def fail(message):
    print(f"observability_check: FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def wait_until(seconds, what, probe):
    """Polls probe() (truthy: done) every 0.1 s for at most `seconds`; returns its value."""
    deadline = time.monotonic() + seconds
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            fail(f"timed out after {seconds}s waiting for {what}")
        time.sleep(0.1)


def panels():
    """Every panel that is not a row, rows' nested panels included."""
    out = []
    for p in json.loads(DASHBOARD.read_text())["panels"]:
        out.extend(p.get("panels", []) if p.get("type") == "row" else [p])
    return out


def panel_queries():
    """[(panel title, query with variables filled in)], failing on a panel without a query."""
    seen_ids = set()
    out = []
    for p in panels():
        title = p.get("title", "?")
        if p.get("id") in seen_ids:
            fail(f"panel id {p.get('id')} used twice")
        seen_ids.add(p.get("id"))
        targets = [t for t in p.get("targets", []) if t.get("expr", "").strip()]
        if not targets or len(targets) != len(p.get("targets", [])):
            fail(f"panel '{title}' has a target without a query")
        for t in targets:
            expr = t["expr"]
            for name, value in VARIABLES.items():
                expr = expr.replace(name, value)
            if "$" in expr:
                fail(f"panel '{title}': a variable the check does not know: {expr}")
            out.append((title, expr))
    return out


def check_rules():
    promtool = shutil.which("promtool")
    if promtool is None:
        print("observability_check: SKIP: no promtool (apt-get install prometheus)")
        sys.exit(SKIP)
    for args in (["check", "rules", str(RULES)], ["test", "rules", str(RULE_TESTS)]):
        run = subprocess.run([promtool, *args], capture_output=True, text=True, cwd=ROOT)
        if run.returncode != 0:
            fail(f"promtool {' '.join(args)}:\n{run.stdout}{run.stderr}")
    alerts = set(re.findall(r"^\s*- alert: (\w+)", RULES.read_text(), re.M))
    fired = set()
    current = None
    for line in RULE_TESTS.read_text().splitlines():
        if m := re.match(r"\s*alertname: (\w+)", line):
            current = m.group(1)
        elif re.match(r"\s*- exp_labels:", line) and current:
            fired.add(current)
    if alerts - fired:
        fail(f"alerts no unit test sees fire: {sorted(alerts - fired)}")
    print(f"observability_check: {len(alerts)} alerts parse, and each fires in its unit test")


def http(method, url, body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return answer.read().decode()


def exposed_names(text):
    """Metric names in a /metrics text, histograms' _bucket/_sum/_count included."""
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines()
            if line and not line.startswith("#")}


def check_dashboard(binary):
    queries = panel_queries()
    extender = subprocess.Popen(
        [binary, "extender", "--offline-nodes", str(ROOT / "examples/offline-nodes.yaml"),
         "--listen", "127.0.0.1:0", "--history-interval", "1s"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # The port it took is in its log line "extender serving HTTP on 127.0.0.1:PORT" (spdlog
        # logs to stdout); the rest of the log is drained by a thread so the pipe never fills.
        port = None
        for line in extender.stdout:
            if m := re.search(r"serving HTTP on 127\.0\.0\.1:(\d+)", line):
                port = m.group(1)
                break
        if port is None:
            fail("the extender exited before serving")
        threading.Thread(target=extender.stdout.read, daemon=True).start()
        base = f"http://127.0.0.1:{port}"
        history = wait_until(30, "a sample in /v1/history",
                             lambda: json.loads(http("GET", base + "/v1/history"))["samples"])
        if history[-1]["nodes"] != 4:
            fail(f"/v1/history's sample has {history[-1]['nodes']} nodes, the file 4")
        pod = {"metadata": {"name": "p", "namespace": "default", "uid": "p-uid"},
               "spec": {"containers": [{"name": "main", "resources": {
                   "limits": {"aws.amazon.com/neuron": "4"}}}]}}
        nodes = ["trn1-a", "trn2-a", "inf2-a", "inf1-a"]
        passed = json.loads(http("POST", base + "/filter", {"Pod": pod, "NodeNames": nodes}))
        http("POST", base + "/prioritize", {"Pod": pod, "NodeNames": nodes})
        if not passed.get("NodeNames"):
            fail(f"filter placed the pod nowhere: {passed}")
        bound = json.loads(http("POST", base + "/bind", {
            "PodName": "p", "PodNamespace": "default", "PodUID": "p-uid",
            "Node": passed["NodeNames"][0]}))
        if bound.get("Error"):
            fail(f"bind: {bound['Error']}")
        http("GET", base + "/metrics")  # the first scrape is counted in the next
        text = http("GET", base + "/metrics")
        names = exposed_names(text)
        if 'toposched_binds_total{outcome="bound"} 1' not in text:
            fail("the bind is not counted as bound in toposched_binds_total")
        newer = json.loads(http("GET", f"{base}/v1/history?since={history[-1]['time']}"))
        if any(s["time"] <= history[-1]["time"] for s in newer["samples"]):
            fail("/v1/history?since= returned a sample not newer than since")
    finally:
        extender.terminate()
        extender.wait(timeout=30)
    missing = []
    for title, expr in queries:
        for name in set(METRIC.findall(expr)) - names:
            if "or vector(0)" not in expr:
                missing.append(f"'{title}': {name}")
    if missing:
        fail("metrics the dashboard queries that /metrics does not have:\n  " + "\n  ".join(missing))
    print(f"observability_check: {len(panels())} panels, {len(queries)} queries, every metric "
          "they name served by the extender")


def check_prometheus(url):
    """Every panel query returns data; every rule is evaluated, healthy."""
    def query(expr):
        answer = json.loads(http("GET", f"{url}/api/v1/query?"
                                 + urllib.parse.urlencode({"query": expr})))
        if answer.get("status") != "success":
            fail(f"query {expr}: {answer}")
        return answer["data"]["result"]

    empty = [f"'{title}': {expr}" for title, expr in panel_queries() if not query(expr)]
    if empty:
        fail("panel queries without data:\n  " + "\n  ".join(empty))

    def rules_evaluated():
        groups = json.loads(http("GET", f"{url}/api/v1/rules"))["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        return rules if rules and all(r.get("health") != "unknown" for r in rules) else None

    rules = wait_until(60, "every rule evaluated once", rules_evaluated)
    bad = [f"{r['name']}: {r.get('health')} {r.get('lastError', '')}" for r in rules
           if r.get("health") != "ok"]
    if bad:
        fail("rules not healthy:\n  " + "\n  ".join(bad))
    print(f"observability_check: {len(panel_queries())} panel queries return data, "
          f"{len(rules)} rules healthy")


def main(argv):
    if len(argv) >= 2 and argv[1] == "rules":
        return check_rules()
    if len(argv) == 3 and argv[1] == "dashboard":
        return check_dashboard(argv[2])
    if len(argv) == 2 and argv[1] == "queries":
        for _, expr in panel_queries():
            print(json.dumps(expr))
        return None
    if len(argv) == 3 and argv[1] == "prometheus":
        return check_prometheus(argv[2].rstrip("/"))
    print(__doc__, file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
    main(sys.argv)
