"""Opens N keep-alive connections to 127.0.0.1:PORT, sends one request on each and keeps them open; then reads the
server's RSS, checks that a new client is still served, and closes everything. Bounded: 120 s at most."""
import resource
import socket
import sys
import time

port, count, pid = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, count + 1000), hard))
deadline = time.time() + 120
conns = []
request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
for i in range(count):
    if time.time() > deadline:
        break
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(request)
    conns.append(s)
answered = 0
for s in conns:
    data = s.recv(4096)
    if data.startswith(b"HTTP/1.1 200"):
        answered += 1
rss = int([l for l in open(f"/proc/{pid}/status") if l.startswith("VmRSS")][0].split()[1])
start = time.time()
probe = socket.create_connection(("127.0.0.1", port), timeout=10)
probe.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
reply = probe.recv(4096)
elapsed = (time.time() - start) * 1000
print(f"open idle connections: {len(conns)} (first requests answered: {answered})")
print(f"service RSS with them open: {rss / 1024:.1f} MiB")
status_line = reply.split(b"\r\n")[0].decode()
print(f"new client while they are open: {status_line} in {elapsed:.1f} ms")
for s in conns:
    s.close()
