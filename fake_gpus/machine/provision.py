"""Make a simulated node's hardware: its GPUs (fake-NVML state), its OS views and, if asked, a static MIG layout.

What a node is before any driver runs on it; the same for our driver and NVIDIA's. A static MIG layout
is created through NVML, as an admin's MIG manager would, before the driver starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from fake_gpus.machine.views import MachineViews, ensure_machine
from fake_gpus.nvml import state


def provision_node(state_dir: Path, board: str, count: int, mig_layout: Mapping[str, int] | None = None,
                   nvml=None) -> MachineViews:
    """Create (or keep) the node at `state_dir` with `count` x `board`; apply `mig_layout` through `nvml`."""
    state.create_state_dir(state_dir, [(board, count)])
    views = ensure_machine(state_dir)
    if mig_layout is not None:
        from fake_gpus.driver import miglayout  # the admin's tool talks NVML like any other

        with nvml.session(state_dir):
            miglayout.apply_layout(mig_layout)
    return views
