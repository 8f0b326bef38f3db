"""Shared helpers of the multi-process tests (topology.py, replicas.py): a throwaway database on the test cluster,
the token-registry binary, free ports, plain HTTP calls and check bookkeeping."""
import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, ".build/debug/token-registry")
ADMIN = os.environ.get("TEST_DATABASE_URL", "")  # the tests that make databases need it (scripts/test.sh sets it)
results = {"passed": 0, "failed": 0}


def check(name, ok, detail=""):
    results["passed" if ok else "failed"] += 1
    print(f"{'ok' if ok else 'FAILED'}: {name}{(' — ' + detail) if detail and not ok else ''}", flush=True)


def summary(suite):
    """Prints the closing 'N passed, M failed' line; returns the exit status."""
    print(f"{suite}: {results['passed']} passed, {results['failed']} failed")
    return 1 if results["failed"] else 0


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def psql(sql, url):
    return subprocess.run(["psql", url, "-Atqc", sql], check=True, capture_output=True, text=True).stdout.strip()


class Database:
    """A database of its own on the test cluster, named after the test and the process."""

    def __init__(self, prefix):
        self.name = f"{prefix}_{os.getpid()}"
        self.url = ADMIN.replace("dbname=postgres", f"dbname={self.name}")

    def create(self):
        psql(f"DROP DATABASE IF EXISTS {self.name}", ADMIN)
        psql(f"CREATE DATABASE {self.name}", ADMIN)

    def drop(self):
        psql(f"DROP DATABASE IF EXISTS {self.name} WITH (FORCE)", ADMIN)

    def psql(self, sql):
        return psql(sql, self.url)

    def cli(self, *args):
        """Runs a token-registry command against this database and returns its JSON output."""
        out = subprocess.run([BIN, *args], env={**os.environ, "DATABASE_URL": self.url}, check=True,
                             capture_output=True, text=True)
        return json.loads(out.stdout)


def request(method, url, body=None, headers=None, timeout=10):
    """(status, JSON body); status None when the request never got an HTTP answer."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, None
    except Exception as e:  # connection-level failure: not a status at all
        return None, str(e)


def wait_ready(port, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if request("GET", f"http://127.0.0.1:{port}/readyz", timeout=2)[0] == 200:
            return True
        time.sleep(0.1)
    return False


def start_haproxy(workdir, port, servers, admin=None):
    """HAProxy on 127.0.0.1:`port` in front of `servers` ("host:port" each, named s0, s1, …), health-checked on
    /readyz every 300 ms, retrying requests that never reached a server. With `admin`, a runtime API socket there
    (`set server replicas/s0 addr …`). Returns the process."""
    config = os.path.join(workdir, "haproxy.cfg")
    with open(config, "w") as f:
        f.write(f"""global
    maxconn 4096
{f"    stats socket {admin} level admin" if admin else ""}
defaults
    mode http
    timeout connect 1s
    timeout client 30s
    timeout server 30s
    retries 3
    option redispatch
    retry-on conn-failure empty-response
    option http-buffer-request
    option forwardfor
frontend registry
    bind 127.0.0.1:{port}
    default_backend replicas
backend replicas
    balance roundrobin
    option httpchk GET /readyz
    http-check expect status 200
    default-server inter 300ms fall 1 rise 2
""" + "".join(f"    server s{i} {server} check\n" for i, server in enumerate(servers)))
    return subprocess.Popen(["haproxy", "-db", "-f", config], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

