"""openapi.yaml as a client contract: a Python client generated from it with openapi-python-client (the README's
command) runs the README's tour against the live service. Projects and apps come from the CLI, as in the tour.
The generated names must come from the operationIds and the component names, never from the paths. Every call
must answer a documented status (`raise_on_unexpected_status`), and every answer must parse into its model."""
import importlib
import os
import re
import subprocess
import sys

import pytest
import yaml

from conftest import BASE

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEC = os.path.join(ROOT, "openapi.yaml")
PACKAGE = "token_registry_client"


def snake(name):
    """The generator's snake case (openapi_python_client.utils.snake_case), for plain camelCase names."""
    words = re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+", name)
    return "_".join(w.lower() for w in words)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    out = tmp_path_factory.mktemp("generated")
    config = out / "config.yaml"
    config.write_text(f"package_name_override: {PACKAGE}\nproject_name_override: {PACKAGE}\n")
    done = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "openapi-python-client"), "generate", "--path", SPEC,
         "--meta", "none", "--output-path", str(out / PACKAGE), "--config", str(config)],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    sys.path.insert(0, str(out))
    yield out / PACKAGE
    sys.path.remove(str(out))


def test_generated_names_come_from_operation_ids_and_components(generated):
    spec = yaml.safe_load(open(SPEC))
    operations = {op["operationId"] for item in spec["paths"].values() for op in item.values()}
    modules = {p[:-3] for _, _, files in os.walk(generated / "api") for p in files if p != "__init__.py"}
    assert modules == {snake(o) for o in operations}, sorted(modules ^ {snake(o) for o in operations})
    components = {snake(n) for n in spec["components"]["schemas"]}
    path_derived = re.compile(r"^(get|post|put|patch|delete)_|_response_\d{3}|_body$|_v_?1_")
    models = [p[:-3] for p in os.listdir(generated / "models") if p.endswith(".py") and p != "__init__.py"]
    assert [m for m in models if path_derived.search(m)] == []
    # Every model is a component, or a part of one (a property's object or enum, named after its component).
    assert [m for m in models if not any(m == c or m.startswith(c + "_") for c in components)] == []


def test_the_readme_tour_through_the_generated_client(generated, project):
    api = lambda module: importlib.import_module(f"{PACKAGE}.api.{module}")
    models = importlib.import_module(f"{PACKAGE}.models")
    client_module = importlib.import_module(f"{PACKAGE}.client")
    pid, web = project["id"], project["web"]
    app_client = client_module.Client(base_url=BASE, raise_on_unexpected_status=True).with_headers(
        {"x-goog-api-key": web["apiKey"]})
    server = client_module.AuthenticatedClient(base_url=BASE, token=project["server_key"],
                                               raise_on_unexpected_status=True)

    def ok(response, model):
        assert response.status_code == 200, response.content[:500]
        assert isinstance(response.parsed, model), type(response.parsed)
        return response.parsed

    # An installation, as an SDK creates it.
    created = ok(api("installations.create_installation").sync_detailed(
        pid, client=app_client,
        body=models.CreateInstallationRequest(app_id=web["appId"], fid="", auth_version=models.CreateInstallationRequestAuthVersion.FIS_V2)),
        models.Installation)
    fid, auth = created.fid, created.auth_token.token
    installation = client_module.Client(base_url=BASE, raise_on_unexpected_status=True).with_headers(
        {"x-goog-firebase-installations-auth": f"FIS {auth}"})
    # Consent, by the installation itself, then its history as the backend sees it.
    state = ok(api("consent.set_consent").sync_detailed(
        pid, fid, client=installation,
        body=models.ConsentRequest(auto_init_enabled=True, policy_version="2026-01", source="onboarding")),
        models.ConsentState)
    assert state.auto_init_enabled is True
    history = ok(api("consent.get_consent").sync_detailed(pid, fid, client=server, view=models.ConsentView.HISTORY),
                 models.InstallationConsent)
    assert history.fid == fid
    # The backend reports the token its client received.
    token = fid + ":tok-123"
    registration = ok(api("registrations.report_registration").sync_detailed(
        pid, fid, client=server, body=models.RefreshCallback(token=token, platform=models.Platform.ANDROID)),
        models.Registration)
    assert registration.token == token
    # Topics: the FCM v1 shape and an IID batch.
    subscription = ok(api("topics.create_topic_subscription").sync_detailed(
        pid, token, client=server, topic_name="news"), models.TopicSubscription)
    assert subscription.topic_name == "news"
    batch = ok(api("iid.batch_add_topic").sync_detailed(
        client=server, body=models.IIDBatch(to="/topics/sports", registration_tokens=[token])), models.IIDResults)
    assert len(batch.results) == 1
    # Who a condition reaches, and whether one token may be sent to.
    page = ok(api("topics.resolve_targets").sync_detailed(
        pid, client=server, body=models.ResolveTargetsRequest(condition="'news' in topics && !('weather' in topics)")),
        models.TargetPage)
    assert token in [t.token for t in page.registrations]
    verdict = ok(api("registrations.get_sendability").sync_detailed(pid, token, client=server), models.Sendability)
    assert verdict.reason == models.SendabilityReason.OK
    # A service that must hear of deletions.
    linked = ok(api("deletions.create_linked_service").sync_detailed(
        pid, client=server, body=models.CreateLinkedServiceRequest(name="crm", endpoint="https://crm.example.com/hooks/deletions")),
        models.LinkedService)
    assert linked.secret
    # Delete the installation, then read the receipt and the feed.
    ok(api("installations.delete_instance_id").sync_detailed(pid, fid, client=server), models.Empty)
    receipt = ok(api("deletions.get_deletion").sync_detailed(pid, fid, client=server), models.DeletionReceipt)
    assert receipt.state == models.ReceiptState.PENDING
    # The feed is relayed from the outbox a moment after each commit: long-poll until the deletion is in it.
    seen, after = [], None
    for _ in range(10):
        feed = ok(api("deletions.list_events").sync_detailed(
            pid, client=server, wait_seconds=2, **({"after": after} if after else {})), models.EventPage)
        seen += [e.type_ for e in feed.events]
        after = feed.next_cursor or after
        if "installation.deleted" in seen:
            break
    assert seen[0] == "installation.created" and "installation.deleted" in seen, seen
