"""Fixtures: a project and apps made with the real CLI, on the service that run.sh started."""
import json
import os
import subprocess
import uuid

import pytest

BASE = os.environ.get("TR_BASE", "http://127.0.0.1:8080")


def cli(*args):
    out = subprocess.run([os.environ["TR_BIN"], *args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


@pytest.fixture(scope="session")
def project():
    number = str(uuid.uuid4().int % 10**12)
    project_id = "conf-" + uuid.uuid4().hex[:10]
    created = cli("project", "create", "--id", project_id, "--number", number)
    web = cli("app", "create", "--project", project_id, "--platform", "web")
    return {"id": project_id, "number": number, "server_key": created["serverKey"], "web": web}
