"""Three `serve` replicas sharing one database and one linked service; one replica is killed and restarted.

Checks: every deletion is delivered to the service (duplicates only because of the killed worker, counted), every
deletion ends `done`, and the change feed, read through the kill and the restart, carries every installation's
created and deleted events exactly once, in order. Bounded: about 90 s at most.

Needs TEST_DATABASE_URL (scripts/test.sh sets it) and a debug build of token-registry.
"""
import hashlib
import hmac
import http.server
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time

from harness import BIN, Database, check, free_port, summary, wait_ready
from harness import request as harness_request

DB = Database("replicas")
notices, notices_lock = [], threading.Lock()
secret = {"value": ""}


def request(method, url, body=None, headers=None, timeout=35):
    # Long enough for the change feed's long polls.
    return harness_request(method, url, body, headers, timeout)


class Receiver(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        parts = dict(p.split("=", 1) for p in self.headers.get("Registry-Signature", "").split(",") if "=" in p)
        expected = hmac.new(secret["value"].encode(), f"{parts.get('t', '')}.".encode() + body, hashlib.sha256).hexdigest()
        with notices_lock:
            notices.append((json.loads(body), hmac.compare_digest(expected, parts.get("v1", ""))))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


def start_replica(port, workdir):
    log = open(os.path.join(workdir, f"replica-{port}.log"), "a")
    env = {**os.environ, "DATABASE_URL": DB.url, "PORT": str(port), "HOST": "127.0.0.1", "LOG_LEVEL": "warning",
           "LINKED_SERVICE_ALLOW_PRIVATE": "true",  # the receiver is on loopback
           "JOBS_INTERVAL_SECONDS": "1", "RATE_LIMIT_CREATE_PER_ADDRESS": "0"}
    return subprocess.Popen([BIN, "serve"], env=env, stdout=log, stderr=log)


def main():
    DB.create()
    DB.cli("migrate")
    project = DB.cli("project", "create", "--id", "replica-test", "--number", "4711")
    app = DB.cli("app", "create", "--project", "replica-test", "--platform", "web")
    server = {"Authorization": "Bearer " + project["serverKey"]}
    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    workdir = tempfile.mkdtemp(prefix="replicas-")
    ports = [free_port() for _ in range(3)]
    replicas = {p: start_replica(p, workdir) for p in ports}
    feed, feed_errors, stop_feed = [], [], threading.Event()
    try:
        check("three replicas become ready", all(wait_ready(p) for p in ports))
        base = lambda: f"http://127.0.0.1:{random.choice([p for p in ports if replicas[p].poll() is None])}"
        status, linked = request("POST", f"{base()}/v1/projects/replica-test/linkedServices",
                                 {"name": "warehouse", "endpoint": f"http://127.0.0.1:{receiver.server_port}/deletions"}, server)
        secret["value"] = (linked or {}).get("secret", "")
        check("the linked service is registered", status == 200)

        def read_feed():
            cursor = "0"
            while not stop_feed.is_set():
                status, page = request("GET", f"{base()}/v1/projects/replica-test/events?after={cursor}&waitSeconds=2", headers=server)
                if status != 200:
                    feed_errors.append(status)
                    time.sleep(0.2)
                    continue
                feed.extend(page["events"])
                cursor = page["nextCursor"]

        reader = threading.Thread(target=read_feed)
        reader.start()
        def call(method, path, body=None, headers=None):
            # As a client behind a load balancer would: a request that never reached a live replica goes to another.
            for _ in range(20):
                status, reply = request(method, base() + path, body, headers)
                if status is not None and status < 500:
                    return status, reply
                time.sleep(0.2)
            return status, reply

        fids = []
        for n in range(40):
            status, created = call("POST", "/v1/projects/replica-test/installations", {"appId": app["appId"]},
                                   {"x-goog-api-key": app["apiKey"]})
            if status == 200:
                fids.append(created["fid"])
                call("DELETE", f"/v1/project/replica-test/instanceId/{created['fid']}", headers=server)
            if n == 20:
                victim = ports[1]
                replicas[victim].send_signal(signal.SIGKILL)
                replicas[victim].wait()
                replicas[victim] = start_replica(victim, workdir)  # restarted on the same port
        check("40 installations created and deleted across the replicas", len(fids) == 40, f"{len(fids)}")
        check("the killed replica came back", wait_ready(ports[1]))
        deadline = time.time() + 60
        done = 0
        while time.time() < deadline:
            done = int(DB.psql("SELECT count(*) FROM deletions WHERE completed_at IS NOT NULL"))
            if done >= len(fids):
                break
            time.sleep(0.5)
        check("every deletion is done (acknowledged by the service)", done == len(fids), f"{done} of {len(fids)}")
        with notices_lock:
            received = list(notices)
        delivered = {n["fid"] for n, _ in received}
        check("every deletion reached the service", delivered == set(fids), f"missing {set(fids) - delivered}")
        check("every notice carries a valid signature", all(ok for _, ok in received))
        ids = [n["deliveryId"] for n, _ in received]
        duplicates = len(ids) - len(set(ids))
        print(f"notices: {len(received)}, unique deliveries: {len(set(ids))}, duplicates: {duplicates} (a replica was killed mid-run)")
        check("duplicates only from the killed worker's claims (at most one batch)", duplicates <= 50, f"{duplicates}")
        time.sleep(3)
        stop_feed.set()
        reader.join(timeout=10)
        cursors = [int(e["cursor"]) for e in feed]
        check("feed cursors strictly increase through the kill and restart", cursors == sorted(set(cursors)))
        for kind in ("installation.created", "installation.deleted"):
            seen = [e["fid"] for e in feed if e["type"] == kind]
            check(f"every {kind} event arrived exactly once", sorted(seen) == sorted(fids),
                  f"{len(seen)} events for {len(fids)} installations")
        def in_order(fid):
            types = [e["type"] for e in feed if e["fid"] == fid]
            return "installation.created" in types and "installation.deleted" in types and \
                types.index("installation.created") < types.index("installation.deleted")
        order_ok = all(in_order(f) for f in fids)
        check("each installation's created event comes before its deleted event", order_ok)
    finally:
        stop_feed.set()
        for p in replicas.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in replicas.values():
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
        receiver.shutdown()
        DB.drop()
    return summary("replicas")


if __name__ == "__main__":
    sys.exit(main())
