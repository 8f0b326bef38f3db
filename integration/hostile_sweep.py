"""A hostile sweep driven by openapi.yaml: every operation, and in it every path and query parameter, every header its
security names and every top-level body field, gets a corpus of hostile values (NUL, CR/LF, Int64 and Int32 edges,
huge and negative numbers, exponents, empty, 64 KiB strings, invalid UTF-8, lone surrogates, percent-encoded
controls, unicode look-alikes), sent over a raw socket with valid credentials otherwise, so the requests reach the
handlers. After each operation the same process must still answer /healthz; no answer may be 5xx, and every request
must get one. At the end `token-registry jobs run` must succeed and a deletion of another project must still be
delivered (and its receipt done). About a minute here; loopback only.

Fails on the code before the hardening issue: `Registry-Signature: t=-9223372036854775808` stopped the process, and
`linkedServices/crm%00:rotateSecret` re-sealed the real service so that the jobs run failed for every project.
"""
import base64
import hashlib
import hmac
import http.server
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

import yaml

from harness import BIN, ROOT, Database, check, free_port, request, summary

UNRESERVED = set(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def lone(code):
    """A lone surrogate as the bytes a careless encoder writes (invalid UTF-8)."""
    return chr(code).encode("utf-8", "surrogatepass")


# Hostile values as bytes (what goes on the wire once encoded for its place).
STRINGS = [
    b"", b"\x00", b"a\x00b", b"crm\x00", b"crm\x00x", b"\r\n", b"a\r\nX-Injected: 1", b"\n", b"\x7f", b"\x1b[31m",
    b"%00", b"%0d%0a", b"%25", b"9223372036854775807", b"-9223372036854775808", b"9223372036854775808",
    b"-9223372036854775809", b"2147483647", b"-2147483648", b"4294967296", b"1e308", b"-1e309", b"1.5", b"-0",
    b"0x7f", b"NaN", b"Infinity", b"A" * 65536, lone(0xD800), lone(0xDFFF), b"\xff\xfe", b"\xc0\xaf",
    "ｃｒｍ".encode(), "crm\u200b".encode(), "\u202etxt".encode(), b"../../etc/passwd", b"t=-9223372036854775808,v1=00",
    b"FIS_v2 " + b"A" * 600, b" ", b"*", b"?", b"#", b"/",
] + [
    # Incompressible text of the token alphabet around an index entry's size (2704 bytes): a field stored in a B-tree
    # index with a limit past what fits failed in PostgreSQL (54000, a 500) at 3000 random bytes, where "A" * n
    # compresses and passes (IndexedInputLimitTests holds the schema's side).
    bytes(random.Random(n).choices(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_:.-", k=n))
    for n in (2048, 2049, 3000, 4096)
]
# JSON number literals, written raw into bodies.
NUMBERS = [
    b"9223372036854775807", b"9223372036854775808", b"-9223372036854775808", b"-9223372036854775809", b"1e400",
    b"-1e400", b"1.0e-400", b"0.0000001", b"-0", b"2147483648", b"18446744073709551616", b"1" + b"0" * 60, b"-1",
    b"0",
]
TYPES = [b"null", b"true", b"[]", b"{}", b"[" * 40 + b"]" * 40, b'{"a":' * 40 + b"1" + b"}" * 40]
# Whole bodies.
BODIES = [b"", b"\x00", b"\xff\xfe\xfd", b"{", b'{"a":"\\ud800"}', b"[" * 2000, b'{"a":1,"a":2}',
          b"{" + b'"k":1,' * 5000 + b'"z":1}', b"a=%00&b=%ZZ&=&&", b"A" * 70000]


def enc_path(value):
    return "".join(chr(b) if b in UNRESERVED else "%%%02X" % b for b in value)


def json_string(value):
    """A JSON string literal of the bytes: valid escapes for controls, the raw bytes otherwise (invalid UTF-8 stays)."""
    out = bytearray(b'"')
    for b in value:
        if b in (0x22, 0x5C):
            out += b"\\" + bytes([b])
        elif b < 0x20:
            out += b"\\u%04x" % b
        else:
            out.append(b)
    if value in (lone(0xD800), lone(0xDFFF)):
        return b'"\\u' + (b"d800" if value == lone(0xD800) else b"dfff") + b'"'
    return bytes(out) + b'"'


def raw_request(port, method, target, headers, body, timeout=15):
    """One request over its own connection; the status, or None when no answer came."""
    head = f"{method} {target} HTTP/1.1\r\n".encode("latin-1", "replace") if isinstance(target, str) else target
    head += b"Host: 127.0.0.1\r\nConnection: close\r\n"
    for name, value in headers.items():
        head += name.encode() + b": " + (value if isinstance(value, bytes) else value.encode()) + b"\r\n"
    if body is not None:
        head += b"Content-Length: %d\r\n" % len(body)
    data = head + b"\r\n" + (body or b"")
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(data)
            received = b""
            while b"\r\n" not in received:
                chunk = s.recv(65536)
                if not chunk:
                    break
                received += chunk
        line = received.split(b"\r\n", 1)[0].split(b" ")
        return int(line[1]) if len(line) > 1 and line[1].isdigit() else None
    except (OSError, ValueError):
        return None


class Receiver(http.server.ThreadingHTTPServer):
    """A linked service: records each notice; answers 202 for the swept project (so its deliveries wait for an
    ack), 200 for the other."""

    def __init__(self):
        self.notices = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(inner):
                body = inner.rfile.read(int(inner.headers.get("Content-Length", "0")))
                notice = json.loads(body)
                self.notices.append(notice)
                inner.send_response(202 if notice.get("project") == "sweep-proj" else 200)
                inner.send_header("Content-Length", "0")
                inner.end_headers()

            def log_message(inner, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.server_address[1]}/hook"


def sign(secret, message):
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


class Sweep:
    def __init__(self, port, db, receiver, spec):
        self.port, self.db, self.receiver, self.spec = port, db, receiver, spec
        self.base = f"http://127.0.0.1:{port}"
        self.failures = []
        self.sent = 0
        self.base_statuses = {}
        self.created = 0

    # --- fixtures -------------------------------------------------------------------------------------------------

    def setup(self):
        self.project = self.db.cli("project", "create", "--id", "sweep-proj", "--number", "31337")
        self.key = self.project["serverKey"]
        self.web = self.db.cli("app", "create", "--project", "sweep-proj", "--platform", "web")
        victim = self.db.cli("project", "create", "--id", "victim-proj", "--number", "31338")
        self.victim = {"key": victim["serverKey"],
                       "web": self.db.cli("app", "create", "--project", "victim-proj", "--platform", "web")}
        for project, key in (("sweep-proj", self.key), ("victim-proj", self.victim["key"])):
            status, body = request("POST", f"{self.base}/v1/projects/{project}/linkedServices",
                                   {"name": "crm", "endpoint": self.receiver.endpoint},
                                   {"Authorization": f"Bearer {key}"})
            assert status == 200, (status, body)
            if project == "sweep-proj":
                self.handed = body["secret"]
        self.own = self.rotate_as_service(self.handed)
        # A delivery waiting for its acknowledgement, for the ack route's base request.
        gone = self.installation()
        request("DELETE", f"{self.base}/v1/projects/sweep-proj/installations/{gone['fid']}", None, self.server())
        self.jobs()
        self.acked_fid = gone["fid"]
        self.delivery_id = next(n["deliveryId"] for n in self.receiver.notices if n["fid"] == gone["fid"])
        checkin = json.loads(self.http("POST", "/checkin", b"{}", {"Content-Type": "application/json"}))
        self.aid = f"AidLogin {checkin['android_id']}:{checkin['security_token']}"

    def rotate_as_service(self, secret):
        t = str(int(time.time()))
        body = b"{}"
        signature = sign(secret, f"registry-rotate.v1\n{t}\nsweep-proj\ncrm\n".encode() + body)
        status, answer = request("POST", f"{self.base}/v1/projects/sweep-proj/linkedServices/crm:rotateSecret", {},
                                 {"Registry-Signature": f"t={t},v1={signature}"})
        assert status == 200, (status, answer)
        return answer["secret"]

    def http(self, method, path, body, headers):
        req = urllib.request.Request(self.base + path, data=body, method=method, headers=headers)
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.read()

    def server(self):
        return {"Authorization": f"Bearer {self.key}"}

    def installation(self):
        status, body = request("POST", f"{self.base}/v1/projects/sweep-proj/installations",
                               {"fid": "", "appId": self.web["appId"], "authVersion": "FIS_v2", "sdkVersion": "w:1"},
                               {"x-goog-api-key": self.web["apiKey"]})
        assert status == 200, (status, body)
        return {"fid": body["fid"], "refresh": body["refreshToken"], "auth": body["authToken"]["token"]}

    def fixture(self):
        """A live installation with consent, a registration and a topic, fresh for each operation."""
        i = self.installation()
        auth = {"x-goog-firebase-installations-auth": i["auth"]}
        request("PUT", f"{self.base}/v1/projects/sweep-proj/installations/{i['fid']}/consent",
                {"autoInitEnabled": True}, auth)
        token = i["fid"] + ":sweep-token"
        request("PUT", f"{self.base}/v1/projects/sweep-proj/installations/{i['fid']}/registration",
                {"token": token, "platform": "android"}, self.server())
        request("POST", f"{self.base}/v1/projects/sweep-proj/registrations/{urllib.parse.quote(token)}"
                        f"/topicSubscriptions?topicName=news", {}, self.server())
        i["token"] = token
        return i

    def jobs(self):
        run = subprocess.run([BIN, "jobs", "run"], env={**os.environ, "DATABASE_URL": self.db.url},
                             capture_output=True, text=True, timeout=120)
        return run

    # --- requests -------------------------------------------------------------------------------------------------

    def resolve(self, node):
        while isinstance(node, dict) and "$ref" in node:
            parts = node["$ref"].lstrip("#/").split("/")
            node = self.spec
            for part in parts:
                node = node[part]
        return node

    def credentials(self, operation, i):
        schemes = [name for requirement in operation.get("security", [{}]) for name in requirement]
        # A server key where the operation takes one (a rotation takes it or the service's signature).
        scheme = "serverKey" if "serverKey" in schemes else (schemes[0] if schemes else None)
        return {
            "serverKey": {"Authorization": f"Bearer {self.key}"},
            "apiKey": {"x-goog-api-key": self.web["apiKey"]},
            "refreshToken": {"Authorization": f"FIS_v2 {i['refresh']}", "x-goog-api-key": self.web["apiKey"]},
            "installationToken": {"x-goog-firebase-installations-auth": i["auth"]},
            "aidLogin": {"Authorization": self.aid},
            "registrySignature": {},
            None: {},
        }.get(scheme, {})

    def path_values(self, i, operation_path):
        values = {"project": "sweep-proj", "fid": i["fid"], "registration": i["token"], "token": i["token"],
                  "topic": "news", "name": "crm"}
        if "/acks/" in operation_path:
            values["fid"] = self.acked_fid
        if operation_path.endswith(":subscribe") or operation_path.endswith(":unsubscribe"):
            values["registration"] = i["fid"]  # the client verbs name the FID
        return {k: v.encode() for k, v in values.items()}

    def base_body(self, operation, i):
        body = operation.get("requestBody")
        if not body:
            return None, None, {}
        content = self.resolve(body).get("content", {})
        if "application/json" in content:
            media = content["application/json"]
            schema = self.resolve(media.get("schema", {}))
            example = media.get("example")
            fields = {k: self.resolve(v) for k, v in (schema.get("properties") or {}).items()}
            values = dict(example) if isinstance(example, dict) else {}
            # The example's placeholders replaced by the fixtures' own values.
            if "appId" in values:
                values["appId"] = self.web["appId"]
            if "endpoint" in values:
                self.created += 1
                values["endpoint"], values["name"] = self.receiver.endpoint, f"svc{self.created}"
            return "json", values, fields
        if "application/x-www-form-urlencoded" in content:
            schema = self.resolve(content["application/x-www-form-urlencoded"].get("schema", {}))
            fields = {k: self.resolve(v) for k, v in (schema.get("properties") or {}).items()}
            return "form", {"app": "com.example", "X-subtype": "1234", "sender": "1234"}, fields
        return None, None, {}

    def encode_body(self, kind, values, raw_field=None, raw=None):
        if kind == "json":
            members = [json.dumps(k).encode() + b":" + json.dumps(v).encode() for k, v in values.items()
                       if k != raw_field]
            if raw_field is not None:
                members.append(json.dumps(raw_field).encode() + b":" + raw)
            return b"{" + b",".join(members) + b"}"
        if kind == "form":
            pairs = [(k.encode(), str(v).encode()) for k, v in values.items() if k != raw_field]
            if raw_field is not None:
                pairs.append((raw_field.encode(), raw))
            return b"&".join(enc_path(k).encode() + b"=" + enc_path(v).encode() for k, v in pairs)
        return None

    def signed_ack(self, path, body):
        t = str(int(time.time()))
        message = f"registry-ack.v1\n{t}\nsweep-proj\n{self.acked_fid}\ncrm\n{self.delivery_id}\n".encode() + body
        return {"Registry-Signature": f"t={t},v1={sign(self.own, message)}"}

    def send(self, label, method, path_template, path_values, query, headers, body):
        path = path_template
        for name, value in path_values.items():
            path = path.replace("{" + name + "}", enc_path(value))
        if query:
            path += "?" + "&".join(enc_path(k.encode()) + "=" + enc_path(v) for k, v in query.items())
        status = raw_request(self.port, method, path, headers, body)
        self.sent += 1
        # 501 is the answer of the routes this service does not serve (FCM's sends), whatever is sent.
        if status is None or (status >= 500 and status != 501):
            self.failures.append(f"{method} {path_template} {label}: {status}")
        return status

    def operation(self, path_template, method, operation):
        i = self.fixture()
        params = [self.resolve(p) for p in operation.get("parameters", [])]
        kind, body_values, fields = self.base_body(operation, i)
        if "/acks/" in path_template:
            kind, body_values = "json", {"deliveryId": self.delivery_id}
        paths = self.path_values(i, path_template)
        headers = self.credentials(operation, i)
        if kind == "json":
            headers = {**headers, "Content-Type": "application/json"}
        elif kind == "form":
            headers = {**headers, "Content-Type": "application/x-www-form-urlencoded"}
        if "/acks/" in path_template:
            base_body = self.encode_body(kind, body_values)
            headers = {**headers, **self.signed_ack(path_template, base_body)}
        base_body = self.encode_body(kind, body_values) if kind else (b"{}" if method in ("POST", "PUT", "PATCH") else None)
        m = method.upper()
        # Required query parameters get a value of their kind (a topic's name, the first of an enum).
        query = {}
        for p in params:
            if p["in"] == "query" and p.get("required"):
                schema = self.resolve(p.get("schema", {}))
                query[p["name"]] = (schema.get("enum") or ["news"])[0].encode()
        status = self.send("base", m, path_template, paths, query, headers, base_body)
        self.base_statuses[f"{m} {path_template}"] = status
        for p in params:
            for value in STRINGS:
                if p["in"] == "path":
                    self.send(f"path {p['name']}={value[:16]!r}", m, path_template, {**paths, p["name"]: value}, {},
                              headers, base_body)
                elif p["in"] == "query":
                    self.send(f"query {p['name']}={value[:16]!r}", m, path_template, paths,
                              {**query, p["name"]: value}, headers, base_body)
                elif p["in"] == "header":
                    self.send(f"header {p['name']}={value[:16]!r}", m, path_template, paths, {},
                              {**headers, p["name"]: value}, base_body)
        # The headers the security scheme reads, and the ones every Firebase client sends.
        for header in {"Authorization", "x-goog-api-key", "x-goog-firebase-installations-auth", "Registry-Signature",
                       "Content-Type", "X-Forwarded-For", "Content-Encoding"}:
            for value in STRINGS:
                self.send(f"header {header}={value[:16]!r}", m, path_template, paths, {}, {**headers, header: value},
                          base_body)
        if kind:
            for field in fields:
                for raw in [json_string(v) for v in STRINGS] + NUMBERS + TYPES if kind == "json" else STRINGS:
                    self.send(f"body {field}={raw[:16]!r}", m, path_template, paths, {}, headers,
                              self.encode_body(kind, body_values, field, raw))
        if m in ("POST", "PUT", "PATCH"):
            for whole in BODIES:
                self.send(f"body {whole[:16]!r}", m, path_template, paths, {}, headers, whole)
        alive = raw_request(self.port, "GET", "/healthz", {}, None)
        if alive != 200:
            self.failures.append(f"{m} {path_template}: /healthz answered {alive} after the operation")
        if "rotateSecret" in path_template:
            # A server-key rotation in the base request made the project the secret's holder: the service takes its
            # own again, as a real one would.
            status, body = request("POST", f"{self.base}/v1/projects/sweep-proj/linkedServices/crm:rotateSecret",
                                   {}, self.server())
            self.own = self.rotate_as_service(body["secret"])
        return status


def main():
    if not os.environ.get("TEST_DATABASE_URL"):
        check("TEST_DATABASE_URL is set (scripts/test.sh sets it)", False)
        return summary("hostile sweep")
    with open(os.path.join(ROOT, "openapi.yaml")) as f:
        spec = yaml.safe_load(f)
    db = Database("sweep")
    db.create()
    receiver = Receiver()
    port = free_port()
    log = tempfile.NamedTemporaryFile("w+", delete=False, prefix="sweep-")
    # The CLI calls (project create, jobs run) inherit these: the same master key and endpoint policy as the service.
    os.environ.update({"SECRETS_KEY": base64.b64encode(os.urandom(32)).decode(), "LINKED_SERVICE_ALLOW_PRIVATE": "true"})
    env = {**os.environ, "DATABASE_URL": db.url, "PORT": str(port), "HOST": "127.0.0.1", "LOG_LEVEL": "warning",
           "JOBS_INTERVAL_SECONDS": "0", "RATE_LIMIT_CREATE_PER_ADDRESS": "0", "RATE_LIMIT_CHECKIN_PER_ADDRESS": "0"}
    service = subprocess.Popen([BIN, "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and raw_request(port, "GET", "/readyz", {}, None) != 200:
            time.sleep(0.2)
        sweep = Sweep(port, db, receiver, spec)
        sweep.setup()
        started = time.time()
        operations = 0
        # Deleting operations last, so the others find the fixtures they name.
        ordered = sorted(((p, m, o) for p, ops in spec["paths"].items() for m, o in ops.items()
                          if m in ("get", "post", "put", "patch", "delete")), key=lambda x: x[1] == "delete")
        for path, method, operation in ordered:
            sweep.operation(path, method, operation)
            operations += 1
            if service.poll() is not None:
                sweep.failures.append(f"the service exited during {method.upper()} {path}")
                break
        took = time.time() - started
        check(f"sweep: {operations} operations, {sweep.sent} hostile requests in {took:.0f} s, none 5xx or unanswered",
              not sweep.failures, "; ".join(sweep.failures[:15]))
        refused = {op: status for op, status in sweep.base_statuses.items() if not status or status >= 300}
        print(f"sweep: base requests not 2xx (their hostile variants still reach auth and parsing): {refused}")
        check("sweep: the base requests, with valid credentials, reach the handlers (at least 3 in 4 answer 2xx)",
              len(refused) <= len(sweep.base_statuses) // 4, str(refused))
        check("sweep: the same process answers /healthz at the end",
              service.poll() is None and raw_request(port, "GET", "/healthz", {}, None) == 200)
        # Another project's deletion still goes out, and the jobs run succeeds.
        status, body = request("POST", f"{sweep.base}/v1/projects/victim-proj/installations",
                               {"fid": "", "appId": sweep.victim["web"]["appId"], "authVersion": "FIS_v2",
                                "sdkVersion": "w:1"}, {"x-goog-api-key": sweep.victim["web"]["apiKey"]})
        victim_fid = body["fid"] if status == 200 else None
        request("DELETE", f"{sweep.base}/v1/projects/victim-proj/installations/{victim_fid}", None,
                {"Authorization": f"Bearer {sweep.victim['key']}"})
        run = sweep.jobs()
        check("sweep: `token-registry jobs run` succeeds afterwards", run.returncode == 0,
              (run.stdout + run.stderr)[-800:])
        check("sweep: another project's deletion is still delivered",
              any(n.get("fid") == victim_fid and n.get("project") == "victim-proj" for n in receiver.notices))
        status, receipt = request("GET", f"{sweep.base}/v1/projects/victim-proj/deletions/{victim_fid}", None,
                                  {"Authorization": f"Bearer {sweep.victim['key']}"})
        check("sweep: and its receipt is done", status == 200 and receipt.get("state") == "done", str(receipt))
    finally:
        service.terminate()
        try:
            service.wait(timeout=30)
        except subprocess.TimeoutExpired:
            service.kill()
        receiver.shutdown()
        db.drop()
        log.seek(0)
        text = log.read()
        crashes = [line for line in text.splitlines() if "Fatal error" in line or "runtime failure" in line]
        check("sweep: the service logged no crash", not crashes, "\n".join(crashes[:5]))
    return summary("hostile sweep")


if __name__ == "__main__":
    sys.exit(main())
