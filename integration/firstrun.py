"""The first run with no DATABASE_URL (the embedded PostgreSQL), as a newcomer makes it. Loopback only, about 40 s.

From a fresh clone placed under a private (0700) directory, as root and as an unprivileged user:
- the service creates its cluster where the `postgres` user can reach it (root) or under the checkout (a user), says
  what it does, and answers /healthz;
- SIGTERM exits 0 and stops the cluster; nothing is left running;
- a second start reuses the data (no new cluster);
- a service killed with SIGKILL leaves PostgreSQL running; the next start adopts it and stops it on exit.

Runs the debug build of this checkout (the binary the suite built) with the clone as its working directory.
"""
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time

from harness import BIN, ROOT, check, free_port, request, summary

USER = "trfirstrun"


def postgres_running(data_dir):
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return any(line.startswith("/usr/lib/postgresql/") and data_dir in line for line in out.splitlines())


def start(binary, cwd, port, user, command=None):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "SECRETS_KEY", "SECRETS_KEY_FILE")}
    env.update({"PORT": str(port), "HOST": "127.0.0.1", "JOBS_INTERVAL_SECONDS": "0"})
    log = tempfile.NamedTemporaryFile("w+", delete=False, prefix="firstrun-")
    command = command or [binary, "serve"]
    if user:
        env["HOME"] = pwd.getpwnam(user).pw_dir
        # setpriv changes the user and nothing else (runuser would start a session that takes the signals too).
        command = ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", "--"] + command
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    return process, log.name


