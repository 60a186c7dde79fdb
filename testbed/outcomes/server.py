"""One create request as kubectl makes it: dry run or real, with server-side field validation, and the
server's warnings (the `Warning` response headers, which the dynamic client drops) returned with the object.

`fieldValidation=Warn` makes the API server name each unknown or duplicate field by its path in a warning
(`unknown field "spec.spec"`) instead of dropping it silently, which is what a plain create does.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from kubernetes import client
from kubernetes.client.exceptions import ApiException

# RFC 7234 warn-value as the API server writes it: 299 - "text" (quotes inside escaped); urllib3 joins several
_WARNING = re.compile(r'299\s+\S+\s+"((?:[^"\\]|\\.)*)"')
_FIELD = re.compile(r'^(unknown|duplicate) field "((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class FieldWarning:
    """A field the server named: unknown or duplicate, by its path in the object."""

    problem: str  # "unknown" | "duplicate"
    path: str


@dataclass
class Created:
    """The server's answer to a create: the object as stored (or as it would be) and its warnings."""

    body: dict
    warnings: list[str]

    @property
    def fields(self) -> list[FieldWarning]:
        found = []
        for text in self.warnings:
            match = _FIELD.match(text)
            if match:
                found.append(FieldWarning(match[1], match[2].replace('\\"', '"')))
        return found


def create(api: client.ApiClient, path: str, body: dict, dry_run: bool, validation: str = "Warn") -> Created:
    """POST `body` to the collection at `path`; ApiException when the server refuses it."""
    query = [("fieldValidation", validation)] + ([("dryRun", "All")] if dry_run else [])
    request = api.param_serialize("POST", path, query_params=query, body=body, auth_settings=["BearerToken"],
                                  header_params={"Content-Type": "application/json", "Accept": "application/json"})
    response = api.call_api(*request)
    data = response.read()
    if not 200 <= response.status <= 299:
        raise ApiException(status=response.status, reason=response.reason, body=(data or b"").decode(errors="replace"))
    header = response.getheader("Warning") or ""
    warnings = [text.replace('\\"', '"').replace("\\\\", "\\") for text in _WARNING.findall(header)]
    return Created(json.loads(data or b"{}"), warnings)
