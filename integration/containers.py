"""The deployment files themselves, built and run with podman: deploy/Dockerfile, deploy/docker-compose.yml and the
Kubernetes manifests in deploy/k8s (with `podman kube play`).

1. The image (built by scripts/container-images.sh from local bases): runs as uid 10001 with a read-only root, its
   HEALTHCHECK (`token-registry probe`) passes, /readyz is 200 against PostgreSQL, it serves a write, and
   `podman stop` ends it with exit status 0 within the drain timeout.
2. The compose topology (PostgreSQL, migrate, two replicas, HAProxy) with docker-compose talking to podman's Docker
   API socket (podman-compose 1.x ignores health conditions with podman 4.3); under load through HAProxy
   each replica in turn gets `podman stop` (SIGTERM) and is started again.
3. The manifests with `podman kube play`: the kinds podman plays (ConfigMap, Deployment with two replicas; the Secret
   as a podman secret, which is how podman 4 resolves `secretRef`) beside a PostgreSQL pod; HAProxy on the host stands
   in for the Service; the same rolling SIGTERM under load.

In 2 and 3: every request succeeds or fails with a retryable status, every acknowledged write is in the database, each
stopped replica exited 0 and the others served on. Needs podman, runc, debootstrap, docker-compose, haproxy
and PyYAML (scripts/test.sh installs them). When the machine cannot run containers the reason is printed and the run fails under CI=true (else exits 0).
"""
import base64
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import yaml

from harness import check, free_port, request, start_haproxy, summary

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PODMAN = ["podman"]
COMPOSE = ["docker-compose"]   # Debian's, on podman's Docker API socket
IMAGE = os.environ.get("IMAGE", "localhost/token-registry:dev")
TAG = f"trtest{os.getpid()}"
SECRETS_KEY = base64.b64encode(os.urandom(32)).decode()
METRICS_TOKEN = os.urandom(16).hex()
RETRYABLE = {502, 503, 504}


def podman(*args, timeout=120, check_status=True):
    run = subprocess.run([*PODMAN, *args], capture_output=True, text=True, timeout=timeout)
    if check_status and run.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args)}: {run.stderr.strip()[-600:]}")
    return run.stdout.strip()


def exit_code(container):
    return int(podman("inspect", container, "--format", "{{.State.ExitCode}}"))


def wait_for(predicate, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.25)
    return False


def ready(base):
    return request("GET", f"{base}/readyz", timeout=2)[0] == 200


def container_ready(name):
    return subprocess.run([*PODMAN, "exec", name, "token-registry", "probe", "--path", "/readyz"],
                          capture_output=True).returncode == 0


def cli(container, *args):
    """Runs a token-registry command inside a running replica (its environment names the database). Retried when
    podman's DNS (aardvark-dns) answers "temporary failure in name resolution", which it did once under a loaded CI
    run while the replicas themselves were serving."""
    for attempt in range(5):
        try:
            return json.loads(podman("exec", container, "token-registry", *args))
        except RuntimeError as error:
            if "name resolution" not in str(error) or attempt == 4:
                raise
            time.sleep(1)


