"""Which of our modules a running driver process loaded, and whether driver code reached for the catalog.

The rule "the driver never reads the catalog" must hold in the processes, not only in the source: a
static import, an `importlib` call or a subprocess all reach the catalog at run time. With
$FAKE_GPUS_MODULE_REPORT=DIR set, `install()` (called by the driver package itself, before any driver
module is imported) adds an import finder that sees every module being loaded (import statements and
`importlib` alike) and an audit hook that watches file opens and process starts. Whenever
driver code is the nearest of our frames on the stack and the target is the catalog (or the test
bed), a violation is recorded. The report, DIR/<pid>.json, is written on SIGUSR1 and at exit.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import sys
import threading
from pathlib import Path

REPORT_ENV = "FAKE_GPUS_MODULE_REPORT"
_OURS = ("fake_gpus", "hostenv", "testbed")
_CATALOG = "fake_gpus.catalog"
_CATALOG_DIR = str(Path(__file__).resolve().parents[1] / "catalog")
_SPAWN_EVENTS = ("subprocess.Popen", "os.system", "os.posix_spawn", "os.exec", "os.spawn")
_violations: list[dict] = []
_lock = threading.Lock()
_installed = False


def _culprit() -> str | None:
    """The nearest frame of our code that is neither this module nor the catalog itself."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name.startswith(_OURS) and name != __name__ and not name.startswith(_CATALOG):
            return name
        frame = frame.f_back
    return None


def _record(kind: str, target: str, culprit: str | None) -> None:
    with _lock:
        _violations.append({"kind": kind, "target": target, "by": culprit})


class _ImportWatch:
    """A meta-path finder that finds nothing: it only sees each module on its first load."""

    @staticmethod
    def find_spec(name: str, path=None, target=None) -> None:
        if name.split(".")[0] == "testbed":
            _record("import", name, _culprit())
        elif name.startswith(_CATALOG):
            culprit = _culprit()
            if culprit and culprit.startswith("fake_gpus.driver"):
                _record("import", name, culprit)
        return None


def _hook(event: str, args: tuple) -> None:
    if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        path = os.fsdecode(args[0])
        if path.startswith(_CATALOG_DIR) and not path.endswith((".py", ".pyc")):
            culprit = _culprit()
            if culprit and culprit.startswith("fake_gpus.driver"):
                _record("open", path, culprit)
    elif event.startswith(_SPAWN_EVENTS):
        text = " ".join(os.fsdecode(a) if isinstance(a, (str, bytes, os.PathLike)) else " ".join(map(str, a))
                        for a in args if isinstance(a, (str, bytes, os.PathLike, list, tuple)))
        if _CATALOG in text or _CATALOG_DIR in text or "testbed." in text:
            culprit = _culprit()
            if culprit and culprit.startswith("fake_gpus.driver"):
                _record("process", text[:200], culprit)


def report() -> dict:
    """Our loaded modules, the Kubernetes client's typed API modules loaded (seconds of CPU each to import,
    see fake_gpus/driver/rest.py) and the violations seen so far."""
    loaded = list(sys.modules)
    modules = sorted(name for name in loaded if name.startswith(_OURS))
    client_apis = sorted(name for name in loaded if name.startswith("kubernetes.client.api."))
    with _lock:
        return {"pid": os.getpid(), "argv": sys.argv, "modules": modules, "client_apis": client_apis,
                "violations": list(_violations)}


def write_report(directory: Path | None = None) -> Path:
    """Write report() to DIR/<pid>.json (atomically) and return its path."""
    folder = Path(directory or os.environ[REPORT_ENV])
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{os.getpid()}.json"
    partial = target.with_suffix(".partial")
    partial.write_text(json.dumps(report(), indent=1) + "\n")
    partial.rename(target)
    return target


def install() -> None:
    """Start auditing this process, once; a no-op unless $FAKE_GPUS_MODULE_REPORT names a directory."""
    global _installed
    if _installed or not os.environ.get(REPORT_ENV):
        return
    _installed = True
    sys.meta_path.insert(0, _ImportWatch())
    sys.addaudithook(_hook)
    atexit.register(write_report)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGUSR1, lambda *_: write_report())
