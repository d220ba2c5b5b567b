# shellcheck shell=bash
# The fleet scenario's Prometheus proof (issue 31): a real Prometheus (Debian's `prometheus`)
# scrapes the scenario's extender every second and loads deploy/prometheus/toposched-rules.yaml;
# then every panel query of deploy/grafana/toposched-dashboard.json must return data and every
# alerting rule must be evaluated without error (test/observability_check.py prometheus).
#
# Sourced after lib.sh by a scenario whose extender serves on 127.0.0.1:$EXT_PORT (e2e_extender)
# and has answered kube-scheduler (bound pods, a pending one): call fleet_check_prometheus there.
# FLEET_EXT_SCHEME=https when the extender serves TLS (/metrics needs no client certificate).
# Prometheus listens on 127.0.0.1:$((E2E_PORT_BASE + 90)), keeps its data in $W, and is stopped by
# lib.sh's teardown (it is started with `start`).

fleet_check_prometheus() {
  command -v prometheus >/dev/null ||
    die "no prometheus binary: scripts/install-deps.sh installs Debian's prometheus package"
  local port=$((E2E_PORT_BASE + 90)) scheme="${FLEET_EXT_SCHEME:-http}"
  port_free "$port" || die "127.0.0.1:$port (Prometheus) is in use (set TOPOSCHED_E2E_PORT_BASE)"
  PROM_URL="http://127.0.0.1:$port"
  cat >"$W/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $E2E_REPO/deploy/prometheus/toposched-rules.yaml
scrape_configs:
  - job_name: toposched-extender
    scheme: $scheme
    tls_config: {insecure_skip_verify: true}
    static_configs:
      - targets: ["127.0.0.1:$EXT_PORT"]
EOF
  start prometheus "$W/prometheus.log" prometheus --config.file "$W/prometheus.yml" \
    --storage.tsdb.path "$W/prometheus-data" --web.listen-address "127.0.0.1:$port"
  wait_for 60 "Prometheus ready" curl -sf "$PROM_URL/-/ready"
  # Scraped: the fleet gauges (the extender's first sample) and the verbs' counters at least
  # twice each, so every rate() over the panels' window has two points.
  wait_for 90 "Prometheus to scrape the extender's fleet gauges and verbs twice" \
    fleet_prom_has 'count_over_time(toposched_fleet_sample_timestamp_seconds[1m]) >= 2 and max_over_time(toposched_fleet_sample_timestamp_seconds[1m]) > 0'
  wait_for 60 "Prometheus to scrape filter and bind counts twice" \
    fleet_prom_has 'count_over_time(toposched_extender_requests_total{verb="bind"}[1m]) >= 2'
  python3 "$E2E_REPO/test/observability_check.py" prometheus "$PROM_URL" >&2 ||
    die "the dashboard's queries or the alerting rules failed against a real Prometheus"
  pass "Prometheus $PROM_URL: every dashboard panel's query returns data, every alerting rule is healthy"
}

# fleet_prom_has EXPR: the instant query EXPR returns at least one series.
fleet_prom_has() {
  curl -sf "$PROM_URL/api/v1/query" --data-urlencode "query=$1" |
    python3 -c 'import json, sys; sys.exit(0 if json.load(sys.stdin)["data"]["result"] else 1)'
}
