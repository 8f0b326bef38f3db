#!/usr/bin/env python3
"""OneSignal csv_export rows for bench/import.sh: onesignal_csv.py ROWS FILE."""
import random, sys, json
n, path = int(sys.argv[1]), sys.argv[2]
rnd = random.Random(42)
b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
def fid():
    return rnd.choice("cdef") + "".join(rnd.choice(b64) for _ in range(21))
with open(path, "w") as out:
    out.write("id,identifier,session_count,language,timezone,game_version,device_os,device_type,device_model,ad_id,tags,"
              "last_active,playtime,amount_spent,created_at,invalid_identifier,badge_count,external_user_id,"
              "notification_types,web_auth,web_p256\n")
    for i in range(n):
        kind = rnd.random()
        created = 1_690_000_000 + rnd.randrange(30_000_000)
        active = created + rnd.randrange(10_000_000)
        subscribed = rnd.random() > 0.05
        auth = p256 = ""
        if kind < 0.6:
            device, ident = 1, fid() + ":APA91b" + "".join(rnd.choice(b64) for _ in range(134))
        elif kind < 0.9:
            device, ident = 0, "%064x" % rnd.getrandbits(256)
        else:
            device, ident = 5, "https://fcm.googleapis.com/fcm/send/" + "".join(rnd.choice(b64) for _ in range(140))
            auth, p256 = "tBHItJI5svbpez7KI4CCXg", "BNcRdreALRFXTkOOUHK1EtK2wtaz5Ry4YfYCA_0QTpQtUbVlUls0VJXg7A8u-Ts1XbjhazAkj7I99e8QcYP7DkM"
        tags = json.dumps({"plan": rnd.choice(["free", "pro"]), "news": "1"}) if rnd.random() < 0.5 else "{}"
        user = "user_%d" % rnd.randrange(n // 2) if rnd.random() < 0.33 else ""
        out.write('%08x-0000-4000-8000-%012x,%s,%d,en,0,2.%d,14,%d,model,,"%s",%d,0,0,%d,%s,0,%s,%d,%s,%s\n' % (
            i, i, ident, rnd.randrange(100), rnd.randrange(9), device, tags.replace('"', '""'), active, created,
            "f" if subscribed else "t", user, 1 if subscribed else -2, auth, p256))
