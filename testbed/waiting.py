"""Waiting on Kubernetes objects with watches instead of polling sleeps."""

from __future__ import annotations

import time
from typing import Any, Callable

import urllib3
from kubernetes import watch
from kubernetes.client.exceptions import ApiException


class WaitTimeout(AssertionError):
    """The condition did not hold in time; the message says what was last seen."""


def wait_for(
    list_func: Callable[..., Any],
    predicate: Callable[[Any], bool],
    *,
    name: str | None = None,
    timeout: float = 60.0,
    what: str = "condition",
    **list_kwargs: Any,
) -> Any:
    """Return the first object (optionally of `name`) listed by `list_func` for which `predicate` holds.

    Lists once, then follows a watch from that resourceVersion, so nothing between the two is missed;
    a watch that expires or is cut off (the apiserver restarted) is followed by a new list.
    """
    selector = {"field_selector": f"metadata.name={name}"} if name else {}
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        listing = list_func(**list_kwargs, **selector)
        for item in listing.items:
            last = item
            if predicate(item):
                return item
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise WaitTimeout(f"timed out after {timeout:.0f}s waiting for {what}; last seen: {_summary(last)}")
        stream = watch.Watch()
        try:
            for event in stream.stream(
                list_func, **list_kwargs, **selector,
                resource_version=listing.metadata.resource_version,
                timeout_seconds=max(1, int(remaining)),
            ):
                obj = event["object"]
                last = obj
                if event["type"] != "DELETED" and predicate(obj):
                    return obj
        except ApiException as exc:
            if exc.status != 410:  # an expired resourceVersion: list again
                raise
        except urllib3.exceptions.HTTPError:
            pass  # the watch was cut (an apiserver restart): list again
        finally:
            stream.stop()


def wait_gone(read_func: Callable[..., Any], *args: Any, timeout: float = 60.0, what: str = "deletion") -> None:
    """Wait until `read_func(*args)` answers 404."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            read_func(*args)
        except ApiException as exc:
            if exc.status == 404:
                return
            raise
        if time.monotonic() > deadline:
            raise WaitTimeout(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.1)


def _summary(obj: Any) -> str:
    if obj is None:
        return "nothing"
    status = getattr(obj, "status", None)
    meta = getattr(obj, "metadata", None)
    return f"{getattr(meta, 'name', '?')} status={status}"[:600]


def until(what: str, check: Callable[[], Any], timeout: float = 120.0, interval: float = 0.2) -> Any:
    """Poll `check` until it returns something truthy (returned); WaitTimeout naming `what` after `timeout`.
    For conditions spread over several objects (a pod's phase and its events), where no one watch fits."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise WaitTimeout(f"{what} within {timeout:.0f}s")
        time.sleep(interval)
