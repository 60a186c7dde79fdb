"""Paged, undecoded lists of ResourceSlices that survive a compaction half-way through.

A fleet of thousands of nodes lists its slices in hundreds of pages; on a loaded machine that takes longer
than the apiserver's compaction interval (5 min), after which the first page's revision is gone and the
next page is refused with 410 Expired. The refusal carries a token continuing at the same key from the
current revision; the list may then miss or repeat an object changed in between, which its callers (one
writer, or nothing writing any more) can afford.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

PAGE = 200


def pages(list_call: Callable[..., object], **selectors: str) -> Iterator[dict]:
    """Every item `list_call` (e.g. ResourceV1Api.list_resource_slice) lists, as decoded JSON dicts."""
    from kubernetes.client.exceptions import ApiException  # the caller has the client loaded; `up` imports this early

    token = None
    while True:
        try:
            page = json.loads(list_call(limit=PAGE, _continue=token, _preload_content=False, **selectors).data)
        except ApiException as exc:
            if exc.status != 410 or not token:
                raise
            token = json.loads(exc.body)["metadata"]["continue"]  # expired: go on from the current revision
            continue
        yield from page["items"]
        token = page["metadata"].get("continue")
        if not token:
            return
