"""firebase-messaging 0.4.5 (the web-push client used by Home Assistant and others) pointed at the service.

Its FIS create sends an invalid FID (padded standard base64) as text/plain JSON and needs exactly 200;
its FCM registration sends applicationPubKey null and the raw FIS token, and reads `token`.
"""
import asyncio
import re

import firebase_messaging.fcmregister as fr
from firebase_messaging.fcmregister import FcmRegister, FcmRegisterConfig

from conftest import BASE

VALID_FID = re.compile(r"^[cdef][A-Za-z0-9_-]{21}$")


def register_client(project):
    fr.FCM_INSTALLATION = BASE + "/v1/"
    fr.FCM_REGISTRATION = BASE + "/v1/"
    return FcmRegister(FcmRegisterConfig(project_id=project["id"], app_id=project["web"]["appId"],
                                         api_key=project["web"]["apiKey"], messaging_sender_id=project["number"]))


def test_fcm_install_replaces_the_invalid_fid(project):
    async def run():
        client = register_client(project)
        try:
            return await client.fcm_install()
        finally:
            await client.close()

    installation = asyncio.run(run())
    assert installation is not None
    assert VALID_FID.match(installation["fid"]), installation["fid"]
    assert installation["expires_in"] == 604800
    assert installation["refresh_token"].startswith("3_")


def test_fcm_register_gets_a_token(project):
    async def run():
        client = register_client(project)
        try:
            installation = await client.fcm_install()
            registration = await client.fcm_register({"token": "GCMTOKEN"}, installation, client.generate_keys())
            return installation, registration
        finally:
            await client.close()

    installation, registration = asyncio.run(run())
    assert registration is not None
    assert registration["token"].startswith(installation["fid"] + ":")
    assert registration["name"].endswith("/registrations/" + installation["fid"])


def test_the_full_checkin_or_register_flow(project):
    """checkin_or_register(): protobuf GCM check-in, the GCM-form register3, FIS create, FCM registration; only the
    four URL constants are patched. A second client with the credentials it got checks in again with them."""
    fr.GCM_CHECKIN_URL = BASE + "/checkin"
    fr.GCM_REGISTER_URL = BASE + "/c2dm/register3"

    async def run():
        client = register_client(project)
        try:
            credentials = await client.checkin_or_register()
        finally:
            await client.close()
        again = register_client(project)
        again.credentials = credentials
        try:
            return credentials, await again.checkin_or_register()
        finally:
            await again.close()

    credentials, second = asyncio.run(run())
    gcm, fcm = credentials["gcm"], credentials["fcm"]
    assert int(gcm["android_id"]) > 0 and int(gcm["security_token"]) > 0
    assert gcm["token"] and "Error" not in gcm["token"]
    fid = fcm["installation"]["fid"]
    assert VALID_FID.match(fid)
    assert fcm["registration"]["token"].startswith(fid + ":")
    # The stored credentials are still good: the check-in keeps the same identity.
    assert second == credentials
