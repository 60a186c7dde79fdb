"""The import graph of our packages, read with `ast`: which component imports which, and which edges
break the layering.

An edge is any `import`/`from ... import` (at module level or inside a function), any call of
`importlib.import_module` / `__import__` with a literal name, and any other string literal that names
one of our modules (`python -m fake_gpus.catalog` handed to a subprocess). Docstrings are not code.

    python suites/unit/import_graph.py [ROOT]     # prints the component graph and any violation
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

# Components, lowest first: a component may import only components before it in this list.
LAYERS = (
    "hostenv",  # cache dirs, Go environment, versions, processes
    "fake_gpus.mig_placement",  # MIG placement maths: pure, shared by catalog validation and the driver
    "fake_gpus.catalog",  # hardware facts
    "fake_gpus.nvml",  # the fake libnvidia-ml.so.1 and its state directories
    "fake_gpus.node",  # a node's hardware contract: NodeHardware, mode, labels
    "fake_gpus.driver",  # our DRA driver: reads hardware through NVML only
    "fake_gpus.machine",  # simulated machines: hardware, OS views, provisioning, the KWOK publisher process
    # the test bed, one layer per subpackage (a module belongs to the longest prefix listed)
    "testbed.errors",  # the two error roots: bad input (exit 2) and environment (exit 1)
    "testbed.templates",  # Jinja templates and their loader
    "testbed.host",  # this machine: Debian packages, signals, leftovers, progress, network namespaces, Docker engine
    "testbed.toolchain",  # Kubernetes, etcd, kwok, kind binaries per minor
    "testbed.kube",  # Kubernetes API helpers: retries, views, namespaces, drains, watches, CDI view, slice diff
    "testbed.kubelet",  # the stand-in kubelet of KWOK nodes
    "testbed.clusters",  # the cluster interface, layouts, driver specs and the driver registry, feature gates
    "testbed.clusters.kind.nodes",  # what a kind node carries: labels, mounts, fake-NVML paths
    "testbed.clusters.kwok.nodes",  # a KWOK Node object
    "testbed.clusters.kind.images",  # kind's images built offline
    "testbed.clusters.kwok.driver",  # what a driver implements to run on KWOK
    "testbed.clusters.kind.driver",  # what a driver implements to run on kind
    "testbed.drivers",  # drivers under test, one folder each
    "testbed.clusters.kwok",  # the KWOK backend
    "testbed.clusters.kind",  # the kind backend
    "testbed.clusters.existing",  # a cluster someone else runs
    "testbed.clusters.registry",  # backend name -> cluster
    "testbed.beds",  # one test bed's life cycle: reuse or create, retries, images, logs, teardown
    "testbed.install",  # the fake fleet in a cluster someone else runs: the Helm chart's values, collisions, release
    "testbed.addons",  # scheduler add-ons from their own projects (Kueue) run against a bed
    "testbed.workloads",  # generated workloads, the oracle, replay
    "testbed.outcomes",  # will these manifests schedule: `try`
    "testbed.density",  # trace replay and the density report
    "testbed.conformance",  # the conformance suite
    "testbed.aiconformance",  # Kubernetes' AI-conformance tests built from source, run on a bed, their checklist
    "testbed.campaign",  # the fault campaign
    "testbed.upstream",  # Kubernetes' own DRA e2e
    "testbed.fresh",  # the README's commands on a throwaway root
    "testbed.pytest",  # pytest plugins: bed fixtures, proofs, skips
    "testbed.cli",  # the dra-testbed command, one module per subcommand
)
PACKAGES = ("hostenv", "fake_gpus", "testbed")
# "The driver never reads the catalog": driver modules may not import it, directly or by name.
DRIVER = "fake_gpus.driver"
CATALOG = "fake_gpus.catalog"
# Modules allowed to name (never import) what they must not load, with the reason.
NAMES_ONLY = {"fake_gpus.driver.audit": "names the catalog and the test bed to watch the process for them"}
_NAME = re.compile(r"(?<![\w./-])((?:hostenv|fake_gpus|testbed)(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\b")


@dataclass(frozen=True)
class Edge:
    """`source` (a module) refers to `target` (a module or package) at `file`:`line`, by `how`."""

    source: str
    target: str
    file: str
    line: int
    how: str  # "import" | "importlib" | "name"


def component(module: str) -> str | None:
    """The layer a module belongs to (longest matching prefix), None for package roots outside any."""
    best = None
    for layer in LAYERS:
        if module == layer or module.startswith(layer + "."):
            if best is None or len(layer) > len(best):
                best = layer
    return best


def _module_name(root: Path, file: Path) -> str:
    parts = list(file.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def _ours(name: str) -> bool:
    return name.split(".")[0] in PACKAGES


def module_edges(root: Path, file: Path) -> list[Edge]:
    """Every reference of `file` (under `root`) to a module of ours."""
    source = _module_name(root, file)
    tree = ast.parse(file.read_text(), str(file))
    rel = str(file.relative_to(root))
    docstrings = _docstrings(tree)
    package = source if file.name == "__init__.py" else source.rpartition(".")[0]
    edges: list[Edge] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            edges += [Edge(source, a.name, rel, node.lineno, "import") for a in node.names if _ours(a.name)]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if _ours(target):
                edges += [Edge(source, f"{target}.{a.name}" if _is_submodule(root, f"{target}.{a.name}") else target,
                               rel, node.lineno, "import") for a in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str) and _ours(node.args[0].value) and _is_import_call(node.func):
            edges.append(Edge(source, node.args[0].value, rel, node.lineno, "importlib"))
            docstrings.add(id(node.args[0]))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            edges += [Edge(source, m.group(1), rel, node.lineno, "name") for m in _NAME.finditer(node.value)
                      if "." in m.group(1)]  # a bare word "testbed" is prose, a dotted name is a module
    return [e for e in edges if e.target != source]


def _is_import_call(func: ast.expr) -> bool:
    if isinstance(func, ast.Attribute):
        return func.attr == "import_module"
    return isinstance(func, ast.Name) and func.id in ("__import__", "import_module")


def _is_submodule(root: Path, module: str) -> bool:
    path = root.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def all_edges(root: Path) -> list[Edge]:
    """Every edge between modules of our packages under `root` (the repository)."""
    edges: list[Edge] = []
    for package in PACKAGES:
        for file in sorted((root / package).rglob("*.py")):
            edges += module_edges(root, file)
    return edges


def test_imports(root: Path) -> list[Edge]:
    """Imports of a test module (suites, a conftest) by a benchmark: what benchmarks and tests share belongs in the
    library, where the layers judge it."""
    found = []
    for file in sorted((root / "benchmarks").rglob("*.py")):
        tree = ast.parse(file.read_text(), str(file))
        rel, source = str(file.relative_to(root)), _module_name(root, file)
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            found += [Edge(source, n, rel, node.lineno, "import") for n in names
                      if n.split(".")[0] == "suites" or n.split(".")[-1] == "conftest"]
    return found


def upward(edges: list[Edge]) -> list[Edge]:
    """Edges from a component to one above it (or to a component outside the layers)."""
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    bad = []
    for e in edges:
        if e.how == "name" and e.source in NAMES_ONLY:
            continue
        src, dst = component(e.source), component(e.target)
        if src is None or dst is None:
            if src != dst and not (dst is None and e.target in PACKAGES):
                bad.append(e)
            continue
        if rank[dst] > rank[src]:
            bad.append(e)
    return bad


def catalog_reads(edges: list[Edge]) -> list[Edge]:
    """Driver modules that refer to the catalog."""
    return [e for e in edges if component(e.source) == DRIVER and component(e.target) == CATALOG
            and not (e.how == "name" and e.source in NAMES_ONLY)]


def component_graph(edges: list[Edge]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {layer: set() for layer in LAYERS}
    for e in edges:
        src, dst = component(e.source), component(e.target)
        if src and dst and src != dst and not (e.how == "name" and e.source in NAMES_ONLY):
            graph[src].add(dst)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every elementary cycle found by depth-first search (each reported once, from its first node)."""
    found: list[list[str]] = []
    seen: set[frozenset[str]] = set()

    def visit(node: str, path: list[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt in path:
                cycle = path[path.index(nxt):]
                if frozenset(cycle) not in seen:
                    seen.add(frozenset(cycle))
                    found.append(cycle + [nxt])
            else:
                visit(nxt, path + [nxt])

    for start in sorted(graph):
        visit(start, [start])
    return found


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(__file__).resolve().parents[2]
    edges = all_edges(root)
    graph = component_graph(edges)
    for layer in LAYERS:
        print(f"{layer:18} -> {', '.join(sorted(graph[layer])) or '(nothing of ours)'}")
    problems = [("upward", e) for e in upward(edges)] + [("driver reads catalog", e) for e in catalog_reads(edges)] + \
        [("benchmark imports a test module", e) for e in test_imports(root)]
    for what, e in problems:
        print(f"VIOLATION {what}: {e.file}:{e.line} {e.source} -> {e.target} ({e.how})")
    for cycle in cycles(graph):
        print(f"VIOLATION cycle: {' -> '.join(cycle)}")
    print(f"{len(edges)} edges, {len(problems)} violations, {len(cycles(graph))} cycles")
    return 1 if problems or cycles(graph) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
