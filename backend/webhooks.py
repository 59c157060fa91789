# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause

"""Webhook receivers of the demo and test backend (backend/app.py).

    POST /hooks/<provider>[?secret=S][&delay=MS][&status=N]

A receiver does what a provider's own receiver does: it checks the
delivery's signature when it is given the secret (secret=, the way the
provider signs), refuses a bad one with 400 before anything runs, then
counts one execution of the delivery, under "hook:<provider>:<id>" in
/__count (the id where the provider puts it), and answers with the
provider's acknowledgement:

    stripe    200 {"received":true}      Stripe-Signature, event "id"
    square    200, empty                 "event_id"
    paypal    200, empty                 event "id"
    adyen     200 [accepted]             eventCode:pspReference of the item
    wechat    204                        notification "id"
    alipay    200 success (text/plain)   form field notify_id
    github    200 {"ok":true}            X-Hub-Signature-256, X-GitHub-Delivery
    shopify   200, empty                 X-Shopify-Hmac-Sha256, X-Shopify-Event-Id
    twilio    200 empty TwiML            I-Twilio-Idempotency-Token
    standard  200, empty                 webhook-signature, webhook-id
    gitlab    200 {"ok":true}            Idempotency-Key
    orders    201 {"order":...}          X-Remote-User, order.number

delay=MS sleeps first (a slow receiver, refusals included), status=N
answers N instead (counted, as an execution that failed).  Standard
library only.
"""

import base64
import hashlib
import hmac
import json
import time
from urllib.parse import parse_qs


def _json(body):
    try:
        return json.loads(body.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None


def _get(doc, *path):
    for step in path:
        try:
            doc = doc[step]
        except (KeyError, IndexError, TypeError):
            return None
    return doc


def _adyen(doc):
    item = _get(doc, "notificationItems", 0, "NotificationRequestItem")
    if not isinstance(item, dict):
        return None
    return "%s:%s" % (item.get("eventCode"), item.get("pspReference"))


def _form(body, name):
    values = parse_qs(body.decode("latin-1"), keep_blank_values=True).get(name)
    return values[0] if values else None


# provider: (where its delivery's id is, its acknowledgement)
PROVIDERS = {
    "stripe": (lambda h, b, q: _get(_json(b), "id"),
               (200, "application/json", b'{"received":true}')),
    "square": (lambda h, b, q: _get(_json(b), "event_id"), (200, None, b"")),
    "paypal": (lambda h, b, q: _get(_json(b), "id"), (200, None, b"")),
    "adyen": (lambda h, b, q: _adyen(_json(b)),
              (200, "text/plain", b"[accepted]")),
    "wechat": (lambda h, b, q: _get(_json(b), "id"), (204, None, b"")),
    "alipay": (lambda h, b, q: _form(b, "notify_id"),
               (200, "text/plain", b"success")),
    "github": (lambda h, b, q: h.get("X-GitHub-Delivery"),
               (200, "application/json", b'{"ok":true}')),
    "shopify": (lambda h, b, q: h.get("X-Shopify-Event-Id"),
                (200, None, b"")),
    "twilio": (lambda h, b, q: h.get("I-Twilio-Idempotency-Token"),
               (200, "text/xml",
                b'<?xml version="1.0" encoding="UTF-8"?><Response></Response>')),
    "standard": (lambda h, b, q: h.get("webhook-id") or h.get("svix-id"),
                 (200, None, b"")),
    "gitlab": (lambda h, b, q: h.get("Idempotency-Key"),
               (200, "application/json", b'{"ok":true}')),
    "orders": (lambda h, b, q: "%s:%s" % (h.get("X-Remote-User"),
                                          _get(_json(b), "order", "number")),
               None),
}

SCHEMES = {"stripe": "stripe", "github": "github", "shopify": "shopify",
           "standard": "standard"}


def _hmac(key, data):
    return hmac.new(key, data, hashlib.sha256).digest()


def verify(scheme, secret, headers, body, tolerance=300):
    """None when the signature holds, else why not."""
    if scheme == "stripe":
        value = headers.get("Stripe-Signature") or ""
        items = [i.split("=", 1) for i in value.split(",") if "=" in i]
        ts = [v for k, v in items if k == "t"]
        sigs = [v for k, v in items if k == "v1"]
        if not ts or not sigs:
            return "no t= or v1="
        if abs(time.time() - int(ts[0])) > tolerance:
            return "too old"
        want = _hmac(secret.encode(), ts[0].encode() + b"." + body).hex()
        ok = any(hmac.compare_digest(want, s) for s in sigs)
    elif scheme == "standard":
        msg_id = headers.get("webhook-id") or headers.get("svix-id")
        ts = headers.get("webhook-timestamp") or headers.get("svix-timestamp")
        value = (headers.get("webhook-signature")
                 or headers.get("svix-signature") or "")
        if not msg_id or not ts:
            return "no id or timestamp"
        key = base64.b64decode(secret[6:] if secret.startswith("whsec_")
                               else secret)
        want = base64.b64encode(_hmac(key, ("%s.%s." % (msg_id, ts)).encode()
                                      + body)).decode()
        sigs = [s[3:] for s in value.split(" ") if s.startswith("v1,")]
        ok = any(hmac.compare_digest(want, s) for s in sigs)
    elif scheme == "github":
        value = headers.get("X-Hub-Signature-256") or ""
        want = "sha256=" + _hmac(secret.encode(), body).hex()
        ok = hmac.compare_digest(want, value)
    elif scheme == "shopify":
        value = headers.get("X-Shopify-Hmac-Sha256") or ""
        want = base64.b64encode(_hmac(secret.encode(), body)).decode()
        ok = hmac.compare_digest(want, value)
    else:
        return None
    return None if ok else "no signature matches"


def answer(provider, params, headers, body, counters):
    """(status, headers, body, note, key) of a delivery to /hooks/<provider>."""
    spec = PROVIDERS.get(provider)
    if spec is None:
        return (404, [("Content-Type", "text/plain")], b"no such receiver\n",
                "hook ?", "-")

    delay = int(params.get("delay") or 0)
    if delay > 0:
        time.sleep(delay / 1000.0)

    secret = params.get("secret")
    if secret and provider in SCHEMES:
        why = verify(SCHEMES[provider], secret, headers, body)
        if why:
            return (400, [("Content-Type", "text/plain")],
                    ("bad signature: %s\n" % why).encode(), "hook refused",
                    "-")

    delivery = spec[0](headers, body, params)
    if delivery is None:
        return (400, [("Content-Type", "text/plain")], b"no delivery id\n",
                "hook no id", "-")

    key = "hook:%s:%s" % (provider, delivery)
    total, n = counters.execute(key)

    out = [("X-Execution", str(n))]
    if spec[1] is None:
        status, ctype = 201, "application/json"
        ack = (json.dumps({"order": "ord-%d" % total, "key": delivery,
                           "execution": n}, separators=(",", ":"))
               + "\n").encode()
    else:
        status, ctype, ack = spec[1]
    if params.get("status"):
        status = int(params["status"])
    if ctype:
        out.append(("Content-Type", ctype))
    return status, out, ack, "hook %d/%d" % (n, total), key
