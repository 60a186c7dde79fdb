"""Whether a component's health URL says ok, asked as kubeadm's checks ask: anonymously, on loopback, its
serving certificate not checked (nothing but the probe is sent). The fault campaign asks it of restarted
components, kind's `up` of an API server still starting."""

from __future__ import annotations

import http.client
import json
import ssl
import urllib.request

TIMEOUT = 2.0  # seconds per probe: a loaded apiserver answers slowly, not never


def http_ok(url: str) -> bool:
    """GET `url` answers 200 (a loopback component's own certificate is not checked)."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT, context=context if url.startswith("https") else None) as answer:
            body = answer.read(4096)
            if url.endswith("/health"):  # etcd answers 200 with {"health":"false"} while it has no leader
                return json.loads(body or b"{}").get("health") == "true"
            return answer.status == 200
    except (OSError, ValueError, http.client.HTTPException):  # HTTPException: a restarting server's cut answer
        return False
