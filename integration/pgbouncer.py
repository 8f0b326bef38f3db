"""Four `serve` replicas on one database through one pgbouncer in transaction mode (`DATABASE_POOLER=transaction`),
with a server pool smaller than the replicas' connections, behind HAProxy; mixed writes run while every replica in turn
is restarted (SIGTERM, drain, start again).

Checks: every request answered 2xx (no error through the restarts), every acknowledged write is stored (installations,
consent decisions, the latest token of every installation, topic subscriptions), pgbouncer never opened more server
connections than its pool while clients queued for them, each SIGTERM'd replica exited 0, the jobs ran through the
pooler (audit entries chained) and no replica logged an error. Migrations and the CLI go through the pooler too.
Bounded: about 40 s of load, 120 s overall.

Needs TEST_DATABASE_URL (scripts/test.sh sets it), pgbouncer, haproxy and a debug build of token-registry.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

from harness import ADMIN, BIN, Database, check, free_port, psql, request, start_haproxy, summary, wait_ready

DB = Database("pgbouncer")
POOL = 6            # pgbouncer's server connections for the database
REPLICAS = 4
DB_POOL_SIZE = 8    # each replica's connections to pgbouncer: 32 clients for 6 servers
PROJECT = "pooler-test"


def start_pgbouncer(workdir):
    """pgbouncer on a Unix socket in `workdir` in front of the test cluster; returns (process, socket dir, port)."""
    # The socket takes anyone (auth_type trust) to the cluster's superuser: only pgbouncer's user may reach it (root,
    # which runs this test, passes the directory's permissions regardless).
    os.chmod(workdir, 0o700)
    if os.getuid() == 0:
        import pwd
        postgres = pwd.getpwnam("postgres")
        os.chown(workdir, postgres.pw_uid, postgres.pw_gid)
    upstream = " ".join(p for p in ADMIN.split() if p.startswith(("host=", "port=")))
    user = next((p[5:] for p in ADMIN.split() if p.startswith("user=")), "postgres")
    port = 6432
    with open(os.path.join(workdir, "users.txt"), "w") as f:
        f.write(f'"{user}" ""\n')
    config = os.path.join(workdir, "pgbouncer.ini")
    with open(config, "w") as f:
        f.write(f"""[databases]
* = {upstream}
[pgbouncer]
listen_addr =
unix_socket_dir = {workdir}
listen_port = {port}
auth_type = trust
auth_file = {workdir}/users.txt
admin_users = {user}
pool_mode = transaction
default_pool_size = {POOL}
max_client_conn = 1000
logfile = {workdir}/pgbouncer.log
""")
    command = ["/usr/sbin/pgbouncer", config]
    if os.getuid() == 0:  # pgbouncer refuses root; the cluster's own user runs it
        command = ["runuser", "-u", "postgres", "--"] + command
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return process, workdir, port


def stat_total(admin, column):
    """The column of pgbouncer's SHOW STATS for the test database (cumulative since pgbouncer started)."""
    out = subprocess.run(["psql", admin, "-AF|", "-c", "SHOW STATS"], capture_output=True, text=True).stdout
    lines = [l.split("|") for l in out.splitlines() if "|" in l]
    if not lines or column not in lines[0]:
        return 0
    header = lines[0]
    return sum(int(row[header.index(column)]) for row in lines[1:]
               if len(row) == len(header) and row[header.index("database")] == DB.name)


