"""firebase-admin 7.7.0 loaded, unchanged, from a service-account file that `token-registry serviceaccount create`
printed: google-auth signs an RS256 assertion (aud = Google's token URI), posts it to the file's token_uri, and uses
the access token it gets for topic management (FCM v1 and legacy IID) and delete_instance_id. Only the SDK's base
URLs are patched, as for any self-hosted endpoint."""
import json
import os
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

import firebase_admin
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from firebase_admin import credentials, exceptions, instance_id, messaging

from conftest import BASE
from test_firebase_admin import installation_with_token


@pytest.fixture(scope="module")
def account_file(project, tmp_path_factory):
    path = tmp_path_factory.mktemp("sa") / "service-account.json"
    out = subprocess.run(
        [os.environ["TR_BIN"], "serviceaccount", "create", "--project", project["id"], "--base-url", BASE,
         "--out", str(path)],
        check=True, capture_output=True, text=True)
    # The private key goes to the file (0600), never to the terminal.
    assert "PRIVATE KEY" not in out.stdout and json.loads(out.stdout)["file"] == str(path)
    assert os.stat(path).st_mode & 0o777 == 0o600
    info = json.loads(path.read_text())
    assert info["type"] == "service_account" and info["token_uri"] == BASE + "/token"
    assert info["private_key"].startswith("-----BEGIN PRIVATE KEY-----")
    return path


@pytest.fixture(scope="module")
def app(project, account_file):
    instance_id._IID_SERVICE_URL = BASE + "/v1/"
    messaging._MessagingService.IID_URL = BASE
    app = firebase_admin.initialize_app(credentials.Certificate(str(account_file)),
                                        name="service-account-" + uuid.uuid4().hex[:6])
    assert app.project_id == project["id"]
    service = messaging._get_messaging_service(app)
    service._fcm_topic_url = f"{BASE}/v1/projects/{project['id']}/registrations"
    yield app
    firebase_admin.delete_app(app)


def test_topics_and_deletion_with_the_service_account(app, project):
    _, a = installation_with_token(project)
    fid, b = installation_with_token(project)
    result = messaging.subscribe_to_topic([a, b, "no-such-token"], "sa-news", app=app)
    assert (result.success_count, result.failure_count) == (2, 1)
    legacy = messaging.subscribe_to_topic_legacy([a], "sa-legacy", app=app)
    assert legacy.success_count == 1
    instance_id.delete_instance_id(fid, app=app)
    with pytest.raises(exceptions.NotFoundError):
        instance_id.delete_instance_id("fAAAAAAAAAAAAAAAAAAAAA", app=app)


def post_token(form):
    request = urllib.request.Request(BASE + "/token", data=urllib.parse.urlencode(form).encode(), method="POST",
                                     headers={"Content-Type": "application/x-www-form-urlencoded"})
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_bad_assertions_are_invalid_grant(account_file):
    from google.auth import crypt, jwt
    info = json.loads(account_file.read_text())
    signer = crypt.RSASigner.from_service_account_info(info)
    now = int(time.time())
    good = {"iss": info["client_email"], "aud": "https://oauth2.googleapis.com/token", "iat": now, "exp": now + 3600,
            "scope": "https://www.googleapis.com/auth/cloud-platform"}
    grant = "urn:ietf:params:oauth:grant-type:jwt-bearer"
    status, body = post_token({"grant_type": grant, "assertion": jwt.encode(signer, good).decode()})
    assert status == 200 and body["token_type"] == "Bearer" and body["expires_in"] == 3600
    own = dict(good, aud=info["token_uri"])
    assert post_token({"grant_type": grant, "assertion": jwt.encode(signer, own).decode()})[0] == 200
    for bad in [dict(good, aud="https://evil.example/token"), dict(good, exp=now + 7200),
                dict(good, iat=now - 7200, exp=now - 3600), dict(good, iss="someone@else.example")]:
        status, body = post_token({"grant_type": grant, "assertion": jwt.encode(signer, bad).decode()})
        assert (status, body["error"]) == (400, "invalid_grant"), bad
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    other = crypt.RSASigner.from_string(stranger, key_id=info["private_key_id"])
    status, body = post_token({"grant_type": grant, "assertion": jwt.encode(other, good).decode()})
    assert (status, body["error"]) == (400, "invalid_grant")
    assert post_token({"grant_type": "client_credentials"})[1]["error"] == "unsupported_grant_type"
    assert post_token({"grant_type": grant})[1]["error"] == "invalid_request"
    # An access token is a server credential of its project only.
    status, body = post_token({"grant_type": grant, "assertion": jwt.encode(signer, good).decode()})
    token = body["access_token"]
    request = urllib.request.Request(f"{BASE}/v1/projects/{info['project_id']}/linkedServices",
                                     headers={"Authorization": "Bearer " + token})
    with urllib.request.urlopen(request) as response:
        assert response.status == 200
    forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    request = urllib.request.Request(f"{BASE}/v1/projects/{info['project_id']}/linkedServices",
                                     headers={"Authorization": "Bearer " + forged})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request)
    assert refused.value.code == 401
