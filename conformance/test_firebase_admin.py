"""firebase-admin 7.7.0 pointed at the service as the reference §3.6 shows: topics through the FCM v1 path and
the legacy IID path, and delete_instance_id."""
import json
import urllib.request
import uuid

import firebase_admin
import google.auth.credentials
import pytest
from firebase_admin import exceptions, instance_id, messaging

from conftest import BASE


class StaticTokenCredentials(google.auth.credentials.Credentials):
    def __init__(self, token):
        super().__init__()
        self.token = token

    def refresh(self, request):
        pass


@pytest.fixture(scope="module")
def app(project):
    instance_id._IID_SERVICE_URL = BASE + "/v1/"
    messaging._MessagingService.IID_URL = BASE
    app = firebase_admin.initialize_app(StaticTokenCredentials(project["server_key"]), {"projectId": project["id"]},
                                        name="conformance-" + uuid.uuid4().hex[:6])
    service = messaging._get_messaging_service(app)
    service._fcm_topic_url = f"{BASE}/v1/projects/{project['id']}/registrations"
    yield app
    firebase_admin.delete_app(app)


def call(method, path, body=None, headers=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(BASE + path, data=data, method=method, headers=headers or {})
    with urllib.request.urlopen(request) as response:
        return json.loads(response.read() or b"{}")


def installation_with_token(project):
    web = project["web"]
    created = call("POST", f"/v1/projects/{project['id']}/installations", {"appId": web["appId"], "fid": ""},
                   {"x-goog-api-key": web["apiKey"], "Content-Type": "application/json"})
    token = f"tok-{uuid.uuid4().hex}"
    call("PUT", f"/v1/projects/{project['id']}/installations/{created['fid']}/registration",
         {"token": token, "platform": "android"},
         {"Authorization": "Bearer " + project["server_key"], "Content-Type": "application/json"})
    return created["fid"], token


def test_subscribe_v1_counts_successes_and_unregistered(app, project):
    # An unknown token is answered 404 with FCM's FcmError detail UNREGISTERED (firebase-wire.md §6), which the SDK
    # reads before the status: the reason is the send side's code, so one pruning rule serves both.
    _, a = installation_with_token(project)
    _, b = installation_with_token(project)
    result = messaging.subscribe_to_topic([a, "no-such-token", b], "news", app=app)
    assert (result.success_count, result.failure_count) == (2, 1)
    assert [(e.index, e.reason) for e in result.errors] == [(1, "UNREGISTERED")]
    again = messaging.subscribe_to_topic([a], "/topics/news", app=app)  # 409 counts as success
    assert again.success_count == 1
    gone = messaging.unsubscribe_from_topic([a, "no-such-token"], "news", app=app)
    assert (gone.success_count, gone.failure_count) == (1, 1)
    assert gone.errors[0].reason == "UNREGISTERED"


def test_legacy_iid_topic_functions(app, project):
    _, a = installation_with_token(project)
    result = messaging.subscribe_to_topic_legacy([a, "no-such-token"], "legacy", app=app)
    assert (result.success_count, result.failure_count) == (1, 1)
    assert result.errors[0].index == 1 and result.errors[0].reason == "NOT_FOUND"
    removed = messaging.unsubscribe_from_topic_legacy([a], "legacy", app=app)
    assert removed.success_count == 1


def test_delete_instance_id(app, project):
    fid, _ = installation_with_token(project)
    instance_id.delete_instance_id(fid, app=app)
    with pytest.raises(exceptions.NotFoundError):
        instance_id.delete_instance_id("fAAAAAAAAAAAAAAAAAAAAA", app=app)
    with pytest.raises(exceptions.ConflictError):
        instance_id.delete_instance_id(fid, app=app)
