"""A real Prometheus (Debian's `prometheus`) scrapes a running service and evaluates deploy/prometheus/alerts.yml,
with every `for:` cut to 0s, while the test makes a linked service refuse every notice and a deletion overdue
(`jobs run --now`, 181 days on). The alerts must fire, read from Prometheus's own API. And every metric name the
rules and the Grafana dashboard use must be one the service exports (or a recording rule's). Loopback only, about
half a minute."""
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

import yaml

from harness import BIN, ROOT, Database, check, free_port, summary, wait_ready

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
TOKEN = "prometheus-test-metrics-token"


TRACEPARENTS = []


class Refusing(http.server.BaseHTTPRequestHandler):
    """A linked service that refuses every deletion notice (and notes the trace each one carries)."""

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length") or 0))
        TRACEPARENTS.append(self.headers.get("traceparent"))
        self.send_response(500)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def metric_names(expr):
    """The metric names an expression reads: identifiers not followed by `(` and not PromQL keywords or labels."""
    expr = re.sub(r'"[^"]*"', '""', expr)  # label values
    expr = re.sub(r"\{[^}]*\}", "{}", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "[]", expr)  # ranges
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    words = set()
    for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr):
        rest = expr[m.end():].lstrip()
        if not rest.startswith("("):  # a function call is not a metric
            words.add(m.group(0))
    keywords = {"and", "or", "unless", "by", "without", "on", "ignoring", "offset", "bool", "le", "e", "Inf", "inf"}
    return {w for w in words if w not in keywords}


