"""The deployment topology on loopback: PostgreSQL, three `serve` replicas and HAProxy with health checks on /readyz.

Mixed load runs through HAProxy while one replica gets SIGTERM and another SIGKILL. Checks: every request succeeded or
failed with a retryable status (502/503/504), no acknowledged write is missing afterwards, the SIGTERM'd replica
exited 0, and the remaining replica served on. Bounded: about 15 s of load, 120 s overall.

Needs TEST_DATABASE_URL (scripts/test.sh sets it), haproxy, and a debug build of token-registry.
"""
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

from harness import BIN, Database, check, free_port, request, start_haproxy, summary, wait_ready

RETRYABLE = {502, 503, 504}
DB = Database("topology")


def main():
    DB.create()
    DB.cli("migrate")
    project = DB.cli("project", "create", "--id", "topology-test", "--number", "31337")
    app = DB.cli("app", "create", "--project", "topology-test", "--platform", "web")
    server = {"Authorization": "Bearer " + project["serverKey"]}
    workdir = tempfile.mkdtemp(prefix="topology-")
    replicas, ports = [], [free_port() for _ in range(3)]
    for port in ports:
        log = open(os.path.join(workdir, f"replica-{port}.log"), "w")
        env = {**os.environ, "DATABASE_URL": DB.url, "PORT": str(port), "HOST": "127.0.0.1", "LOG_LEVEL": "warning",
               "DRAIN_TIMEOUT_SECONDS": "5", "RATE_LIMIT_CREATE_PER_ADDRESS": "0", "RATE_LIMIT_CREATE_PER_KEY": "0"}
        replicas.append(subprocess.Popen([BIN, "serve"], env=env, stdout=log, stderr=log))
    lb_port = free_port()
    haproxy = start_haproxy(workdir, lb_port, [f"127.0.0.1:{p}" for p in ports])
    try:
        check("three replicas become ready", all(wait_ready(p) for p in ports))
        base = f"http://127.0.0.1:{lb_port}"
        check("HAProxy serves", wait_ready(lb_port))
        acknowledged_fids, acknowledged_consents, outcomes, lock = [], [], [], threading.Lock()
        stop_at = time.time() + 12

        def worker(n):
            i = 0
            while time.time() < stop_at:
                i += 1
                status, body = request("POST", f"{base}/v1/projects/topology-test/installations",
                                       {"appId": app["appId"], "fid": ""}, {"x-goog-api-key": app["apiKey"]})
                with lock:
                    outcomes.append((time.time(), status))
                if status == 200:
                    fid = body["fid"]
                    with lock:
                        acknowledged_fids.append(fid)
                    granted = i % 2 == 0
                    status, _ = request("PUT", f"{base}/v1/projects/topology-test/installations/{fid}/consent",
                                        {"autoInitEnabled": granted, "source": f"worker-{n}"}, server)
                    with lock:
                        outcomes.append((time.time(), status))
                        if status == 200:
                            acknowledged_consents.append((fid, granted))
                status, _ = request("GET", f"{base}/healthz")
                with lock:
                    outcomes.append((time.time(), status))

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
        start = time.time()
        for t in threads:
            t.start()
        time.sleep(3)
        replicas[0].send_signal(signal.SIGTERM)
        time.sleep(3)
        replicas[1].send_signal(signal.SIGKILL)
        killed_at = time.time()
        for t in threads:
            t.join()
        statuses = [s for _, s in outcomes]
        bad = [s for s in statuses if not (s is not None and (200 <= s < 300 or s in RETRYABLE))]
        print(f"requests: {len(statuses)}, 2xx: {sum(1 for s in statuses if s and 200 <= s < 300)}, "
              f"retryable failures: {sum(1 for s in statuses if s in RETRYABLE)}, other: {len(bad)} in {time.time() - start:.1f} s")
        check("every request succeeded or failed with a retryable status", not bad, f"unexpected outcomes: {bad[:10]}")
        after = [s for t, s in outcomes if t > killed_at + 1]
        check("the remaining replica served on after the kills", sum(1 for s in after if s and 200 <= s < 300) > 20,
              f"{len(after)} requests after the kills")
        stored = set(DB.psql("SELECT fid FROM installations WHERE project_id = 'topology-test'").split())
        missing = [f for f in acknowledged_fids if f not in stored]
        check(f"all {len(acknowledged_fids)} acknowledged installations are stored", not missing, f"missing: {missing[:5]}")
        ledger = set(tuple(line.split("|")) for line in DB.psql(
            "SELECT fid, granted FROM consent_events WHERE project_id = 'topology-test' AND actor = 'server'").splitlines())
        lost = [c for c in acknowledged_consents if (c[0], "t" if c[1] else "f") not in ledger]
        check(f"all {len(acknowledged_consents)} acknowledged consent decisions are in the ledger", not lost, f"lost: {lost[:5]}")
        try:
            code = replicas[0].wait(timeout=10)
        except subprocess.TimeoutExpired:
            code = None
        check("the SIGTERM'd replica drained and exited 0", code == 0, f"exit status {code}")
    finally:
        haproxy.kill()
        for r in replicas:
            if r.poll() is None:
                r.kill()
        DB.drop()
    return summary("topology")


if __name__ == "__main__":
    sys.exit(main())
