"""Kubernetes API calls by path, through the official client's ApiClient but without its typed API classes.

The client's CoreV1Api is some 63,000 lines of pydantic-validated methods: importing it costs about 1.8 s of
CPU (the rest of the client 0.6 s). `up` and the publisher used to pay that while kwokctl's components started
on the same two cores, for a handful of calls on nodes, service accounts and tokens. Those go by path here,
with the client's own authentication, TLS, errors (ApiException) and models (`returns="V1NodeList"`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from kubernetes import client

# the typed methods' keyword names -> the API's query parameter names
_QUERY_NAMES = {"_continue": "continue", "field_selector": "fieldSelector", "label_selector": "labelSelector",
                "resource_version": "resourceVersion", "timeout_seconds": "timeoutSeconds",
                "allow_watch_bookmarks": "allowWatchBookmarks"}


def request(api: client.ApiClient, method: str, path: str, *, body: Any = None, returns: str | None = None,
            preload: bool = True, timeout: float | None = None, **query: Any) -> Any:
    """`method` on `path` with the query given as the typed methods' keywords (`field_selector=...`); the
    result as the client's model `returns`, else as decoded JSON; with `preload=False`, the urllib3
    response unread (a watch, a page to decode elsewhere), as the typed methods' `_preload_content=False`.
    A status outside 2xx raises the client's ApiException, as the typed methods do."""
    from kubernetes.client.exceptions import ApiException

    params = [(_QUERY_NAMES.get(k, k), v) for k, v in query.items() if v is not None]
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    serialized = api.param_serialize(method=method, resource_path=path, query_params=params, header_params=headers,
                                     body=body, auth_settings=["BearerToken"])
    response = api.call_api(*serialized, _request_timeout=timeout)
    if not 200 <= response.status <= 299:
        response.read()
        raise ApiException.from_response(http_resp=response, body=None, data=None)
    if not preload:
        return response.response
    response.read()
    if returns:
        return api.deserialize(response.data.decode("utf-8"), returns, "application/json")
    return json.loads(response.data)


def lister(api: client.ApiClient, path: str) -> Callable[..., Any]:
    """A list call on `path` shaped like the typed ones (`limit`, `_continue`, selectors, `watch`,
    `_preload_content`), for `paging.pages` and the client's `watch.Watch().stream` (give it `return_type`)."""
    def list_call(_preload_content: bool = True, _request_timeout: float | None = None, **query: Any) -> Any:
        return request(api, "GET", path, preload=_preload_content, timeout=_request_timeout, **query)
    return list_call


def create(api: client.ApiClient, path: str, body: dict, *, exist_ok: bool = False) -> dict | None:
    """POST `body` to the collection at `path`; with `exist_ok`, one that exists already (409) is left as it is
    and None returned."""
    from kubernetes.client.exceptions import ApiException

    try:
        return request(api, "POST", path, body=body)
    except ApiException as exc:
        if exist_ok and exc.status == 409:
            return None
        raise