def rolling_stop_under_load(name, base, replicas, start, stop, sql):
    """Load through `base` while each replica in turn is stopped (SIGTERM) and started again; then the checks."""
    project = cli(replicas[0], "project", "create", "--id", f"{name}-proj", "--number", str(7000 + os.getpid() % 999))
    app = cli(replicas[0], "app", "create", "--project", f"{name}-proj", "--platform", "web")
    server = {"Authorization": "Bearer " + project["serverKey"]}
    acknowledged, consents, outcomes, lock, done = [], [], [], threading.Lock(), threading.Event()
    unanswered = []  # why each request without an HTTP answer failed, for the report

    def worker(n):
        i = 0
        while not done.is_set():
            i += 1
            status, body = request("POST", f"{base}/v1/projects/{name}-proj/installations",
                                   {"appId": app["appId"], "fid": ""}, {"x-goog-api-key": app["apiKey"]})
            with lock:
                outcomes.append((time.time(), status))
                if status is None:
                    unanswered.append(f"create: {body}")
            if status == 200:
                with lock:
                    acknowledged.append(body["fid"])
                granted = i % 2 == 0
                status, error = request("PUT", f"{base}/v1/projects/{name}-proj/installations/{body['fid']}/consent",
                                        {"autoInitEnabled": granted, "source": f"worker-{n}"}, server)
                with lock:
                    outcomes.append((time.time(), status))
                    if status is None:
                        unanswered.append(f"consent: {error}")
                    if status == 200:
                        consents.append((body["fid"], granted))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    started = time.time()
    for t in threads:
        t.start()
    codes, stop_seconds = [], []
    try:
        for replica in replicas:
            time.sleep(2)
            t0 = time.time()
            stop(replica)
            stop_seconds.append(time.time() - t0)
            codes.append(exit_code(replica))
            start(replica)
            check(f"{name}: {replica} ready again after its restart", wait_for(lambda: container_ready(replica), 60))
        time.sleep(2)
        last = time.time()
    finally:
        done.set()
        for t in threads:
            t.join()
    statuses = [s for _, s in outcomes]
    bad = [s for s in statuses if not (s is not None and (200 <= s < 300 or s in RETRYABLE))]
    ok = sum(1 for s in statuses if s and 200 <= s < 300)
    print(f"{name}: {len(statuses)} requests in {time.time() - started:.1f} s, 2xx {ok}, "
          f"retryable {sum(1 for s in statuses if s in RETRYABLE)}, other {len(bad)}; "
          f"stops took {', '.join(f'{s:.1f} s' for s in stop_seconds)}", flush=True)
    check(f"{name}: every request succeeded or failed with a retryable status", not bad,
          f"unexpected: {bad[:10]}; unanswered: {unanswered[:5]}")
    check(f"{name}: each replica exited 0 on SIGTERM", codes == [0] * len(replicas), f"exit statuses {codes}")
    check(f"{name}: the service answered after the last restart",
          sum(1 for t, s in outcomes if t > last - 2 and s and 200 <= s < 300) > 5)
    stored = set(sql(f"SELECT fid FROM installations WHERE project_id = '{name}-proj'").split())
    missing = [f for f in acknowledged if f not in stored]
    check(f"{name}: all {len(acknowledged)} acknowledged installations are stored", acknowledged and not missing,
          f"missing {missing[:5]}")
    ledger = set(tuple(line.split("|")) for line in sql(
        f"SELECT fid, granted FROM consent_events WHERE project_id = '{name}-proj' AND actor = 'server'").splitlines())
    lost = [c for c in consents if (c[0], "t" if c[1] else "f") not in ledger]
    check(f"{name}: all {len(consents)} acknowledged consent decisions are in the ledger", not lost, f"lost {lost[:5]}")


