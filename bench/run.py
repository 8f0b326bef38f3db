#!/usr/bin/env python3
"""Every workload beside its reference, at each concurrency, in one run; called by bench/run.sh, which starts the
service, nginx, PostgreSQL and the fcm-django peer and passes their pids and ports in the environment.

Prints one table per concurrency (req/s, p50/p99, CPU per request of the service, of PostgreSQL and of the peer, and
the ratio to the reference) and writes the same tables, with versions and the command, into docs/benchmarks.md
between the markers of the "bench/run.sh" section.
"""
import glob
import http.client
import http.server
import json
import os
import re
import resource
import subprocess
import sys
import threading
import time

E = os.environ
WORK, BENCH = E["WORK"], E["BENCH_DIR"]
PORT, NGINX_PORT, PEER_PORT = int(E["SERVICE_PORT"]), int(E["NGINX_PORT"]), int(E.get("PEER_PORT") or 0)
PGURL, BIN = E["PGURL"], E["BIN"]
DURATION = int(E.get("DURATION", "5"))
LEVELS = [int(c) for c in E.get("CONCURRENCY", "16 64 256").split()]
TICK = os.sysconf("SC_CLK_TCK")
PROJECT = "bench-proj"


def sh(*argv, **kw):
    done = subprocess.run(argv, capture_output=True, text=True, **kw)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:3])} … failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return done.stdout


def psql(sql):
    return sh("psql", PGURL, "-qAtX", "-v", "ON_ERROR_STOP=1", "-c", sql)


def request(method, path, body=None, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=30)
    c.request(method, path, body=json.dumps(body) if body is not None else None,
              headers={"Content-Type": "application/json", **(headers or {})})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, (json.loads(data) if data else None)


# --- CPU accounting: utime + stime of a process and every descendant, in ticks

def children_map():
    kids = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            fields = open(stat).read().rsplit(")", 1)[1].split()
            kids.setdefault(int(fields[1]), []).append(int(stat.split("/")[2]))
        except (OSError, IndexError):
            pass
    return kids


def ticks(root):
    if not root:
        return 0
    kids, total, todo = children_map(), 0, [root]
    while todo:
        pid = todo.pop()
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            # Own time, and that of children already reaped (PostgreSQL backends of pgbench's ended sessions).
            total += int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
        except (OSError, IndexError):
            continue
        todo += kids.get(pid, [])
    return total


def postmaster():
    for f in glob.glob(f"{WORK}/pg/data/postmaster.pid"):
        return int(open(f).readline())
    return 0


GROUPS = {"service": int(E["SERVICE_PID"]), "postgres": postmaster(), "peer": int(E.get("PEER_PID") or 0),
          "nginx": int(E.get("NGINX_PID") or 0)}


