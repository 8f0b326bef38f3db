"""The web SDK's calls from a real browser: headless Chromium loads a page from another loopback origin, and the
page makes the Firebase JS SDK's calls in order, with its headers (so each is preceded by a CORS preflight):
installations create, generate auth token, FCM registration create, the weekly PATCH, a client topic :subscribe,
registration delete, installation delete. It also checks what a page must not be able to do: call a server-key
route, or call for an app whose origins do not include the page's.

Needs TEST_DATABASE_URL (scripts/test.sh sets it), a debug build of token-registry and Debian's `chromium`.
Bounded: about 20 s.
"""
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading

from harness import BIN, Database, check, free_port, summary, wait_ready

DB = Database("browser")

PAGE = """<!doctype html>
<html><body><pre id="out">running</pre>
<script>
const BASE = %(base)s, PROJECT = %(project)s, APP = %(app)s, KEY = %(key)s, SERVER_KEY = %(serverKey)s;
const LOCKED_APP = %(lockedApp)s, LOCKED_KEY = %(lockedKey)s;
const heartbeat = btoa(JSON.stringify({version: 2, heartbeats: []}));
const results = {};
async function call(name, method, path, headers, body) {
  try {
    const response = await fetch(BASE + path, {method, headers, body: body === undefined ? undefined : JSON.stringify(body)});
    const text = await response.text();
    results[name] = {status: response.status, body: text ? JSON.parse(text) : null};
  } catch (error) {
    results[name] = {error: String(error)};
  }
  return results[name];
}
async function run() {
  // @firebase/installations: createInstallationRequest
  const created = await call("create", "POST", `/v1/projects/${PROJECT}/installations`,
    {"Content-Type": "application/json", "Accept": "application/json", "x-goog-api-key": KEY,
     "x-firebase-client": heartbeat},
    {fid: "dIsVQ2QVRT-TsRovAPrE3U", authVersion: "FIS_v2", appId: APP, sdkVersion: "w:0.6.24"});
  const fid = created.body && created.body.fid, refresh = created.body && created.body.refreshToken;
  // generateAuthTokenRequest
  const generated = await call("generate", "POST", `/v1/projects/${PROJECT}/installations/${fid}/authTokens:generate`,
    {"Content-Type": "application/json", "Accept": "application/json", "x-goog-api-key": KEY,
     "Authorization": `FIS_v2 ${refresh}`, "x-firebase-client": heartbeat},
    {installation: {sdkVersion: "w:0.6.24", appId: APP}});
  const auth = generated.body && generated.body.token;
  // @firebase/messaging: requestGetToken, requestUpdateToken, topic subscribe, requestDeleteToken
  const fcmHeaders = {"Content-Type": "application/json", "Accept": "application/json", "x-goog-api-key": KEY,
                      "x-goog-firebase-installations-auth": `FIS ${auth}`};
  const web = {web: {endpoint: "https://fcm.googleapis.com/fcm/send/browser-test", auth: "c29tZS1hdXRo",
                     p256dh: "BOr0eYQ2xY8", origin: location.host}};
  const registered = await call("register", "POST", `/v1/projects/${PROJECT}/registrations`, fcmHeaders, web);
  const token = registered.body && registered.body.token;
  await call("update", "PATCH", `/v1/projects/${PROJECT}/registrations/${encodeURIComponent(token)}`, fcmHeaders, web);
  await call("subscribe", "POST",
    `/v1/projects/${PROJECT}/registrations/${fid}/topicSubscriptions/news:subscribe`, fcmHeaders);
  await call("unregister", "DELETE", `/v1/projects/${PROJECT}/registrations/${encodeURIComponent(token)}`, fcmHeaders);
  // deleteInstallationRequest
  await call("delete", "DELETE", `/v1/projects/${PROJECT}/installations/${fid}`,
    {"Accept": "application/json", "x-goog-api-key": KEY, "Authorization": `FIS_v2 ${refresh}`});
  // What a page must not do.
  await call("serverRoute", "GET", `/v1/projects/${PROJECT}/linkedServices`, {"Authorization": `Bearer ${SERVER_KEY}`});
  await call("lockedApp", "POST", `/v1/projects/${PROJECT}/installations`,
    {"Content-Type": "application/json", "x-goog-api-key": LOCKED_KEY},
    {fid: "", authVersion: "FIS_v2", appId: LOCKED_APP, sdkVersion: "w:0.6.24"});
  document.getElementById("out").textContent = JSON.stringify(results);
}
run();
</script></body></html>
"""


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def main():
    browser = chromium()
    if browser is None:
        check("a Chromium is installed (apt-get install chromium)", False)
        return summary("browser")
    DB.create()
    DB.cli("migrate")
    project = DB.cli("project", "create", "--id", "browser-test", "--number", "4242")
    port, page_port = free_port(), free_port()
    page_origin = f"http://127.0.0.1:{page_port}"
    app = DB.cli("app", "create", "--project", "browser-test", "--platform", "web", "--web-origin", page_origin,
                 "--web-origin", "https://app.example")
    locked = DB.cli("app", "create", "--project", "browser-test", "--platform", "web", "--web-origin",
                    "https://elsewhere.example")
    workdir = tempfile.mkdtemp(prefix="browser-")
    log = open(os.path.join(workdir, "service.log"), "w")
    service = subprocess.Popen([BIN, "serve"], stdout=log, stderr=log, env={
        **os.environ, "DATABASE_URL": DB.url, "PORT": str(port), "HOST": "127.0.0.1", "LOG_LEVEL": "warning"})
    page = PAGE % {k: json.dumps(v) for k, v in {
        "base": f"http://127.0.0.1:{port}", "project": "browser-test", "app": app["appId"], "key": app["apiKey"],
        "serverKey": project["serverKey"], "lockedApp": locked["appId"], "lockedKey": locked["apiKey"]}.items()}
    with open(os.path.join(workdir, "index.html"), "w") as f:
        f.write(page)
    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(*a, directory=workdir, **k)
    http.server.SimpleHTTPRequestHandler.log_message = lambda *a: None
    pages = http.server.ThreadingHTTPServer(("127.0.0.1", page_port), handler)
    threading.Thread(target=pages.serve_forever, daemon=True).start()
    try:
        check("the service is ready", wait_ready(port))
        profile = tempfile.mkdtemp(prefix="chromium-")
        dom = subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
             f"--user-data-dir={profile}", "--virtual-time-budget=20000", "--dump-dom", page_origin + "/index.html"],
            capture_output=True, text=True, timeout=90).stdout
        match = re.search(r'<pre id="out">(.*?)</pre>', dom, re.S)
        raw = match.group(1) if match else "missing"
        check("the page ran to the end", raw not in ("running", "missing"), raw[:300])
        results = json.loads(raw.replace("&quot;", '"').replace("&amp;", "&")) if raw.startswith("{") else {}

        def status(name):
            return results.get(name, {}).get("status")

        check("create installation (preflighted) answers 200 with a fid",
              status("create") == 200 and results["create"]["body"].get("fid"), str(results.get("create")))
        check("generate auth token answers 200", status("generate") == 200, str(results.get("generate")))
        check("FCM registration answers 200 with a token",
              status("register") == 200 and "token" in results["register"]["body"], str(results.get("register")))
        check("the weekly PATCH answers 200", status("update") == 200, str(results.get("update")))
        check("client :subscribe answers 200", status("subscribe") == 200, str(results.get("subscribe")))
        check("registration delete answers 200 with JSON", status("unregister") == 200, str(results.get("unregister")))
        check("installation delete answers 200", status("delete") == 200, str(results.get("delete")))
        check("a server-key route is closed to pages", "error" in results.get("serverRoute", {}),
              str(results.get("serverRoute")))
        check("an app whose origins exclude the page is closed to it", "error" in results.get("lockedApp", {}),
              str(results.get("lockedApp")))
        requests = open(os.path.join(workdir, "service.log")).read()
        check("no server error was logged", '"level":"error"' not in requests, requests[-500:])
    finally:
        pages.shutdown()
        service.terminate()
        service.wait(timeout=15)
        DB.drop()
    return summary("browser")


if __name__ == "__main__":
    sys.exit(main())
