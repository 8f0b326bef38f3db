"""Pages through GET /v1/projects/{p}/topics/{t}/registrations until the end; prints rows, time, rows/s and the
slowest page. Bounded: stops after 600 s."""
import re
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
    body = urllib.request.urlopen(req).read()
    slowest = max(slowest, time.time() - t0)
    # Counted and searched as bytes, not parsed: json.loads of a 10,000-row page costs the client ~20 ms, which would
    # be measured as the service's time. (The rows are parsed in the tests; here only the stream's speed matters.)
    rows += body.count(b'"fid":')
    pages += 1
    found = re.search(rb'"nextPageToken":"([^"]+)"', body[-200:])
    token = found.group(1).decode() if found else None
    if not token:
        break
elapsed = time.time() - start
print(f"streamed {rows} of {expected} registrations in {pages} pages, {elapsed:.1f} s = {rows / elapsed:.0f} rows/s; slowest page {slowest * 1000:.0f} ms")
