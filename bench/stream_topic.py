"""Pages through GET /v1/projects/{p}/topics/{t}/registrations until the end; prints rows, time, rows/s and the
slowest page. Bounded: stops after 600 s."""
import json
import sys
import time
import urllib.request

port, project, topic, key, expected = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
url = f"http://127.0.0.1:{port}/v1/projects/{project}/topics/{topic}/registrations?pageSize=10000"
token, rows, pages, slowest = None, 0, 0, 0.0
start = time.time()
while time.time() - start < 600:
    t0 = time.time()
    req = urllib.request.Request(url + (f"&pageToken={token}" if token else ""), headers={"Authorization": "Bearer " + key})
    page = json.loads(urllib.request.urlopen(req).read())
    slowest = max(slowest, time.time() - t0)
    rows += len(page["registrations"])
    pages += 1
    token = page.get("nextPageToken")
    if not token:
        break
elapsed = time.time() - start
print(f"streamed {rows} of {expected} registrations in {pages} pages, {elapsed:.1f} s = {rows / elapsed:.0f} rows/s; slowest page {slowest * 1000:.0f} ms")
