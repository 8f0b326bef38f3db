"""Streams every target of a topic, page by page, through one of the two routes: `topic` (GET
/v1/projects/{p}/topics/{t}/registrations) or `condition` (POST /v1/projects/{p}/targets:resolve with
"'t' in topics", or $CONDITION). Prints rows, time, rows/s and the slowest page. Over one keep-alive connection, as a sender would.
Bounded: stops after 600 s.
    python3 bench/stream_targets.py PORT PROJECT TOPIC SERVER_KEY EXPECTED topic|condition [PAGE_SIZE]"""
import http.client
import json
import os
import re
import sys
import time

port, project, topic, key, expected, route = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6]
page_size = int(sys.argv[7]) if len(sys.argv) > 7 else 10000
headers = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}
connection = http.client.HTTPConnection("127.0.0.1", int(port), timeout=60)
token, rows, pages, slowest = None, 0, 0, 0.0
start = time.time()
while time.time() - start < 600:
    t0 = time.time()
    if route == "topic":
        path = f"/v1/projects/{project}/topics/{topic}/registrations?pageSize={page_size}"
        connection.request("GET", path + (f"&pageToken={token}" if token else ""), headers=headers)
    else:
        condition = os.environ.get("CONDITION") or f"'{topic}' in topics"
        body = {"condition": condition, "pageSize": page_size, **({"pageToken": token} if token else {})}
        connection.request("POST", f"/v1/projects/{project}/targets:resolve", json.dumps(body), headers)
    response = connection.getresponse()
    data = response.read()
    if response.status != 200:
        raise SystemExit(f"page {pages}: {response.status} {data[:300]!r}")
    slowest = max(slowest, time.time() - t0)
    # Counted and searched as bytes, not parsed: json.loads of a 10,000-row page costs the client ~20 ms, which would
    # be measured as the service's time. (The rows are parsed in the tests; here only the stream's speed matters.)
    rows += data.count(b'"fid":')
    pages += 1
    found = re.search(rb'"nextPageToken":"([^"]+)"', data[-300:])
    token = found.group(1).decode() if found else None
    if not token:
        break
elapsed = time.time() - start
print(f"{route}: streamed {rows} of {expected} targets in {pages} pages, {elapsed:.2f} s = {rows / elapsed:,.0f} rows/s; "
      f"slowest page {slowest * 1000:.0f} ms", flush=True)
