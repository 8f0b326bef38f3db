"""The README's tour, extracted from the README and run against the live service: it cannot drift."""
import os
import re
import subprocess

from conftest import BASE

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_readme_tour_runs():
    readme = open(os.path.join(ROOT, "README.md")).read()
    block = re.search(r"<!-- tour:begin -->\s*```sh\n(.*?)```\s*<!-- tour:end -->", readme, re.S)
    assert block, "the README has no tour block"
    script = "set -euo pipefail\n" + block.group(1)
    done = subprocess.run(["bash", "-c", script], env={**os.environ, "TR": os.environ["TR_BIN"], "B": BASE},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"tour failed:\nstdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    assert '"reason":"OK"' in done.stdout
    assert '"state":"pending"' in done.stdout