def image_test():
    port = free_port()
    pod = f"{TAG}-pod"
    podman("pod", "create", "--name", pod, "-p", f"127.0.0.1:{port}:8080")
    try:
        podman("run", "-d", "--pod", pod, "--name", f"{TAG}-pg", "-e", "POSTGRES_PASSWORD=pw",
               "-e", "POSTGRES_DB=token_registry", "localhost/postgres:15")
        pg_up = wait_for(lambda: subprocess.run([*PODMAN, "exec", f"{TAG}-pg", "pg_isready", "-h", "127.0.0.1"],
                                                capture_output=True).returncode == 0, 60)
        check("image: PostgreSQL beside it is up", pg_up)
        # Without a master key, on the read-only root: one line naming what it needs, exit 2.
        keyless = subprocess.run(
            [*PODMAN, "run", "--rm", "--pod", pod, "--read-only",
             "-e", "DATABASE_URL=postgresql://postgres:pw@127.0.0.1:5432/token_registry", IMAGE],
            capture_output=True, text=True, timeout=120)
        said = (keyless.stdout + keyless.stderr).strip().splitlines()
        check("image: without SECRETS_KEY it stops with exit 2 and one line naming SECRETS_KEY",
              keyless.returncode == 2 and any("SECRETS_KEY" in line and line.startswith("error:") for line in said)
              and not any("Error Domain" in line for line in said), f"exit {keyless.returncode}: {said[-3:]}")
        app = f"{TAG}-app"
        # The plain `docker run` of deploy/README.md: a master key and a database URL, nothing else.
        podman("run", "-d", "--pod", pod, "--name", app, "--read-only", "-e", f"SECRETS_KEY={SECRETS_KEY}",
               "-e", "DATABASE_URL=postgresql://postgres:pw@127.0.0.1:5432/token_registry",
               "-e", "DRAIN_TIMEOUT_SECONDS=10", IMAGE)
        inspect = json.loads(podman("image", "inspect", IMAGE))[0]
        check("image: runs as uid 10001 by default", inspect["Config"].get("User") == "10001")
        check("image: carries a HEALTHCHECK (docker format)",
              "probe" in " ".join((inspect.get("Healthcheck") or {}).get("Test", [])))
        base = f"http://127.0.0.1:{port}"
        check("image: /readyz answers 200 against PostgreSQL", wait_for(lambda: ready(base), 60),
              podman("logs", app, check_status=False)[-800:])
        check("image: the process is not root", podman("exec", app, "id", "-u") == "10001")
        health = subprocess.run([*PODMAN, "healthcheck", "run", app], capture_output=True, text=True)
        check("image: its HEALTHCHECK passes", health.returncode == 0, health.stdout + health.stderr)
        project = cli(app, "project", "create", "--id", "image-proj", "--number", "4242")
        web = cli(app, "app", "create", "--project", "image-proj", "--platform", "web")
        status, body = request("POST", f"{base}/v1/projects/image-proj/installations",
                               {"appId": web["appId"], "fid": ""}, {"x-goog-api-key": web["apiKey"]})
        check("image: serves a write (create installation)", status == 200 and body.get("fid"), str(status))
        logs = podman("logs", app, check_status=False)
        check("image: logs are JSON lines without the server key", project["serverKey"] not in logs and all(
            line.startswith("{") for line in logs.splitlines() if line.strip()))
        t0 = time.time()
        podman("stop", "-t", "30", app, timeout=60)
        took = time.time() - t0
        code = exit_code(app)
        check(f"image: podman stop → exit 0 within the drain timeout ({took:.1f} s)", code == 0 and took < 10,
              f"exit {code} after {took:.1f} s")
    finally:
        podman("pod", "rm", "-f", pod, check_status=False, timeout=60)


def metrics_status(base, token):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(f"{base}/metrics", headers=headers), timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except Exception:
        return None


