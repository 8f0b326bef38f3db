"""Slow and idle connections cannot hold the service (issue: slowloris). Loopback only, bounded (about 25 s).

1. 1000 connections feed a request header one byte a second and 200 send an empty line a second, while normal
   clients make requests: the normal clients' p99 stays under 50 ms, and every slow connection is closed by the
   request timeout (408), none held open.
2. 2000 connections against MAX_CONNECTIONS=300: the excess is refused at once (503 and close), the service's memory
   stays bounded, and once they go it serves at once.

Needs TEST_DATABASE_URL (scripts/test.sh sets it) and a debug build of token-registry.
"""
import os
import resource
import selectors
import socket
import subprocess
import sys
import tempfile
import threading
import time
import http.client

from harness import BIN, Database, check, free_port, summary, wait_ready

DB = Database("slowclients")


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def start(port, extra):
    log = open(os.path.join(tempfile.mkdtemp(prefix="slowclients-"), "service.log"), "w")
    env = {**os.environ, "DATABASE_URL": DB.url, "PORT": str(port), "HOST": "127.0.0.1", "LOG_LEVEL": "warning",
           "JOBS_INTERVAL_SECONDS": "0", **extra}
    return subprocess.Popen([BIN, "serve"], env=env, stdout=log, stderr=log)


def normal_latencies(port, stop, out):
    """Sequential keep-alive requests, as a well-behaved client makes them; latencies in ms."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    while not stop.is_set():
        started = time.perf_counter()
        try:
            conn.request("GET", "/healthz")
            response = conn.getresponse()
            response.read()
            out.append((time.perf_counter() - started) * 1000 if response.status == 200 else 10_000)
        except Exception:
            out.append(10_000)
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        time.sleep(0.005)


def slow_attack(port, duration):
    """1000 header tricklers and 200 CRLF senders for `duration` seconds; returns (opened, closed by the server)."""
    selector = selectors.DefaultSelector()
    sockets = []
    for i in range(1200):
        s = socket.create_connection(("127.0.0.1", port))
        s.setblocking(False)
        kind = "header" if i < 1000 else "crlf"
        payload = (b"GET / HTTP/1.1\r\nX-Slow: " + b"a" * 4000) if kind == "header" else b"\r\n" * 4000
        sockets.append({"sock": s, "payload": payload, "sent": 0, "closed": False})
        selector.register(s, selectors.EVENT_READ, sockets[-1])
    deadline = time.time() + duration
    next_tick = time.time()
    while time.time() < deadline:
        if time.time() >= next_tick:
            next_tick += 1.0
            for entry in sockets:
                if entry["closed"]:
                    continue
                chunk = entry["payload"][entry["sent"]:entry["sent"] + (1 if entry["payload"][:1] == b"G" else 2)]
                try:
                    entry["sock"].send(chunk)
                    entry["sent"] += len(chunk)
                except OSError:
                    entry["closed"] = True
        for key, _ in selector.select(timeout=0.05):
            entry = key.data
            try:
                data = entry["sock"].recv(4096)
            except OSError:
                data = b""
            if not data or b"408" in data or b"HTTP/1.1" in data:
                if not data:
                    entry["closed"] = True
                    selector.unregister(entry["sock"])
    closed = sum(1 for e in sockets if e["closed"])
    for e in sockets:
        e["sock"].close()
    return len(sockets), closed


def connection_flood(port):
    """2000 connections at once; returns (refused quickly, accepted held)."""
    held, refused = [], 0
    for _ in range(2000):
        s = socket.create_connection(("127.0.0.1", port))
        held.append(s)
    time.sleep(0.5)
    for s in held:
        s.settimeout(0.01)
        try:
            data = s.recv(200)
            if b" 503 " in data or not data:
                refused += 1
        except (socket.timeout, BlockingIOError):
            pass
        except OSError:
            refused += 1
    return held, refused


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 16384), hard))
    DB.create()
    DB.cli("migrate")
    port = free_port()
    service = start(port, {"REQUEST_TIMEOUT_MS": "4000", "IDLE_TIMEOUT_MS": "60000"})
    try:
        check("the service is ready", wait_ready(port))
        baseline = rss_mib(service.pid)
        stop, latencies = threading.Event(), []
        workers = [threading.Thread(target=normal_latencies, args=(port, stop, latencies)) for _ in range(4)]
        for w in workers:
            w.start()
        opened, closed = slow_attack(port, duration=9)
        stop.set()
        for w in workers:
            w.join()
        latencies.sort()
        p99 = latencies[int(len(latencies) * 0.99) - 1] if latencies else 10_000
        print(f"slow attack: {opened} slow connections, {closed} closed by the server; normal clients: "
              f"{len(latencies)} requests, p50 {latencies[len(latencies) // 2]:.1f} ms, p99 {p99:.1f} ms", flush=True)
        check("normal clients' p99 stays under 50 ms during 1000 trickling headers and 200 CRLF senders", p99 < 50,
              f"p99 {p99:.1f} ms")
        check("every slow connection was closed by the request timeout", closed == opened, f"{closed}/{opened}")
        check("memory stayed bounded under the slow attack", rss_mib(service.pid) < baseline + 150,
              f"{baseline:.0f} → {rss_mib(service.pid):.0f} MiB")
    finally:
        service.terminate()
        service.wait(timeout=15)

    port = free_port()
    service = start(port, {"MAX_CONNECTIONS": "300"})
    try:
        check("the capped service is ready", wait_ready(port))
        started = time.time()
        held, refused = connection_flood(port)
        print(f"flood: 2000 connections, {refused} refused at once, RSS {rss_mib(service.pid):.0f} MiB, "
              f"in {time.time() - started:.1f} s", flush=True)
        check("the connections past MAX_CONNECTIONS=300 are refused at once", refused >= 1690, f"{refused} refused")
        check("memory stays bounded under the flood", rss_mib(service.pid) < 150, f"{rss_mib(service.pid):.0f} MiB")
        for s in held:
            s.close()
        time.sleep(0.3)
        t0 = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/healthz")
        ok = conn.getresponse().status == 200
        check("the service serves at once when the flood goes", ok and time.perf_counter() - t0 < 1.0)
    finally:
        service.terminate()
        service.wait(timeout=15)
        DB.drop()
    return summary("slowclients")


if __name__ == "__main__":
    sys.exit(main())