def main():
    db = Database("prometheus")
    db.create()
    work = tempfile.mkdtemp(prefix="prometheus-")
    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    port, prom_port = free_port(), free_port()
    env = {
        **os.environ, "DATABASE_URL": db.url, "PORT": str(port), "HOST": "127.0.0.1", "LOG_LEVEL": "warning",
        "METRICS_TOKEN": TOKEN, "LINKED_SERVICE_ALLOW_PRIVATE": "true", "JOBS_INTERVAL_SECONDS": "1",
        "DELIVERY_BACKOFF_BASE_SECONDS": "1", "DELIVERY_BACKOFF_MAX_SECONDS": "1",
        # A read pool (here on the primary itself), so that its gauges, which the dashboard reads, are exported.
        "DATABASE_READ_URL": db.url,
    }
    service = subprocess.Popen([BIN, "serve"], env=env, stdout=open(f"{work}/service.log", "w"), stderr=subprocess.STDOUT)
    prometheus = None
    try:
        check("the service is ready", wait_ready(port))
        project = db.cli("project", "create", "--id", "prom-proj", "--number", "777")
        app = db.cli("app", "create", "--project", "prom-proj", "--platform", "web")
        base = f"http://127.0.0.1:{port}"
        server = {"Authorization": f"Bearer {project['serverKey']}", "Content-Type": "application/json"}

        def call(method, path, body=None, headers=None):
            req = urllib.request.Request(base + path, data=json.dumps(body).encode() if body is not None else None,
                                         method=method, headers=headers or server)
            with urllib.request.urlopen(req, timeout=10) as r:
                return json.loads(r.read() or b"{}")

        call("POST", "/v1/projects/prom-proj/linkedServices",
             {"name": "crm", "endpoint": f"http://127.0.0.1:{receiver.server_address[1]}/hook"})
        created = call("POST", "/v1/projects/prom-proj/installations",
                       {"appId": app["appId"], "authVersion": "FIS_v2"},
                       {"x-goog-api-key": app["apiKey"], "Content-Type": "application/json"})
        caller_trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        call("DELETE", f"/v1/project/prom-proj/instanceId/{created['fid']}", headers={**server, "traceparent": caller_trace})

        # The rules as shipped, with every `for:` at 0s so the test need not wait hours.
        rules = yaml.safe_load(open(os.path.join(ROOT, "deploy/prometheus/alerts.yml")))
        for group in rules["groups"]:
            for rule in group["rules"]:
                if "for" in rule:
                    rule["for"] = "0s"
        yaml.safe_dump(rules, open(f"{work}/alerts.yml", "w"))
        open(f"{work}/token", "w").write(TOKEN)
        yaml.safe_dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [f"{work}/alerts.yml"],
            "scrape_configs": [{
                "job_name": "token-registry", "authorization": {"credentials_file": f"{work}/token"},
                "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
            }],
        }, open(f"{work}/prometheus.yml", "w"))
        prometheus = subprocess.Popen(
            [PROMETHEUS, f"--config.file={work}/prometheus.yml", f"--storage.tsdb.path={work}/data",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=open(f"{work}/prometheus.log", "w"), stderr=subprocess.STDOUT)

        def until_firing(name, timeout=90):
            firing = set()
            deadline = time.time() + timeout
            while time.time() < deadline and name not in firing:
                time.sleep(1)
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{prom_port}/api/v1/alerts", timeout=5) as r:
                        alerts = json.loads(r.read())["data"]["alerts"]
                    firing = {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}
                except OSError:
                    continue
            check(f"Prometheus fires {name}", name in firing, f"firing: {sorted(firing)}")
            return firing

        # The linked service refuses every notice; the jobs loop retries it every second.
        firing = until_firing("TokenRegistryLinkedServiceFailing")
        # Then a deletion past its deadline: the purge, run as if 181 days later, reports the service overdue.
        later = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 181 * 86400))
        # The service's own jobs loop purges every second under the same lock; a purge that finds it taken does
        # nothing (another replica is purging), so the run is repeated until the deletion is reported overdue.
        for _ in range(20):
            subprocess.run([BIN, "jobs", "run", "--now", later], env={**os.environ, "DATABASE_URL": db.url},
                           check=True, capture_output=True, timeout=60)
            req = urllib.request.Request(f"{base}/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
            if 'registry_deletions{state="overdue"} 1' in urllib.request.urlopen(req, timeout=10).read().decode():
                break
            time.sleep(0.5)
        # The request's trace reached the linked service, through the deletion stored in PostgreSQL.
        check("the deletion's notices carry the request's trace",
              bool(TRACEPARENTS) and all(t and t.startswith("00-0af7651916cd43dd8448eb211c80319c-") for t in TRACEPARENTS),
              f"{TRACEPARENTS[:3]}")
        firing |= until_firing("TokenRegistryDeletionOverdue")
        expected = {"TokenRegistryLinkedServiceFailing", "TokenRegistryDeletionOverdue"}
        check("no alert fires that should not", not (firing - expected), f"firing: {sorted(firing)}")
        with urllib.request.urlopen(
                f"http://127.0.0.1:{prom_port}/api/v1/query?query=up%7Bjob%3D%22token-registry%22%7D", timeout=5) as r:
            up = json.loads(r.read())["data"]["result"]
        check("Prometheus scrapes the service with the metrics token", up and up[0]["value"][1] == "1", f"{up}")

        # Every metric name of the rules and the dashboard is exported (or a recording rule's, or Prometheus's own).
        req = urllib.request.Request(f"{base}/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        scrape = urllib.request.urlopen(req, timeout=10).read().decode()
        types = dict(re.findall(r"^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) ([a-z]+)", scrape, re.M))
        exported = set(types) | {n + s for n, t in types.items() if t == "histogram" for s in ("_bucket", "_sum", "_count")}
        recorded = {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
        known = exported | recorded | {"up"}
        exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
        dashboard = json.load(open(os.path.join(ROOT, "deploy/grafana/token-registry.json")))
        exprs += [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
        unknown = sorted({n for e in exprs for n in metric_names(e)} - known)
        check("every metric the rules and the dashboard read is exported", not unknown, f"unknown: {unknown}")
        # And every dashboard expression evaluates in this Prometheus.
        failed = []
        for expr in [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]:
            query = urllib.parse.urlencode({"query": expr})
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{prom_port}/api/v1/query?{query}", timeout=5) as r:
                    if json.loads(r.read()).get("status") != "success":
                        failed.append(expr)
            except OSError as e:
                failed.append(f"{expr}: {e}")
        check("every dashboard expression evaluates", not failed, f"{failed[:3]}")
        check("the dashboard is Grafana 10+ JSON with a Prometheus data source",
              dashboard.get("schemaVersion", 0) >= 38 and all(
                  p["datasource"]["type"] == "prometheus" for p in dashboard["panels"]))
    finally:
        for process in (prometheus, service):
            if process:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
        receiver.shutdown()
        db.drop()
        shutil.rmtree(work, ignore_errors=True)
    return summary("prometheus")


if __name__ == "__main__":
    sys.exit(main())