def main():
    DB.create()
    workdir = tempfile.mkdtemp(prefix="pgbouncer-")
    bouncer, socket_dir, bouncer_port = start_pgbouncer(workdir)
    url = " ".join([f"host={socket_dir}", f"port={bouncer_port}"] +
                   [p for p in DB.url.split() if not p.startswith(("host=", "port="))])
    admin = f"host={socket_dir} port={bouncer_port} dbname=pgbouncer user=postgres"
    pooled = {**os.environ, "DATABASE_URL": url, "DATABASE_POOLER": "transaction"}

    def cli(*args):
        out = subprocess.run([BIN, *args], env=pooled, check=True, capture_output=True, text=True)
        return json.loads(out.stdout)

    replicas, logs, haproxy = {}, {}, None
    try:
        for _ in range(50):
            if subprocess.run(["psql", admin, "-Atqc", "SHOW VERSION"], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        cli("migrate")
        check("migrations ran through pgbouncer", DB.psql("SELECT max(version) FROM schema_migrations") != "")
        project = cli("project", "create", "--id", PROJECT, "--number", "6432")
        app = cli("app", "create", "--project", PROJECT, "--platform", "android")
        server = {"Authorization": "Bearer " + project["serverKey"]}
        ports = [free_port() for _ in range(REPLICAS)]

        def start(port):
            logs[port] = os.path.join(workdir, f"replica-{port}.log")
            log = open(logs[port], "a")
            env = {**pooled, "PORT": str(port), "HOST": "127.0.0.1", "LOG_LEVEL": "warning",
                   "DB_POOL_SIZE": str(DB_POOL_SIZE), "DRAIN_TIMEOUT_SECONDS": "5", "JOBS_INTERVAL_SECONDS": "1",
                   "RATE_LIMIT_CREATE_PER_ADDRESS": "0", "RATE_LIMIT_CREATE_PER_KEY": "0"}
            replicas[port] = subprocess.Popen([BIN, "serve"], env=env, stdout=log, stderr=log)

        for port in ports:
            start(port)
        lb_port = free_port()
        haproxy = start_haproxy(workdir, lb_port, [f"127.0.0.1:{p}" for p in ports])
        check(f"{REPLICAS} replicas become ready through pgbouncer", all(wait_ready(p) for p in ports))
        check("HAProxy serves", wait_ready(lb_port))
        base = f"http://127.0.0.1:{lb_port}/v1/projects/{PROJECT}"

        lock = threading.Lock()
        outcomes, fids, consents, tokens, topics = [], [], [], {}, []
        stop = threading.Event()

        def record(what, status):
            with lock:
                outcomes.append((what, status))
            return status is not None and 200 <= status < 300

        def worker(n):
            i = 0
            while not stop.is_set():
                i += 1
                status, body = request("POST", f"{base}/installations", {"appId": app["appId"], "fid": ""},
                                       {"x-goog-api-key": app["apiKey"]})
                if not record("create", status):
                    continue
                fid = body["fid"]
                with lock:
                    fids.append(fid)
                granted = i % 4 != 0
                if record("consent", request("PUT", f"{base}/installations/{fid}/consent",
                                             {"autoInitEnabled": granted, "source": f"w{n}"}, server)[0]):
                    with lock:
                        consents.append((fid, granted))
                if not granted:
                    continue
                for r in range(2):
                    token = f"{fid}:t{r}-{n}-{i}"
                    if record("refresh", request("PUT", f"{base}/installations/{fid}/registration",
                                                 {"token": token, "platform": "android"}, server)[0]):
                        with lock:
                            tokens[fid] = token
                topic = f"t{i % 5}"
                if record("subscribe", request("POST", f"{base}/registrations/{fid}/topicSubscriptions?topicName={topic}",
                                               None, server)[0]):
                    with lock:
                        topics.append((fid, topic))

        server_peak, waiting_peak = [0], [0]

        def watch_pool():
            while not stop.is_set():
                out = subprocess.run(["psql", admin, "-AF|", "-c", "SHOW POOLS"], capture_output=True, text=True).stdout
                lines = [l.split("|") for l in out.splitlines() if "|" in l]
                if lines:
                    header = lines[0]
                    for row in lines[1:]:
                        if len(row) == len(header) and row[header.index("database")] == DB.name:
                            get = lambda c: int(row[header.index(c)]) if c in header else 0
                            servers = sum(get(c) for c in ("sv_active", "sv_idle", "sv_used", "sv_tested", "sv_login"))
                            server_peak[0] = max(server_peak[0], servers)
                            waiting_peak[0] = max(waiting_peak[0], get("cl_waiting"))
                time.sleep(0.2)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(12)] + [threading.Thread(target=watch_pool)]
        started = time.time()
        for t in threads:
            t.start()
        time.sleep(4)
        exits = []
        for port in ports:  # the rolling restart: one at a time, the next once this one serves again
            replicas[port].send_signal(signal.SIGTERM)
            try:
                exits.append(replicas[port].wait(timeout=20))
            except subprocess.TimeoutExpired:
                exits.append(None)
            start(port)
            wait_ready(port)
            time.sleep(3)  # HAProxy's health check takes it back (rise 2 × 300 ms) and it serves a while
        time.sleep(3)
        stop.set()
        for t in threads:
            t.join()
        elapsed = time.time() - started

        statuses = [s for _, s in outcomes]
        bad = [(w, s) for w, s in outcomes if not (s is not None and 200 <= s < 300)]
        counts = {w: sum(1 for x, _ in outcomes if x == w) for w in ("create", "consent", "refresh", "subscribe")}
        print(f"requests: {len(statuses)} in {elapsed:.1f} s ({counts}); not 2xx: {len(bad)}; "
              f"pgbouncer: at most {server_peak[0]} server connections, at most {waiting_peak[0]} clients waiting")
        check("every request answered 2xx through the rolling restart", not bad, f"{bad[:10]}")
        check("the load ran through the restarts", counts["refresh"] > 200, f"{counts}")
        check("each SIGTERM'd replica drained and exited 0", exits == [0] * REPLICAS, f"{exits}")
        check(f"pgbouncer kept to its {POOL} server connections", 0 < server_peak[0] <= POOL, f"{server_peak[0]}")
        # A sample of cl_waiting every 200 ms can miss waits of a few milliseconds; SHOW STATS counts every one.
        waited = stat_total(admin, "total_wait_time")
        check("clients queued for pgbouncer's servers (the pool was the bottleneck)", waited > 0 or waiting_peak[0] > 0,
              f"total_wait_time {waited} µs, peak cl_waiting {waiting_peak[0]}")

        stored = set(DB.psql(f"SELECT fid FROM installations WHERE project_id = '{PROJECT}'").split())
        check(f"all {len(fids)} acknowledged installations are stored", all(f in stored for f in fids))
        ledger = set(tuple(l.split("|")) for l in DB.psql(
            f"SELECT fid, granted FROM consent_events WHERE project_id = '{PROJECT}' AND actor = 'server'").splitlines())
        lost = [c for c in consents if (c[0], "t" if c[1] else "f") not in ledger]
        check(f"all {len(consents)} acknowledged consent decisions are in the ledger", not lost, f"{lost[:5]}")
        current = dict(tuple(l.split("|")) for l in DB.psql(
            f"SELECT fid, token FROM registrations WHERE project_id = '{PROJECT}'").splitlines())
        stale = [f for f, t in tokens.items() if current.get(f) != t]
        check(f"every installation's last acknowledged token of {len(tokens)} is its token", not stale, f"{stale[:5]}")
        subscribed = set(tuple(l.split("|")) for l in DB.psql(
            f"SELECT fid, topic FROM topic_subscriptions WHERE project_id = '{PROJECT}'").splitlines())
        missing = [s for s in topics if s not in subscribed]
        check(f"all {len(topics)} acknowledged subscriptions are stored", not missing, f"{missing[:5]}")

        deadline = time.time() + 15
        chained = 0
        while time.time() < deadline:
            chained = int(DB.psql(f"SELECT coalesce(max(head_seq), 0) FROM audit_chains WHERE project_id = '{PROJECT}'"))
            if chained > 0:
                break
            time.sleep(0.5)
        check("the jobs ran through the pooler (the audit log was chained)", chained > 0)
        errors = []
        for path in logs.values():
            with open(path) as f:
                errors += [l for l in f if '"level":"error"' in l]
        check("no replica logged an error", not errors, "".join(errors[:3]))
    finally:
        if haproxy:
            haproxy.kill()
        for p in replicas.values():
            if p.poll() is None:
                p.kill()
        bouncer.terminate()
        try:
            bouncer.wait(timeout=5)
        except subprocess.TimeoutExpired:
            bouncer.kill()
        DB.drop()
    return summary("pgbouncer")


if __name__ == "__main__":
    sys.exit(main())