def compose_test():
    port = free_port()
    env = {**os.environ, "POSTGRES_IMAGE": "localhost/postgres:15", "HAPROXY_IMAGE": "localhost/haproxy:2.6",
           "TOKEN_REGISTRY_IMAGE": IMAGE, "SECRETS_KEY": SECRETS_KEY, "REGISTRY_PORT": f"127.0.0.1:{port}",
           "POSTGRES_PASSWORD": "pg-" + os.urandom(8).hex(), "REGISTRY_DB_PASSWORD": "rg-" + os.urandom(8).hex(),
           "METRICS_TOKEN": METRICS_TOKEN,
           "RATE_LIMIT_CREATE_PER_ADDRESS": "0", "DOCKER_HOST": f"unix:///tmp/{TAG}.sock"}
    compose = [*COMPOSE, "-p", TAG, "-f", os.path.join(ROOT, "deploy/docker-compose.yml")]
    api = subprocess.Popen([*PODMAN, "system", "service", "--time=0", env["DOCKER_HOST"]],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: os.path.exists(f"/tmp/{TAG}.sock"), 10)
    pumping = threading.Event()
    threading.Thread(target=run_healthchecks, args=(pumping,), daemon=True).start()
    try:
        t0 = time.time()
        up = subprocess.run([*compose, "up", "-d", "--no-build"], env=env, capture_output=True, text=True, timeout=300)
        check("compose: up", up.returncode == 0, up.stderr[-800:])
        base = f"http://127.0.0.1:{port}"
        served = wait_for(lambda: ready(base), 120)
        print(f"compose: serving through HAProxy {time.time() - t0:.1f} s after up", flush=True)
        names = {c["Labels"]["com.docker.compose.service"]: c["Names"][0] for c in json.loads(
            podman("ps", "-a", "--filter", f"label=com.docker.compose.project={TAG}", "--format", "json"))}
        check("compose: HAProxy serves /readyz from the replicas", served,
              podman("logs", names.get("haproxy", "-"), check_status=False)[-800:])
        check("compose: the migrate step ran and exited 0", exit_code(names["migrate"]) == 0)
        replicas = [names["registry-1"], names["registry-2"]]

        def sql(text):
            return podman("exec", names["postgres"], "psql", "-U", "postgres", "-d", "token_registry", "-Atc", text)

        check("compose: the service connects as its own role, not a superuser",
              sql("SELECT rolsuper FROM pg_roles WHERE rolname = 'registry'") == "f"
              and sql("SELECT count(*) FROM pg_stat_activity WHERE usename = 'registry'") != "0",
              sql("SELECT usename, count(*) FROM pg_stat_activity GROUP BY 1"))
        check("compose: /metrics needs METRICS_TOKEN",
              metrics_status(base, None) == 401 and metrics_status(base, METRICS_TOKEN) == 200)

        rolling_stop_under_load("compose", base, replicas, lambda c: podman("start", c),
                                lambda c: podman("stop", "-t", "30", c, timeout=60), sql)
    finally:
        pumping.set()
        subprocess.run([*compose, "down", "-v", "-t", "5"], env=env, capture_output=True, timeout=180)
        api.terminate()
        api.wait(timeout=10)


def run_healthchecks(stop):
    """Runs the compose project's health checks every second: podman schedules them with systemd timers, and this
    machine has no systemd, so `depends_on: condition: service_healthy` would wait for ever."""
    while not stop.wait(1):
        listed = subprocess.run([*PODMAN, "ps", "--filter", f"label=com.docker.compose.project={TAG}", "--format",
                                 "{{.Names}}"], capture_output=True, text=True).stdout.split()
        for name in listed:
            subprocess.run([*PODMAN, "healthcheck", "run", name], capture_output=True)


def kube_manifests(workdir):
    """deploy/k8s as podman plays it: (the play file, the Secret's data, the kinds left out)."""
    docs = []
    for name in ("config.yaml", "deployment.yaml", "migrate-job.yaml"):
        with open(os.path.join(ROOT, "deploy/k8s", name)) as f:
            docs += [d for d in yaml.safe_load_all(f) if d]
    played, secret, left_out = [], None, []
    for doc in docs:
        kind = doc["kind"]
        if kind == "Secret":
            secret = dict(doc.get("stringData", {}))
        elif kind in ("ConfigMap", "Deployment"):
            if kind == "ConfigMap":
                doc["data"]["RATE_LIMIT_CREATE_PER_ADDRESS"] = "0"   # the test's load comes from one address
            if kind == "Deployment":
                doc["spec"]["replicas"] = 2
                for c in doc["spec"]["template"]["spec"]["containers"]:
                    c["image"] = IMAGE
                    # podman publishes a containerPort on the host, so two replicas would collide on :8080; the
                    # stand-in Service reaches the pods by address, and the probes name the port by number.
                    c.pop("ports", None)
                    for probe in ("readinessProbe", "livenessProbe"):
                        if probe in c:
                            c[probe]["httpGet"]["port"] = 8080
            played.append(doc)
        else:
            left_out.append(kind)
    secret["DATABASE_URL"] = "postgresql://postgres:pw@postgres:5432/token_registry"
    secret["SECRETS_KEY"] = SECRETS_KEY
    postgres = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "postgres"}, "spec": {"containers": [{
        "name": "postgres", "image": "localhost/postgres:15",
        "env": [{"name": "POSTGRES_PASSWORD", "value": "pw"}, {"name": "POSTGRES_DB", "value": "token_registry"}]}]}}
    path = os.path.join(workdir, "play.yaml")
    with open(path, "w") as f:
        yaml.safe_dump_all([postgres, *played], f)
    return path, secret, left_out