def reaped_cpu_ms():
    """User + system time of this script's reaped children: the load generator (wrk, or pgbench's client) that the
    last subprocess.run waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (usage.ru_utime + usage.ru_stime) * 1000


# --- load generators

def wrk(name, conns, url, script, env=None, args=()):
    before = {g: ticks(p) for g, p in GROUPS.items()}
    load_before = reaped_cpu_ms()
    out = subprocess.run(["wrk", "-t2", f"-c{conns}", f"-d{DURATION}s", "--latency", "-s", script, url, *args],
                         capture_output=True, text=True, env={**E, **(env or {})}).stdout
    after = {g: ticks(p) for g, p in GROUPS.items()}
    load = reaped_cpu_ms() - load_before
    open(f"{WORK}/run-{name}-c{conns}.wrk", "w").write(out)
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    done = int(re.search(r"(\d+) requests in", out).group(1))

    def pct(p):
        m = re.search(rf"^\s+{p}%\s+([\d.]+)(us|ms|s)", out, re.M)
        return float(m.group(1)) * {"us": 0.001, "ms": 1, "s": 1000}[m.group(2)] if m else float("nan")

    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = int(bad.group(1)) if bad else 0
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    errors += sum(map(int, sock.groups())) if sock else 0
    cpu = {g: (after[g] - before[g]) * 1000 / TICK / max(done, 1) for g in GROUPS}
    cpu["load"] = load / max(done, 1)
    # wrk keeps one request in flight per connection, so by Little's law its mean latency is at most conns / rps. A
    # mean well above that (seen in some runs here) means its latency figures for the run are not per request.
    m = re.search(r"Latency\s+([\d.]+)(us|ms|s)", out)
    mean = float(m.group(1)) * {"us": 0.001, "ms": 1, "s": 1000}[m.group(2)] if m else float("nan")
    bound = conns / rps * 1000 if rps else float("nan")
    little = (mean, bound) if mean > 1.25 * bound + 0.5 else None
    return {"name": name, "rps": rps, "p50": pct(50), "p99": pct(99), "errors": errors, "cpu": cpu, "little": little}


def pgbench(name, conns, script, defines=()):
    before = ticks(GROUPS["postgres"])
    load_before = reaped_cpu_ms()
    argv = ["pgbench", "-n", "-c", str(conns), "-j", "2", "-T", str(DURATION), "-M", "prepared", "-f", script]
    for d in defines:
        argv += ["-D", d]
    out = subprocess.run(argv + [PGURL], capture_output=True, text=True)
    open(f"{WORK}/run-{name}-c{conns}.pgbench", "w").write(out.stdout + out.stderr)
    m = re.search(r"tps = ([\d.]+)", out.stdout)
    if not m:
        return {"name": name, "rps": float("nan"), "p50": float("nan"), "p99": float("nan"), "errors": -1, "cpu": {}}
    done = int(re.search(r"number of transactions actually processed: (\d+)", out.stdout).group(1))
    avg = float(re.search(r"latency average = ([\d.]+) ms", out.stdout).group(1))
    cpu = {"postgres": (ticks(GROUPS["postgres"]) - before) * 1000 / TICK / max(done, 1),
           "load": (reaped_cpu_ms() - load_before) / max(done, 1)}
    return {"name": name, "rps": float(m.group(1)), "p50": avg, "p99": float("nan"), "errors": 0, "cpu": cpu}


# --- fixtures

class Receiver(http.server.BaseHTTPRequestHandler):
    """A linked service that takes every deletion notice (answers 200)."""
    received = 0

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        Receiver.received += 1
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


def fixtures():
    project = json.loads(sh(BIN, "project", "create", "--id", PROJECT, "--number", "4242", env={**E, "DATABASE_URL": PGURL}))
    android = json.loads(sh(BIN, "app", "create", "--project", PROJECT, "--platform", "android",
                            "--bundle-id", "com.example.bench", env={**E, "DATABASE_URL": PGURL}))
    web = json.loads(sh(BIN, "app", "create", "--project", PROJECT, "--platform", "web", env={**E, "DATABASE_URL": PGURL}))
    f = {"server": project["serverKey"], "android": android["appId"], "web": web["appId"], "apiKey": web["apiKey"]}
    # 1000 installations with consent for the callbacks, as the other bench scripts make them.
    psql(f"""
        INSERT INTO installations (project_id, fid, app_id, refresh_token_hash, created_at, last_seen_at)
          SELECT '{PROJECT}', 'f' || lpad(n::text, 21, '0'), '{f["android"]}', '\\x00', now(), now()
          FROM generate_series(1, 1000) AS n;
        INSERT INTO consents (project_id, fid, purpose, granted, actor, updated_at)
          SELECT '{PROJECT}', fid, 'messaging', true, 'default', now() FROM installations WHERE project_id = '{PROJECT}';
        INSERT INTO registrations (project_id, fid, token, platform, created_at, refreshed_at)
          SELECT '{PROJECT}', fid, fid || ':seed', 'android', now(), now() FROM installations WHERE project_id = '{PROJECT}';
        ANALYZE;""")
    # 1000 installations made by the SDK route, with their auth tokens, for consent changes and registrations.
    lines = []
    for _ in range(1000):
        status, body = request("POST", f"/v1/projects/{PROJECT}/installations",
                               {"fid": "", "appId": f["android"], "authVersion": "FIS_v2", "sdkVersion": "a:17.2.0"},
                               {"x-goog-api-key": android["apiKey"]})
        assert status == 200, (status, body)
        lines.append(f'{body["fid"]} {body["authToken"]["token"]}')
    open(f"{WORK}/installations.txt", "w").write("\n".join(lines) + "\n")
    f["fid"], f["refresh"] = body["fid"], body["refreshToken"]
    # A linked service on loopback that hears of every deletion.
    # A listen backlog of 5 (http.server's default) drops the SYNs of 16 concurrent deliveries while this process is
    # busy, and each dropped SYN costs the delivery a 1 s retransmit: the fan-out then measured the receiver.
    http.server.ThreadingHTTPServer.request_queue_size = 256
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    status, body = request("POST", f"/v1/projects/{PROJECT}/linkedServices",
                           {"name": "bench-receiver", "endpoint": f"http://127.0.0.1:{server.server_address[1]}/hook"},
                           {"Authorization": f"Bearer {f['server']}"})
    assert status == 200, (status, body)
    f["androidKey"] = android["apiKey"]
    return f


def deletions_pending(f):
    status, body = request("GET", f"/v1/projects/{PROJECT}/deletions?state=pending&pageSize=1",
                           headers={"Authorization": f"Bearer {f['server']}"})
    return bool(body.get("deletions"))


def level(c, f):
    """Every workload at c connections; each row with the row it is compared to."""
    url = f"http://127.0.0.1:{PORT}"
    rows = []
    rows.append((wrk("healthz", c, f"{url}/healthz", f"{BENCH}/wrk/get.lua"), "nginx"))
    rows.append((wrk("nginx", c, f"http://127.0.0.1:{NGINX_PORT}/", f"{BENCH}/wrk/get.lua"), None))
    rows.append((wrk("refresh callback", c, url, f"{BENCH}/wrk/refresh_callback.lua", {"SERVER_KEY": f["server"]}),
                 "pgbench same SQL"))
    rows.append((pgbench("pgbench same SQL", c, f"{BENCH}/pgbench/refresh_callback.sql"), None))
    rows.append((pgbench("pgbench upsert", c, f"{BENCH}/pgbench/registration_upsert.sql"), None))
    if PEER_PORT:
        rows.append((wrk("fcm-django register", c, f"http://127.0.0.1:{PEER_PORT}", E["PEER_LUA"],
                       args=("--", "new", "fcm", "/devices/", "-", "-", "peer")), None))
    rows.append((wrk("create installation", c, f"{url}/v1/projects/{PROJECT}/installations",
                   f"{BENCH}/wrk/create_installation.lua", {"APP_ID": f["web"], "API_KEY": f["apiKey"]}),
                 "pgbench create"))
    rows.append((pgbench("pgbench create", c, f"{BENCH}/pgbench/create_installation.sql", (f"app_id={f['web']}",)),
                 None))
    rows.append((wrk("auth token", c, f"{url}/v1/projects/{PROJECT}/installations/{f['fid']}/authTokens:generate",
                   f"{BENCH}/wrk/generate_token.lua", {"REFRESH": f["refresh"]}), "pgbench PK look-up"))
    rows.append((pgbench("pgbench PK look-up", c, f"{BENCH}/pgbench/generate_token.sql", (f"fid={f['fid']}",)), None))
    env = {"INSTALLATIONS": f"{WORK}/installations.txt", "SERVER_KEY": f["server"], "PROJECT": PROJECT}
    # Registrations need messaging consent: the consent workload (which turns it off at random) comes after.
    psql(f"UPDATE consents SET granted = true WHERE project_id = '{PROJECT}' AND purpose = 'messaging'")
    rows.append((wrk("client registration", c, url, f"{BENCH}/wrk/with_installations.lua",
                   {**env, "WORKLOAD": "register"}), "pgbench upsert"))
    rows.append((wrk("topic subscribe", c, url, f"{BENCH}/wrk/with_installations.lua",
                   {**env, "WORKLOAD": "subscribe"}), "pgbench upsert"))
    rows.append((wrk("consent change", c, url, f"{BENCH}/wrk/with_installations.lua", {**env, "WORKLOAD": "consent"}),
                 "pgbench upsert"))
    rows.append((wrk("batchAdd 1000 tokens", c, f"{url}/iid/v1:batchAdd", f"{BENCH}/wrk/batch_add.lua",
                   {"SERVER_KEY": f["server"], "BODY_FILE": f"{WORK}/batch.json"}), None))
    # Deletions: a fresh set of installations per level, each deleted once, then the wait for every notice.
    psql(f"""INSERT INTO installations (project_id, fid, app_id, refresh_token_hash, created_at, last_seen_at)
             SELECT '{PROJECT}', 'd{c:03d}' || lpad(n::text, 18, '0'), '{f['android']}', '\\x00', now(), now()
             FROM generate_series(1, 40000) AS n""")
    open(f"{WORK}/deletions.txt", "w").write(
        # FIDs are 22 characters: "d", the level in three digits, then eighteen.
        "".join(f"d{c:03d}{n:018d} -\n" for n in range(1, 40001)))
    started = Receiver.received
    row = wrk("delete installation", c, url, f"{BENCH}/wrk/with_installations.lua",
            {**env, "WORKLOAD": "delete", "INSTALLATIONS": f"{WORK}/deletions.txt"})
    ended = time.time()
    while deletions_pending(f) and time.time() - ended < 120:
        time.sleep(0.2)
    row["fanout_s"] = time.time() - ended
    row["fanout_done"] = not deletions_pending(f)
    row["notices"] = Receiver.received - started
    # More notices than deletions means retries: say which failures caused them.
    print("deliveries (attempts|state|last error|count) and deletions (reason|FID prefix|count):", flush=True)
    print(psql("""SELECT attempts, state, coalesce(left(last_error, 80), '-'), count(*) FROM deletion_deliveries
                  GROUP BY 1, 2, 3 ORDER BY 4 DESC LIMIT 6"""), flush=True)
    print(psql("SELECT reason, left(fid, 4), count(*) FROM deletions GROUP BY 1, 2 ORDER BY 3 DESC LIMIT 6"), flush=True)
    rows.append((row, None))
    return rows


def fmt(x, digits=0):
    return "–" if x != x else f"{x:,.{digits}f}"


def table(c, rows):
    by = {r["name"]: r for r, _ in rows}
    out = [f"### c = {c}", "",
           "| workload | req/s | p50 ms | p99 ms | errors | CPU µs/req: service | PostgreSQL | reference (nginx, peer) "
           "| load generator | compared with | ratio |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r, ref in rows:
        cpu = r["cpu"]
        ratio = f"{r['rps'] / by[ref]['rps']:.2f}×" if ref in by and by[ref]["rps"] == by[ref]["rps"] else ""
        extra = ""
        if "fanout_s" in r:
            done = "every notice delivered" if r["fanout_done"] else "NOT every notice delivered (gave up)"
            extra = f" ({r['notices']:,} notices; {done} {r['fanout_s']:.1f} s after the last delete)"
        if r["name"].startswith("batchAdd"):
            extra = f" (= {r['rps'] * 1000:,.0f} subscriptions/s)"
        mark = " †" if r.get("little") else ""
        # Each side's CPU a request: the service's own rows, the reference's (nginx for its row, the peer for its).
        us = lambda key: fmt(cpu.get(key, float("nan")) * 1000, 1)
        own = r["name"] in ("nginx", "fcm-django register") or r["name"].startswith("pgbench")
        reference = us("nginx") if r["name"] == "nginx" else us("peer") if r["name"] == "fcm-django register" else "–"
        out.append(
            f"| {r['name']}{extra} | {fmt(r['rps'])} | {fmt(r['p50'], 2)} | {fmt(r['p99'], 2)}{mark} | {r['errors']} | "
            f"{'–' if own else us('service')} | {us('postgres')} | {reference} | {us('load')} | {ref or ''} | {ratio} |")
    for r, _ in rows:
        if r.get("little"):
            mean, bound = r["little"]
            out.append(f"\n† {r['name']}: wrk's mean latency, {mean:.1f} ms, is above what {c} connections allow at "
                       f"{r['rps']:,.0f} req/s ({bound:.1f} ms, Little's law): its latency figures for this run are "
                       "not per request (the service's request log has each request's duration).")
    return "\n".join(out + budget(rows) + cpu_targets(rows))


# The targets at c=64: (workload, reference, ratio).
TARGETS = [("refresh callback", "pgbench same SQL", 1.5), ("refresh callback", "fcm-django register", 20.0),
           ("create installation", "pgbench create", 1.0), ("auth token", "pgbench PK look-up", 0.5),
           ("healthz", "nginx", 0.7)]


# The CPU targets of #30: (workload, which side, target in µs a request).
CPU_TARGETS = [("refresh callback", "service", 35), ("create installation", "service", 50), ("auth token", "service", 50),
               ("healthz", "service", 6), ("refresh callback", "postgres", 80)]


def cpu_targets(rows):
    """Each CPU target beside this run's figure, and the service's /healthz beside nginx's on the same machine (the
    issue's 6 µs was nginx's there)."""
    by = {r["name"]: r for r, _ in rows}
    out = ["", "CPU a request against the targets (µs):", "", "| workload | side | now | target | nginx, same run |",
           "|---|---|---|---|---|"]
    for name, side, target in CPU_TARGETS:
        if name in by:
            nginx = f"{by['nginx']['cpu'].get('nginx', float('nan')) * 1000:.1f}" if name == "healthz" and "nginx" in by else ""
            out.append(f"| {name} | {side} | {by[name]['cpu'].get(side, float('nan')) * 1000:.1f} | ≤ {target} | {nginx} |")
    return out


def budget(rows):
    """What each ratio target leaves the service: at the target's rate, the machine's cores give every request
    cores ÷ rate of CPU; PostgreSQL's share (as measured for the service's own requests) and the load generator's are
    spent whatever the service does. The rest is the most the service may spend on a request."""
    by = {r["name"]: r for r, _ in rows}
    cores = os.cpu_count() or 1
    out = ["", f"CPU budget of each target on this machine ({cores} cores, everything on them), in ms a request:", "",
           "| target | rate needed | budget | PostgreSQL | load generator | left for the service | service now |",
           "|---|---|---|---|---|---|---|"]
    for name, ref, ratio in TARGETS:
        if name not in by or ref not in by or by[ref]["rps"] != by[ref]["rps"]:
            continue
        r, needed = by[name], ratio * by[ref]["rps"]
        total = cores * 1000 / needed
        pg, load, service = (r["cpu"].get(k, 0.0) for k in ("postgres", "load", "service"))
        left = total - pg - load
        out.append(f"| {name} ≥ {ratio:g}× {ref} | {needed:,.0f}/s | {total:.3f} | {pg:.3f} | {load:.3f} | "
                   f"{left:.3f}{' (none)' if left <= 0 else ''} | {service:.3f} |")
    return out if len(out) > 5 else []


def main():
    f = fixtures()
    json.dump({"to": "/topics/batch", "registration_tokens": [f"f{n:021d}:seed" for n in range(1, 1001)]},
              open(f"{WORK}/batch.json", "w"))
    tables = []
    for c in LEVELS:
        print(f"# c={c}", flush=True)
        t = table(c, level(c, f))
        print(t + "\n", flush=True)
        tables.append(t)
    versions = E.get("VERSIONS", "")
    section = "\n".join([
        "<!-- bench/run.sh: begin (this section is rewritten by bench/run.sh) -->",
        f"## One run of `bench/run.sh` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", "",
        f"`{E.get('COMMAND', 'bash bench/run.sh')}` — wrk -t2, {DURATION} s a run; pgbench -j2 -M prepared with the same "
        "SQL; nginx with a buffered access log; the service at LOG_LEVEL=info; PostgreSQL with fsync and "
        "synchronous_commit on. CPU is user + system time of each process tree over the run, per request (the load "
        "generator's: wrk's, or pgbench's client's). "
        "Consent changes and client registrations are compared with pgbench's single-row upsert (the database's "
        "ceiling for a one-row write). The fcm-django peer registers new tokens into the same PostgreSQL. After each "
        "table, the CPU budget of each target: what the rate it needs leaves the service once PostgreSQL and the load "
        "generator have had their share.", "",
        "```", versions.strip(), "```", "", *[t + "\n" for t in tables],
        "<!-- bench/run.sh: end -->"])
    doc = os.path.join(E["REPO"], "docs", "benchmarks.md")
    text = open(doc).read()
    pattern = re.compile(r"<!-- bench/run.sh: begin.*?<!-- bench/run.sh: end -->", re.S)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip() + "\n\n" + section + "\n"
    open(doc, "w").write(text)
    print(f"written to {doc}")


if __name__ == "__main__":
    sys.exit(main())