def healthy(port, process, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline and process.poll() is None:
        status, _ = request("GET", f"http://127.0.0.1:{port}/healthz", timeout=2)
        if status == 200:
            return True
        time.sleep(0.3)
    return False


def log_of(path):
    with open(path) as f:
        return f.read()


def scenario(name, binary, checkout, user, data_dir_hint, clusters):
    port = free_port()
    first, log = start(binary, checkout, port, user)
    check(f"{name}: /healthz answers on the first start", healthy(port, first), log_of(log)[-2000:])
    text = log_of(log)
    check(f"{name}: start-up says what it does", "creating the PostgreSQL cluster" in text and '"listening"' in text,
          text[-1500:])
    data_dir = data_dir_hint(text)
    clusters.append(data_dir)
    check(f"{name}: PostgreSQL runs for this checkout", bool(data_dir) and postgres_running(data_dir), text[-800:])
    owner_only(name, data_dir, user)
    if user is None:
        check(f"{name}: under a private parent the cluster moves where postgres can reach it, and says so",
              data_dir.startswith("/var/lib/token-registry/") and "cannot reach" in text, data_dir)
    else:
        check(f"{name}: the cluster lives in the checkout", data_dir.startswith(checkout + "/.data/"), data_dir)
    answered = sum(1 for _ in range(50) if request("GET", f"http://127.0.0.1:{port}/healthz", timeout=2)[0] == 200)
    first.send_signal(signal.SIGTERM)   # at once: the request lines are still in the log buffer (flushed every 1 s)
    check(f"{name}: SIGTERM exits 0", first.wait(timeout=30) == 0)
    lines = [json.loads(line) for line in log_of(log).splitlines() if line.startswith("{")]
    logged = [i for i, line in enumerate(lines) if line.get("msg") == "request" and line.get("route") == "/healthz"]
    stopped = [i for i, line in enumerate(lines) if line.get("msg") == "stopped"]
    check(f"{name}: SIGTERM loses no request line (the {answered} + 1 answered, before 'stopped')",
          len(logged) == answered + 1 and stopped and max(logged) < stopped[0], f"{len(logged)} lines, {stopped}")
    check(f"{name}: the cluster is stopped with the service", not postgres_running(data_dir))

    second, log = start(binary, checkout, port, user)
    check(f"{name}: a second start answers", healthy(port, second), log_of(log)[-2000:])
    check(f"{name}: a second start reuses the data", "creating the PostgreSQL cluster" not in log_of(log))
    second.send_signal(signal.SIGKILL)
    second.wait(timeout=10)
    check(f"{name}: a killed service leaves PostgreSQL running", postgres_running(data_dir))

    third, log = start(binary, checkout, port, user)
    check(f"{name}: the next start answers", healthy(port, third), log_of(log)[-2000:])
    check(f"{name}: it adopts the cluster left running", "adopting the PostgreSQL left running" in log_of(log),
          log_of(log)[-1500:])
    third.send_signal(signal.SIGTERM)
    check(f"{name}: SIGTERM exits 0 after adopting", third.wait(timeout=30) == 0)
    check(f"{name}: the adopted cluster is stopped; nothing is left running", not postgres_running(data_dir))


def owner_only(name, data_dir, user):
    """The embedded cluster admits its owner only: no `trust` in pg_hba.conf, private directories, and another local
    account cannot connect (before, any local user was the database superuser)."""
    cluster = os.path.dirname(data_dir)
    socket_dir = os.path.join(cluster, "socket")
    with open(os.path.join(data_dir, "pg_hba.conf")) as f:
        rules = [line.split() for line in f if line.strip() and not line.lstrip().startswith("#")]
    check(f"{name}: pg_hba.conf has no trust rule (peer, TCP rejected)",
          rules and all("trust" not in rule for rule in rules) and any("peer" in rule for rule in rules), str(rules))
    modes = {d: oct(os.stat(d).st_mode & 0o777) for d in (cluster, socket_dir, data_dir)}
    check(f"{name}: the cluster's, socket's and data directories are 0700", set(modes.values()) == {"0o700"},
          str(modes))
    conninfo = f"host={socket_dir} port=5432 dbname=postgres user=postgres connect_timeout=5"
    # Root reaches any socket: refused by peer authentication (not in the owner's map) for a user's cluster. Nobody
    # is refused by the directory's mode already for root's (run by postgres).
    stranger = "root" if user else "nobody"
    command = ["psql", conninfo, "-Atc", "SELECT 1"]
    if stranger != "root":
        command = ["setpriv", f"--reuid={stranger}", f"--regid=nogroup", "--clear-groups", "--"] + command
    other = subprocess.run(command, capture_output=True, text=True, timeout=30)
    check(f"{name}: another local account ({stranger}) cannot connect", other.returncode != 0 and "1" != other.stdout.strip(),
          other.stdout + other.stderr)
    owner = ["psql", conninfo, "-Atc", "SELECT 1"]
    if user:
        owner = ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", "--"] + owner
    mine = subprocess.run(owner, capture_output=True, text=True, timeout=30)
    check(f"{name}: its owner can", mine.returncode == 0 and mine.stdout.strip() == "1", mine.stdout + mine.stderr)


def readme_command(name, checkout, user, clusters):
    """The README's first command itself, `./scripts/run.sh`, in a fresh clone: it builds the release binary (about
    a minute here) and serves; SIGTERM stops the service and its cluster."""
    port = free_port()
    process, log = start(None, checkout, port, user, command=["./scripts/run.sh"])
    try:
        check(f"{name}: ./scripts/run.sh builds and answers /healthz", healthy(port, process, timeout=900),
              log_of(log)[-2000:])
        data_dir = data_dir_from(log_of(log))
        clusters.append(data_dir)
        process.send_signal(signal.SIGTERM)
        check(f"{name}: ./scripts/run.sh stops on SIGTERM with exit 0", process.wait(timeout=60) == 0)
        check(f"{name}: and its cluster stops with it", bool(data_dir) and not postgres_running(data_dir), data_dir)
    finally:
        if process.poll() is None:
            process.kill()


def data_dir_from(text):
    marker = "creating the PostgreSQL cluster in "
    for line in text.splitlines():
        if marker in line:
            return line.split(marker, 1)[1].split('"', 1)[0]
    return ""


def main():
    if os.getuid() != 0:
        check("the first-run test runs as root (it creates a user and runs as root and as that user)", False)
        return summary("firstrun")
    work = tempfile.mkdtemp(prefix="firstrun-")
    os.chmod(work, 0o755)
    # The binary where any user can run it (the checkout may sit under root's private home).
    binary = os.path.join(work, "token-registry")
    shutil.copy(BIN, binary)
    os.chmod(binary, 0o755)
    clusters = []
    try:
        # As root, under a private parent: the cluster cannot live in the checkout (postgres cannot reach it).
        private = os.path.join(work, "root-home")
        os.mkdir(private, 0o700)
        checkout = os.path.join(private, "token-registry")
        subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{ROOT}", checkout], check=True)
        scenario("root", binary, checkout, None, data_dir_from, clusters)
        # As an unprivileged user, in its own private home.
        try:
            pwd.getpwnam(USER)
        except KeyError:
            subprocess.run(["useradd", "--create-home", "--home-dir", os.path.join(work, USER), USER], check=True)
        home = pwd.getpwnam(USER).pw_dir
        os.makedirs(home, exist_ok=True)
        os.chmod(home, 0o700)
        checkout = os.path.join(home, "token-registry")
        # A user left by an earlier run (userdel refuses while a process of it lives) keeps its home: clone afresh.
        shutil.rmtree(checkout, ignore_errors=True)
        subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{ROOT}", checkout], check=True)
        subprocess.run(["chown", "-R", f"{USER}:", home], check=True)
        scenario("user", binary, checkout, USER, data_dir_from, clusters)
        # The README's command word for word, as root from a private directory and as the user from its home.
        readme_root = os.path.join(private, "readme-clone")
        subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{ROOT}", readme_root], check=True)
        readme_command("README as root", readme_root, None, clusters)
        readme_user = os.path.join(home, "readme-clone")
        shutil.rmtree(readme_user, ignore_errors=True)
        subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{ROOT}", readme_user], check=True)
        subprocess.run(["chown", "-R", f"{USER}:", readme_user], check=True)
        readme_command("README as a user", readme_user, USER, clusters)
    finally:
        # Whatever a failed check left behind: the services, their clusters, the relocated cluster directories.
        for line in subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout.splitlines():
            pid, _, args = line.strip().partition(" ")
            if pid.isdigit() and int(pid) != os.getpid() and (
                    binary in args or any(c and c in args for c in clusters)):
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for data_dir in clusters:
            if data_dir.startswith("/var/lib/token-registry/"):
                shutil.rmtree(os.path.dirname(data_dir), ignore_errors=True)
        subprocess.run(["userdel", "--remove", USER], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    return summary("firstrun")


if __name__ == "__main__":
    raise SystemExit(main())
