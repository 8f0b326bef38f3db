"""Reads wrk --latency output on stdin; prints `name rps p50_ms p99_ms non2xx_or_errors`."""
import re
import sys

name = sys.argv[1]
text = sys.stdin.read()


def ms(label):
    m = re.search(r"^\s*" + label + r"%\s+([\d.]+)(us|ms|s)\s*$", text, re.M)
    if not m:
        return float("nan")
    value, unit = float(m.group(1)), m.group(2)
    return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value


rps = re.search(r"Requests/sec:\s+([\d.]+)", text)
errors = 0
m = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
if m:
    errors += int(m.group(1))
m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
if m:
    errors += sum(int(x) for x in m.groups())
print(f"{name} {float(rps.group(1)) if rps else 0:.0f} {ms('50'):.2f} {ms('99'):.2f} {errors}")
