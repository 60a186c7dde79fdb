"""Waiting on Kubernetes objects with watches instead of polling sleeps."""

from __future__ import annotations

import inspect
import time
from typing import Any, Callable, Mapping

import urllib3


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
    def first(_objects: Mapping[str, Any], new: list[Any]) -> Any:
        return next((o for o in new if predicate(o)), None)  # only what is new: predicates may keep state

    return _follow(list_func, first, name, timeout, lambda last, _: f"{what}; last seen: {_summary(last)}", list_kwargs)


def wait_for_all(
    list_func: Callable[..., Any],
    done: Callable[[Mapping[str, Any]], bool],
    *,
    name: str | None = None,
    timeout: float = 60.0,
    what: str = "condition",
    **list_kwargs: Any,
) -> dict[str, Any]:
    """Return the objects (by name; only `name` if given) listed by `list_func` once `done(objects)` holds.

    Like `wait_for`, but judges the whole set, so it also sees objects go (`done` may want none left)."""
    return _follow(list_func, lambda objects, _new: dict(objects) if done(objects) else None, name, timeout,
                   lambda _last, objects: f"{what}; left: {sorted(objects)}", list_kwargs)


def _follow(list_func: Callable[..., Any], check: Callable[[Mapping[str, Any], list[Any]], Any], name: str | None,
            timeout: float, describe: Callable[[Any, Mapping[str, Any]], str], list_kwargs: dict[str, Any]) -> Any:
    """List, then watch from that resourceVersion, until `check(objects by name, objects new since the
    last check)` answers something other than None, and return that; WaitTimeout with
    `describe(last object seen, objects)` when `timeout` runs out."""
    from kubernetes import watch  # loaded on first use: `up` imports this module before the client is needed
    from kubernetes.client.exceptions import ApiException

    selector = {"field_selector": f"metadata.name={name}"} if name else {}
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        listing = list_func(**list_kwargs, **selector)
        objects = {i.metadata.name: i for i in listing.items}
        last = listing.items[-1] if listing.items else last
        found = check(objects, list(listing.items))
        if found is not None:
            return found
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise WaitTimeout(f"timed out after {timeout:.0f}s waiting for {describe(last, objects)}")
        # the client derives the item type from the list type's name, which fails for ResourceClaim: name it
        stream = watch.Watch(return_type=_item_type(list_func))
        try:
            for event in stream.stream(list_func, **list_kwargs, **selector, resource_version=listing.metadata.resource_version,
                                       timeout_seconds=max(1, int(remaining))):
                obj = last = event["object"]
                if event["type"] == "DELETED":
                    objects.pop(obj.metadata.name, None)
                elif event["type"] in ("ADDED", "MODIFIED"):
                    objects[obj.metadata.name] = obj
                found = check(objects, [obj] if event["type"] != "DELETED" else [])
                if found is not None:
                    return found
        except ApiException as exc:
            if exc.status != 410:  # an expired resourceVersion: list again
                raise
        except urllib3.exceptions.HTTPError:
            pass  # the watch was cut (an apiserver restart): list again
        finally:
            stream.stop()


def _item_type(list_func: Callable) -> str | None:
    """The model class name of one item of what `list_func` lists (e.g. ResourceV1ResourceClaim); None
    (the client guesses from the list type's name) when its return type does not say."""
    list_type = inspect.signature(list_func).return_annotation
    items = getattr(list_type, "openapi_types", {}).get("items", "")
    return items[items.index("[") + 1:-1] if "[" in items else None


def wait_gone(read_func: Callable[..., Any], *args: Any, timeout: float = 60.0, what: str = "deletion") -> None:
    """Wait until `read_func(*args)` answers 404."""
    from kubernetes.client.exceptions import ApiException

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