def kube_test():
    workdir = tempfile.mkdtemp(prefix="kube-")
    play, secret, left_out = kube_manifests(workdir)
    print(f"kube: playing ConfigMap, Deployment (2 replicas), the Secret as a podman secret; "
          f"not played by podman: {', '.join(sorted(set(left_out)))}", flush=True)
    network, haproxy = f"{TAG}-net", None
    secret_file = os.path.join(workdir, "secret.json")
    with open(secret_file, "w") as f:
        json.dump({k: base64.b64encode(v.encode()).decode() for k, v in secret.items()}, f)
    try:
        podman("network", "create", network)
        podman("secret", "create", "token-registry", secret_file)
        podman("kube", "play", "--network", network, play, timeout=180)
        replicas = ["token-registry-pod-0-registry", "token-registry-pod-1-registry"]

        def address(c):
            return json.loads(podman("inspect", c))[0]["NetworkSettings"]["Networks"][network]["IPAddress"]

        check("kube: both pods become ready", all(wait_for(lambda c=c: container_ready(c), 90) for c in replicas),
              podman("logs", replicas[0], check_status=False)[-600:])
        inspect = json.loads(podman("inspect", replicas[0]))[0]
        check("kube: runAsUser and readOnlyRootFilesystem are honoured",
              inspect["Config"]["User"] == "10001" and inspect["HostConfig"]["ReadonlyRootfs"])
        port = free_port()
        admin = os.path.join(workdir, "haproxy.sock")
        # The Service's part: the pods' addresses, health-checked on /readyz.
        haproxy = start_haproxy(workdir, port, [f"{address(c)}:8080" for c in replicas], admin=admin)

        def restart(c):
            """A restarted pod comes back on a new address: the stand-in Service learns it through HAProxy's runtime
            API, as the endpoints controller would tell a real one (no reload, so no connection is dropped)."""
            podman("start", c)
            wait_for(lambda: container_ready(c), 60)
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(admin)
                s.sendall(f"set server replicas/s{replicas.index(c)} addr {address(c)} port 8080\n".encode())
                s.recv(4096)

        base = f"http://127.0.0.1:{port}"
        check("kube: the pods serve through the stand-in Service", wait_for(lambda: ready(base), 30))

        def sql(text):
            return podman("exec", "postgres-postgres", "psql", "-U", "postgres", "-d", "token_registry", "-Atc", text)

        rolling_stop_under_load("kube", base, replicas, restart,
                                lambda c: podman("stop", "-t", "40", c, timeout=60), sql)
    finally:
        if haproxy:
            haproxy.kill()
        podman("kube", "down", play, check_status=False, timeout=120)
        podman("secret", "rm", "token-registry", check_status=False)
        podman("network", "rm", "-f", network, check_status=False)


def main():
    t0 = time.time()
    build = subprocess.run([os.path.join(ROOT, "scripts/container-images.sh")], capture_output=True, text=True,
                           timeout=1200)
    probe = subprocess.run([*PODMAN, "run", "--rm", "localhost/debian:bookworm-slim", "true"], capture_output=True,
                           text=True) if build.returncode == 0 else build
    if probe.returncode != 0:
        print(f"containers: this machine cannot build or run containers: {(probe.stderr or '')[-800:]}")
        return 1 if os.environ.get("CI") == "true" else 0
    print([line for line in build.stderr.splitlines() if "built in" in line][-1], flush=True)
    parts = {"image": image_test, "compose": compose_test, "kube": kube_test}
    for part in [parts[name] for name in sys.argv[1:]] or list(parts.values()):   # e.g. `containers.py kube`
        try:
            part()
        except Exception as error:  # a failed step fails the part, and the next part still runs
            check(f"{part.__name__} ran to the end", False, str(error)[-800:])
    print(f"containers: {time.time() - t0:.0f} s in all")
    return summary("containers")


if __name__ == "__main__":
    sys.exit(main())
