"""`e2e.test` of a release, built through the toolchain and cached beside the other binaries.

The binary links only the test/e2e packages that hold DRA tests (found per release by scanning the
module's sources) plus the framework set-up the full `e2e.test` has; `--ginkgo.dry-run` of both lists
the same DRA specs, and this one builds in a fraction of the time.
"""

from __future__ import annotations

import re
from pathlib import Path

from hostenv.goenv import go_binary, go_env
from hostenv.versions import Release, release_for
from testbed.toolchain import gobuild
from testbed.toolchain.projects import Project, kubernetes_test_download
from testbed.toolchain.resolve import ensure_project

BINARY = "e2e.test"
# Compiles run under `nice -n 10`: the machine is shared and the build takes minutes.
# A package holds DRA tests when it labels a spec "DRA" or gates one on the DRA feature.
_DRA_MARK = re.compile(r'WithLabel\("DRA"\)|features?\.DynamicResourceAllocation\b')
# The full e2e.test's blank imports for side effects (feature constants, framework hooks), read from the
# release's own test/e2e/e2e_test.go: they move between releases (1.37: test/utils/ktesting/format).
_FRAMEWORK_IMPORT = re.compile(r'^\s*_\s+"(k8s\.io/kubernetes/test/(?:e2e/feature|e2e/framework/[^"]+|utils/[^"]+))"', re.M)


def framework_imports(module_dir: Path) -> list[str]:
    """The feature and framework packages the release's full e2e.test imports for their side effects."""
    found = _FRAMEWORK_IMPORT.findall((module_dir / "test" / "e2e" / "e2e_test.go").read_text())
    if not found:
        raise gobuild.BuildError(f"{module_dir}/test/e2e/e2e_test.go imports no framework packages (layout changed?)")
    return found


# The flag handling and suite entry of test/e2e/e2e_test.go, over only the DRA packages.
_MAIN_TEST = """package drae2e

import (
\t"flag"
\t"fmt"
\t"os"
\t"testing"

\t"k8s.io/component-base/version"
\t"k8s.io/kubernetes/test/e2e"
\t"k8s.io/kubernetes/test/e2e/framework"
\t"k8s.io/kubernetes/test/e2e/framework/config"
\t"k8s.io/kubernetes/test/e2e/framework/testfiles"
\te2etestingmanifests "k8s.io/kubernetes/test/e2e/testing-manifests"
\ttestfixtures "k8s.io/kubernetes/test/fixtures"
)

func TestMain(m *testing.M) {
\tvar versionFlag bool
\tflag.CommandLine.BoolVar(&versionFlag, "version", false, "Displays version information.")
\tconfig.CopyFlags(config.Flags, flag.CommandLine)
\tframework.RegisterCommonFlags(flag.CommandLine)
\tframework.RegisterClusterFlags(flag.CommandLine)
\tflag.Parse()
\tif versionFlag {
\t\tfmt.Printf("%s\\n", version.Get())
\t\tos.Exit(0)
\t}
\tif flag.CommandLine.NArg() > 0 {
\t\tfmt.Fprintf(os.Stderr, "unknown additional command line arguments: %s", flag.CommandLine.Args())
\t\tos.Exit(1)
\t}
\ttestfiles.AddFileSource(e2etestingmanifests.GetE2ETestingManifestsFS())
\ttestfiles.AddFileSource(testfixtures.GetTestFixturesFS())
\tframework.AfterReadingAllFlags(&framework.TestContext)
\tos.Exit(m.Run())
}

func TestE2E(t *testing.T) { e2e.RunE2ETests(t) }
"""


def dra_packages(module_dir: Path) -> list[str]:
    """Import paths of the test/e2e packages (outside the framework) whose sources hold DRA tests."""
    found = set()
    e2e = module_dir / "test" / "e2e"
    for source in e2e.rglob("*.go"):
        rel = source.parent.relative_to(e2e)
        if source.name.endswith("_test.go") or rel.parts[:1] == ("framework",) or not rel.parts:
            continue
        if _DRA_MARK.search(source.read_text(errors="replace")):
            found.add("k8s.io/kubernetes/test/e2e/" + rel.as_posix())
    return sorted(found)  # helpers among them (dra/utils) are linked anyway


def build_e2e(release: Release, version: str, out: Path, log: Path, progress: gobuild.Progress | None) -> None:
    """Build `e2e.test` of `version` (DRA packages only) into `out`, logging to `log`."""
    work, module_dir = gobuild.kubernetes_wrapper(f"e2e-{version}", version, release.staging, [], log)
    packages = dra_packages(module_dir)
    if not packages:
        raise gobuild.BuildError(f"no DRA test packages found under {module_dir}/test/e2e")
    suite = work / "drae2e"
    suite.mkdir()
    imports = ["k8s.io/kubernetes/test/e2e", *framework_imports(module_dir), *packages]
    # a non-test file with every import lets `go build -v` compile (and name, for progress) each package first
    body = "\n".join(f'\t_ "{imp}"' for imp in imports)
    (suite / "imports.go").write_text(f"package drae2e\n\nimport (\n{body}\n)\n")
    (suite / "e2e_test.go").write_text(_MAIN_TEST)
    env = go_env(CGO_ENABLED="0")
    ldflags = gobuild.kubernetes_ldflags(version)
    gobuild.run_go([go_binary(), "mod", "tidy"], work, log, progress, env)
    gobuild.run_go(["nice", "-n", "10", go_binary(), "build", "-v", "-trimpath", "-ldflags", ldflags, "./drae2e"], work, log, progress, env)
    gobuild.run_go(["nice", "-n", "10", go_binary(), "test", "-c", "-vet=off", "-trimpath", "-ldflags", ldflags, "-o", str(out / BINARY), "./drae2e"],
                   work, log, progress, env)


PROJECT = Project("kubernetes-test", (BINARY,), download=kubernetes_test_download, build=build_e2e)


def ensure_e2e(minor: str, *, allow_download: bool = False) -> Path:
    """Path of the cached, verified `e2e.test` of `minor`, built first when missing (it takes minutes).

    Downloads are off by default: the official binary is the full suite, ours is the DRA part.
    """
    slot, _ = ensure_project(PROJECT, release_for(minor), allow_download=allow_download)
    return slot.path(BINARY)


GINKGO = "github.com/onsi/ginkgo/v2"


def ginkgo_version(module_dir: Path) -> str:
    """The Ginkgo version k8s.io/kubernetes of that release requires (the CLI must match the suite's library)."""
    match = re.search(rf"^\s*{re.escape(GINKGO)}\s+(v\S+)", (module_dir / "go.mod").read_text(), re.M)
    if not match:
        raise gobuild.BuildError(f"{module_dir}/go.mod requires no {GINKGO}")
    return match.group(1)


def ensure_ginkgo(minor: str) -> Path:
    """The `ginkgo` CLI of the release's Ginkgo version (it runs e2e.test's specs in parallel processes), cached."""
    from hostenv.dirs import cache_root

    release = release_for(minor)
    module = cache_root() / "go" / "mod" / "k8s.io" / f"kubernetes@{release.kubernetes}"
    version = ginkgo_version(module)
    home = cache_root() / "tools" / f"ginkgo-{version}"
    binary = home / "ginkgo"
    if not binary.is_file():
        home.mkdir(parents=True, exist_ok=True)
        log = home / "build.log"
        log.write_text("")
        gobuild.run_go(["nice", "-n", "10", go_binary(), "install", f"{GINKGO}/ginkgo@{version}"], home, log, None,
                       go_env(CGO_ENABLED="0", GOBIN=str(home)))
    return binary
