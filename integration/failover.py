"""PostgreSQL failover with pg_auto_failover on loopback, under a token-refresh-callback load.

A monitor, a primary and a synchronous standby (`pg_autoctl`, Debian's postgresql-15-auto-failover); two `serve`
replicas on the multi-host URL `pg_autoctl show uri` gives (`target_session_attrs=read-write`). Under load the whole
primary node (its pg_autoctl and its postmaster) is killed with SIGKILL. Checks: no acknowledged write is lost (each
installation's token is the last one acknowledged for it, or one sent after it), requests fail fast with 503 while
there is no primary, and each replica serves within 1 s of the new primary accepting writes. Prints the error window
and the recovery lag. Bounded: about 90 s. Needs pg_autoctl and a debug build of token-registry.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from harness import BIN, check, free_port, request, summary, wait_ready

PGBIN = sorted(d for d in (f"/usr/lib/postgresql/{v}/bin" for v in os.listdir("/usr/lib/postgresql"))
               if os.path.exists(f"{d}/pg_ctl"))[-1]
AS_POSTGRES = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
PROJECT = "failover-proj"


class Formation:
    """A pg_auto_failover monitor and two data nodes under one temporary directory."""

    def __init__(self):
        self.root = tempfile.mkdtemp(prefix="failover-")
        if AS_POSTGRES:
            shutil.chown(self.root, "postgres", "postgres")
        self.env = {"PATH": f"{PGBIN}:/usr/bin:/bin", "XDG_CONFIG_HOME": f"{self.root}/config",
                    "XDG_DATA_HOME": f"{self.root}/share", "XDG_RUNTIME_DIR": f"{self.root}/run", "PGCONNECT_TIMEOUT": "3"}
        self.runs, self.ports = {}, {}

    def autoctl(self, *args, timeout=120):
        env_args = [f"{k}={v}" for k, v in self.env.items()]
        out = subprocess.run([*AS_POSTGRES, "env", *env_args, "pg_autoctl", *args], capture_output=True, text=True,
                             timeout=timeout, cwd=self.root)
        if out.returncode != 0:
            raise RuntimeError(f"pg_autoctl {' '.join(args)}: {out.stderr[-1500:]}")
        return out.stdout.strip()

    def pgdata(self, name):
        return f"{self.root}/{name}"

    def tune(self, name):
        # pg_autoctl sizes shared_buffers for a real server; a test node needs little. The last setting wins.
        with open(f"{self.pgdata(name)}/postgresql.conf", "a") as f:
            f.write("shared_buffers = 32MB\nmax_connections = 100\n")
            if name == "monitor":
                # The monitor's defaults wait about 50 s before promoting when a primary node vanishes (health checks
                # every 5 s, unhealthy after 20 s, demote time-out 30 s); these find it in about 10 s. The service's
                # own recovery is measured from the promotion either way (docs/operations.md).
                f.write("pgautofailover.health_check_period = 1000\npgautofailover.health_check_timeout = 1000\n"
                        "pgautofailover.health_check_max_retries = 1\npgautofailover.health_check_retry_delay = 500\n"
                        "pgautofailover.node_considered_unhealthy_timeout = 4000\n"
                        "pgautofailover.primary_demote_timeout = 5000\n")

    def run(self, name):
        env_args = [f"{k}={v}" for k, v in self.env.items()]
        log = open(f"{self.root}/{name}.log", "a")
        self.runs[name] = subprocess.Popen([*AS_POSTGRES, "env", *env_args, "pg_autoctl", "run", "--pgdata",
                                            self.pgdata(name)], stdout=log, stderr=log, cwd=self.root,
                                           start_new_session=True)

    def create(self):
        self.ports = {"monitor": free_port(), "node1": free_port(), "node2": free_port()}
        self.autoctl("create", "monitor", "--pgdata", self.pgdata("monitor"), "--pgport", str(self.ports["monitor"]),
                     "--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl")
        self.autoctl("config", "set", "--pgdata", self.pgdata("monitor"), "postgresql.listen_addresses", "127.0.0.1")
        self.tune("monitor")
        self.run("monitor")
        monitor = self.wait(lambda: self.autoctl("show", "uri", "--pgdata", self.pgdata("monitor"),
                                                     "--formation", "monitor"), 60)
        for name in ("node1", "node2"):
            self.autoctl("create", "postgres", "--pgdata", self.pgdata(name), "--pgport", str(self.ports[name]),
                         "--listen", "127.0.0.1", "--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl",
                         "--dbname", "registry", "--monitor", monitor, "--name", name, timeout=180)
            self.tune(name)
            self.run(name)
            wanted = {"node1": "single"} if name == "node1" else {"node1": "primary", "node2": "secondary"}
            if not self.wait(lambda: self.state() == wanted, 90):
                raise RuntimeError(f"the formation never reached {wanted}: {self.state()}")
        uri = self.autoctl("show", "uri", "--pgdata", self.pgdata("monitor"), "--formation", "default")
        return uri.replace("postgres://", "postgres://postgres@", 1)   # the URL names no user

    def state(self):
        try:
            nodes = json.loads(self.autoctl("show", "state", "--pgdata", self.pgdata("monitor"), "--json", timeout=10))
            return {n["nodename"]: n["current_group_state"] for n in nodes}
        except Exception:
            return {}

    @staticmethod
    def wait(probe, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                value = probe()
                if value:
                    return value
            except Exception:
                pass
            time.sleep(0.2)
        return None

    def kill_node(self, name):
        """SIGKILL to the whole node: its pg_autoctl, the postmaster and every backend."""
        pid = self.postmaster(name)
        os.killpg(self.runs[name].pid, signal.SIGKILL)
        if pid:
            for target in [pid, *children(pid)]:
                try:
                    os.kill(target, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for leftover in (f"/var/run/postgresql/.s.PGSQL.{self.ports[name]}",
                         f"/var/run/postgresql/.s.PGSQL.{self.ports[name]}.lock"):
            if os.path.exists(leftover):
                os.remove(leftover)

    def postmaster(self, name):
        try:
            with open(f"{self.pgdata(name)}/postmaster.pid") as f:
                return int(f.readline())
        except (OSError, ValueError):
            return None

    def stop(self):
        for name in list(self.runs):
            if self.runs[name].poll() is None:
                self.kill_node(name)
        for name in ("monitor", "node1", "node2"):
            pid = self.postmaster(name)
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        shutil.rmtree(self.root, ignore_errors=True)


def children(pid):
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def psql(port, sql, timeout=2):
    return subprocess.run(["psql", f"host=127.0.0.1 port={port} dbname=registry user=postgres connect_timeout=1",
                           "-Atqc", sql], capture_output=True, text=True, timeout=timeout)


def main():
    formation = Formation()
    replicas, logs = [], []
    try:
        t0 = time.time()
        url = formation.create()
        print(f"failover: monitor, primary and standby up in {time.time() - t0:.1f} s; service URL {url}", flush=True)
        check("the formation has a primary and a secondary",
              formation.state() == {"node1": "primary", "node2": "secondary"}, str(formation.state()))
        env = {**os.environ, "DATABASE_URL": url, "LOG_LEVEL": "warning", "HOST": "127.0.0.1",
               "SECRETS_KEY": "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=", "RATE_LIMIT_CREATE_PER_ADDRESS": "0"}
        cli = lambda *a: json.loads(subprocess.run([BIN, *a], env=env, check=True, capture_output=True, text=True).stdout)
        cli("migrate")
        project = cli("project", "create", "--id", PROJECT, "--number", "60606")
        app = cli("app", "create", "--project", PROJECT, "--platform", "android", "--auto-init-default", "true")
        ports = [free_port(), free_port()]
        for port in ports:
            logs.append(open(f"{formation.root}/replica-{port}.log", "w"))
            replicas.append(subprocess.Popen([BIN, "serve"], env={**env, "PORT": str(port)}, stdout=logs[-1],
                                             stderr=logs[-1]))
        check("two replicas become ready on the multi-host URL", all(wait_ready(p, 60) for p in ports))
        server = {"Authorization": "Bearer " + project["serverKey"]}
        fids = []
        for _ in range(80):
            status, body = request("POST", f"http://127.0.0.1:{ports[0]}/v1/projects/{PROJECT}/installations",
                                   {"appId": app["appId"], "fid": ""}, {"x-goog-api-key": app["apiKey"]})
            if status == 200:
                fids.append(body["fid"])
        check("80 installations made before the load", len(fids) == 80)
        psql(formation.ports["node1"], "CREATE TABLE failover_probe (at timestamptz)")

        sent = {fid: [] for fid in fids}          # every token sent, in order, and whether it was acknowledged
        outcomes, lock, done = [], threading.Lock(), threading.Event()

        def worker(n):
            mine, i = fids[n::8], 0
            while not done.is_set():
                fid = mine[i % len(mine)]
                port = ports[i % 2]
                token = f"{fid}:w{n}-{i}"
                started = time.time()
                status, _ = request("PUT", f"http://127.0.0.1:{port}/v1/projects/{PROJECT}/installations/{fid}"
                                           "/registration", {"token": token, "platform": "android"}, server,
                                    timeout=15)
                with lock:
                    sent[fid].append((token, status == 200))
                    outcomes.append((started, time.time(), port, status))
                i += 1
                if status != 200:
                    time.sleep(0.02)   # a client pauses before retrying

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        time.sleep(3)
        killed_at = time.time()
        formation.kill_node("node1")
        writable_at = None
        deadline = time.time() + 60
        while time.time() < deadline:
            probe = psql(formation.ports["node2"], "SET statement_timeout = 500; INSERT INTO failover_probe "
                                                   "VALUES (now()) RETURNING pg_is_in_recovery()", timeout=3)
            if probe.returncode == 0 and probe.stdout.strip().startswith("f"):
                writable_at = time.time()
                break
            time.sleep(0.05)
        check("the standby was promoted and accepts writes", writable_at is not None, str(formation.state()))
        time.sleep(4)
        done.set()
        for t in threads:
            t.join()
        writable_at = writable_at or time.time()
        print(f"failover: the new primary accepted writes {writable_at - killed_at:.1f} s after the kill", flush=True)
        after = [o for o in outcomes if o[0] >= killed_at]
        failures = [o for o in after if o[3] != 200]
        statuses = sorted({o[3] for o in failures}, key=str)
        check("requests failed only with 503 while there was no primary", set(statuses) <= {503}, f"{statuses}")
        longest = max((o[1] - o[0] for o in failures), default=0)
        check(f"failed requests failed fast (longest {longest:.2f} s)", longest < 2.0)
        lags = []
        for port in ports:
            served = [o[1] for o in after if o[2] == port and o[3] == 200 and o[0] >= writable_at]
            lags.append((min(served) - writable_at) if served else None)
        window = (max(o[1] for o in failures) - min(o[0] for o in failures)) if failures else 0
        print(f"failover: {len(outcomes)} requests, {len(failures)} failed after the kill, error window "
              f"{window:.1f} s; replicas served again {', '.join('never' if l is None else f'{l:.2f} s' for l in lags)}"
              f" after the new primary accepted writes", flush=True)
        check("each replica served within 1 s of the new primary accepting writes",
              all(l is not None and l <= 1.0 for l in lags), f"{lags}")
        current = dict(line.split("|") for line in psql(formation.ports["node2"],
                       f"SELECT fid, token FROM registrations WHERE project_id = '{PROJECT}'").stdout.splitlines())
        acknowledged = sum(1 for fid in fids for _, ok in sent[fid] if ok)
        lost = []
        for fid in fids:
            history = sent[fid]
            last_ok = max((i for i, (_, ok) in enumerate(history) if ok), default=None)
            if last_ok is not None and current.get(fid) not in {t for t, _ in history[last_ok:]}:
                lost.append((fid, history[last_ok][0], current.get(fid)))
        check(f"no acknowledged write lost ({acknowledged} acknowledged)", acknowledged > 0 and not lost, f"{lost[:3]}")
        for r in replicas:
            r.send_signal(signal.SIGTERM)
        check("the replicas exit 0 on SIGTERM", all(r.wait(timeout=30) == 0 for r in replicas))
    except Exception as error:
        check("the failover scenario ran to the end", False, str(error)[-1500:])
    finally:
        for r in replicas:
            if r.poll() is None:
                r.kill()
        formation.stop()
    return summary("failover")


if __name__ == "__main__":
    sys.exit(main())
