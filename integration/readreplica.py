"""DATABASE_READ_URL: targeting reads on a streaming-replication standby, everything else on the primary.

A standby of the test cluster (pg_basebackup -R, hot standby, its own socket) and one `serve` with DATABASE_URL on
the primary and DATABASE_READ_URL on the standby. With the standby's replay paused, a new subscription is written:
the reads that must see their own writes (IID info, the write itself) see it at once; the targeting reads (who a
topic reaches, sendability) do not until replay resumes, which shows where each read goes. With the standby
stopped, the targeting reads fall back to the primary. Bounded: about 30 s. Needs TEST_DATABASE_URL (the test
cluster: TEST_PG_BIN, TEST_PG_ROOT, TEST_PG_PORT) and a debug build of token-registry.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

from harness import BIN, Database, check, free_port, psql, request, summary, wait_ready

PGBIN, PG_ROOT, PG_PORT = os.environ["TEST_PG_BIN"], os.environ["TEST_PG_ROOT"], os.environ["TEST_PG_PORT"]
AS_POSTGRES = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
DB = Database("readreplica")


class Standby:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="standby-")
        if AS_POSTGRES:
            shutil.chown(self.dir, "postgres", "postgres")
        os.chmod(self.dir, 0o700)
        self.port = str(free_port())
        self.data = f"{self.dir}/data"

    def pg(self, *args):
        return subprocess.run([*AS_POSTGRES, *args], capture_output=True, text=True, timeout=120)

    def start(self):
        # A fast checkpoint: the default spread one paces its writes over most of checkpoint_timeout, and after the
        # suite has dirtied the cluster's buffers it outlasted the 120 s bound (seen once in CI).
        made = self.pg(f"{PGBIN}/pg_basebackup", "-h", PG_ROOT, "-p", PG_PORT, "-U", "postgres", "-D", self.data,
                       "-R", "-X", "stream", "-c", "fast")
        if made.returncode != 0:
            raise RuntimeError(f"pg_basebackup: {made.stderr}")
        started = self.pg(f"{PGBIN}/pg_ctl", "-D", self.data, "-l", f"{self.dir}/server.log", "-w", "-t", "60", "-o",
                          f"-k {self.dir} -c listen_addresses='' -p {self.port} -c hot_standby=on "
                          f"-c max_connections={psql('SHOW max_connections', DB.url)}", "start")
        if started.returncode != 0:
            raise RuntimeError(f"standby start: {started.stderr}")

    def url(self, dbname):
        return f"host={self.dir} port={self.port} dbname={dbname} user=postgres"

    def sql(self, text):
        return psql(text, self.url("postgres"))

    def caught_up(self, timeout=20):
        target = psql("SELECT pg_current_wal_lsn()", DB.url)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.sql(f"SELECT pg_last_wal_replay_lsn() >= '{target}'::pg_lsn") == "t":
                return True
            time.sleep(0.1)
        return False

    def stop(self):
        self.pg(f"{PGBIN}/pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")

    def remove(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def main():
    DB.create()
    standby, service = Standby(), None
    try:
        DB.cli("migrate")
        project = DB.cli("project", "create", "--id", "replica-proj", "--number", "70707")
        app = DB.cli("app", "create", "--project", "replica-proj", "--platform", "android",
                     "--auto-init-default", "true")
        standby.start()
        port = free_port()
        log = open(f"{standby.dir}/service.log", "w")
        service = subprocess.Popen([BIN, "serve"], stdout=log, stderr=log, env={
            **os.environ, "DATABASE_URL": DB.url, "DATABASE_READ_URL": standby.url(DB.name), "PORT": str(port),
            "HOST": "127.0.0.1", "LOG_LEVEL": "info", "RATE_LIMIT_CREATE_PER_ADDRESS": "0"})
        check("the service starts with a read replica", wait_ready(port))
        base, server = f"http://127.0.0.1:{port}", {"Authorization": "Bearer " + project["serverKey"]}

        def subscribed_token():
            """A new installation with a token subscribed to the topic `news`; every step a write on the primary."""
            _, made = request("POST", f"{base}/v1/projects/replica-proj/installations",
                              {"appId": app["appId"], "fid": ""}, {"x-goog-api-key": app["apiKey"]})
            token = f"{made['fid']}:replica-{time.time_ns()}"
            registered, _ = request("PUT", f"{base}/v1/projects/replica-proj/installations/{made['fid']}/registration",
                                    {"token": token, "platform": "android"}, server)
            added, _ = request("POST", f"{base}/iid/v1:batchAdd", {"to": "/topics/news", "registration_tokens": [token]},
                               {**server, "access_token_auth": "true"})
            return token, registered == 200 and added == 200

        def members():
            status, body = request("GET", f"{base}/v1/projects/replica-proj/topics/news/registrations", None, server)
            return status, {r["token"] for r in (body or {}).get("registrations", [])}

        def sendable(token):
            status, body = request("GET", f"{base}/v1/projects/replica-proj/registrations/{token}:sendability", None,
                                   server)
            return status, (body or {}).get("reason")

        first, ok = subscribed_token()
        check("a subscribed token is written", ok)
        check("the standby replays it", standby.caught_up())
        check("who the topic reaches: the token, read on the standby", members() == (200, {first}), f"{members()}")
        standby.sql("SELECT pg_wal_replay_pause()")
        second, ok = subscribed_token()
        check("with replay paused, a second subscribed token is written (writes go to the primary)", ok)
        status, info = request("GET", f"{base}/iid/info/{second}?details=true", None, server)
        check("IID info reads its own write on the primary",
              status == 200 and "news" in (info or {}).get("rel", {}).get("topics", {}), f"{status} {info}")
        check("who the topic reaches comes from the paused standby: the second token is not there yet",
              members() == (200, {first}), f"{members()}")
        check("sendability comes from the standby too: it does not know the second token yet",
              sendable(second)[1] == "UNKNOWN_TOKEN", f"{sendable(second)}")
        standby.sql("SELECT pg_wal_replay_resume()")
        check("once replay resumes, the standby catches up", standby.caught_up())
        check("who the topic reaches: both tokens", members() == (200, {first, second}), f"{members()}")
        check("the second token is sendable", sendable(second) == (200, "OK"), f"{sendable(second)}")
        metrics = urllib.request.urlopen(f"{base}/metrics", timeout=10).read().decode()
        replica_idle = [line for line in metrics.splitlines()
                        if line.startswith('db_replica_pool_connections{state="idle"} ')]
        check("/metrics reports the replica's pool: the connections its reads opened",
              len(replica_idle) == 1 and int(replica_idle[0].split()[-1]) >= 1, f"{replica_idle}")
        standby.stop()
        fallen_back = members()
        check("with the standby down, targeting reads fall back to the primary",
              fallen_back == (200, {first, second}), f"{fallen_back}")
        if fallen_back[0] != 200:
            log.flush()
            print(open(f"{standby.dir}/service.log").read()[-3000:])
        third, ok = subscribed_token()
        check("and writes go on", ok and third in members()[1])
        service.send_signal(signal.SIGTERM)
        check("the service exits 0 on SIGTERM", service.wait(timeout=20) == 0)
    except Exception as error:
        check("the read-replica scenario ran to the end", False, str(error)[-1200:])
    finally:
        if service and service.poll() is None:
            service.kill()
        standby.remove()
        DB.drop()
    return summary("readreplica")


if __name__ == "__main__":
    sys.exit(main())
