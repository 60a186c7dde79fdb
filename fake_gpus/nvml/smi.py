"""`fake-nvidia-smi`: the nvidia-smi views people know (-L, the device table, mig -lgip/-lgipp/-lgi/-lci),
read through nvidia-ml-py, so it shows what any NVML client sees. `--provenance` adds what no real
nvidia-smi shows: where each fact of the boards on this node comes from (measured, published, derived)."""

from __future__ import annotations

import argparse
import ctypes
import sys

import pynvml


NO_MIG = "No MIG-supported devices found."  # the real tool's line on a node of T4, L4 or L40S, with exit 6
EXIT_NO_MIG = 6


def _devices() -> list:
    return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]


def _has_mig(h) -> bool:
    try:
        pynvml.nvmlDeviceGetMigMode(h)
    except pynvml.NVMLError_NotSupported:
        return False
    return True


def _mig_devices(h) -> list:
    out = []
    try:
        if pynvml.nvmlDeviceGetMigMode(h)[0] != pynvml.NVML_DEVICE_MIG_ENABLE:
            return out
        for j in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(h)):
            try:
                out.append(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, j))
            except pynvml.NVMLError_NotFound:
                continue
    except pynvml.NVMLError_NotSupported:
        pass
    return out


def _gi_profiles(h) -> list:
    profiles = []
    for enum in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            profiles.append(pynvml.nvmlDeviceGetGpuInstanceProfileInfo(h, enum))
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_InvalidArgument):
            continue
    return profiles


def list_gpus() -> None:
    for i, h in enumerate(_devices()):
        print(f"GPU {i}: {pynvml.nvmlDeviceGetName(h)} (UUID: {pynvml.nvmlDeviceGetUUID(h)})")
        for m in _mig_devices(h):
            name = pynvml.nvmlDeviceGetName(m).split(" MIG ", 1)[-1]
            print(f"  MIG {name:<16} Device {_mig_index(h, m)}: (UUID: {pynvml.nvmlDeviceGetUUID(m)})")


def _mig_index(h, m) -> int:
    return [ctypes.addressof(x.contents) for x in _mig_devices(h)].index(ctypes.addressof(m.contents))


def _row(cells: list[str], widths: tuple[int, ...] = (38, 22, 10)) -> str:
    return "| " + " | ".join(c[:w].ljust(w) for c, w in zip(cells, widths)) + " |"


def table() -> None:
    driver = pynvml.nvmlSystemGetDriverVersion()
    cuda = pynvml.nvmlSystemGetCudaDriverVersion()
    rule = "+" + "-" * 40 + "+" + "-" * 24 + "+" + "-" * 12 + "+"
    print("+" + "-" * 78 + "+")
    print("| " + f"FAKE-NVIDIA-SMI    Driver Version: {driver}    CUDA Version: {cuda // 1000}.{cuda % 1000 // 10}".ljust(76) + " |")
    print(rule)
    print(_row(["GPU  Name", "Bus-Id", "MIG M."]))
    print(_row(["     Memory-Usage", "", ""]))
    print(rule.replace("-", "="))
    for i, h in enumerate(_devices()):
        try:
            mig = "Enabled" if pynvml.nvmlDeviceGetMigMode(h)[0] else "Disabled"
        except pynvml.NVMLError_NotSupported:
            mig = "N/A"
        mem = pynvml.nvmlDeviceGetMemoryInfo(h)
        print(_row([f"{i:>3}  {pynvml.nvmlDeviceGetName(h)}", pynvml.nvmlDeviceGetPciInfo_v3(h).busId, mig]))
        print(_row([f"     {mem.used // 2**20}MiB / {mem.total // 2**20}MiB", "", ""]))
        print(rule)


def lgip() -> None:
    print("+" + "-" * 78 + "+")
    print(f"| {'GPU instance profiles:':<77}|")
    print(f"| {'GPU   Name':<20}{'ID':>4}{'Instances':>12}{'Memory':>10}{'P2P':>6}{'SM':>6}{'DEC':>5}{'ENC':>5}{'JPEG':>5}{'OFA':>5}   |")
    print(f"| {'':<24}{'Free/Total':>12}{'GiB':>10}{'':>6}{'CE':>6}{'':>23}|")
    print("|" + "=" * 78 + "|")
    for i, h in enumerate(_devices()):
        if not _has_mig(h):
            continue  # the real tool lists MIG GPUs only
        for p in _gi_profiles(h):
            try:
                free = pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(h, p.id)
            except pynvml.NVMLError_NotSupported:
                free = 0
            inst = f"{free}/{p.instanceCount}"
            print(f"| {i:>3}  MIG {p.name:<11}{p.id:>4}{inst:>12}{p.memorySizeMB / 1024:>10.2f}{'Yes' if p.isP2pSupported else 'No':>6}"
                  f"{p.multiprocessorCount:>6}{p.decoderCount:>5}{p.encoderCount:>5}{p.jpegCount:>5}{p.ofaCount:>5}   |")
            print(f"| {'':<36}{'':>10}{'':>6}{p.copyEngineCount:>6}{'':>23}|")
        print("+" + "-" * 78 + "+")


def lgipp() -> None:
    for i, h in enumerate(_devices()):
        if not _has_mig(h):
            continue  # the real tool lists MIG GPUs only
        for p in _gi_profiles(h):
            count = ctypes.c_uint(0)
            pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(h, p.id, None, ctypes.byref(count))
            buf = (pynvml.c_nvmlGpuInstancePlacement_t * count.value)()
            pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(h, p.id, buf, ctypes.byref(count))
            starts = ",".join(str(x.start) for x in buf)
            size = buf[0].size if count.value else 0
            print(f"GPU  {i} Profile ID {p.id:>2} Placements: {{{starts}}}:{size}")


def _gpu_instances(h) -> list:
    out = []
    for p in _gi_profiles(h):
        buf = (pynvml.c_nvmlGpuInstance_t * max(1, p.instanceCount))()
        count = ctypes.c_uint(0)
        pynvml.nvmlDeviceGetGpuInstances(h, p.id, buf, ctypes.byref(count))
        out += [(p, buf[k]) for k in range(count.value)]
    return sorted(out, key=lambda x: pynvml.nvmlGpuInstanceGetInfo(x[1]).id)


def lgi() -> None:
    print("+" + "-" * 58 + "+")
    print(f"| {'GPU instances:':<57}|")
    print(f"| {'GPU   Name':<22}{'Profile':>8}{'Instance':>10}{'Placement':>14}{'':>3}|")
    print(f"| {'':<22}{'ID':>8}{'ID':>10}{'Start:Size':>14}{'':>3}|")
    print("|" + "=" * 58 + "|")
    for i, h in enumerate(_devices()):
        try:
            rows = _gpu_instances(h)
        except pynvml.NVMLError_NotSupported:
            continue
        for p, gi in rows:
            info = pynvml.nvmlGpuInstanceGetInfo(gi)
            place = f"{info.placement.start}:{info.placement.size}"
            print(f"| {i:>3}  MIG {p.name:<13}{info.profileId:>8}{info.id:>10}{place:>14}{'':>3}|")
    print("+" + "-" * 58 + "+")


def lci() -> None:
    print("+" + "-" * 70 + "+")
    print(f"| {'Compute instances:':<69}|")
    print(f"| {'GPU     GPU       Name':<34}{'Profile':>9}{'Instance':>10}{'Placement':>14}{'':>3}|")
    print(f"| {'      Instance':<34}{'ID':>9}{'ID':>10}{'Start:Size':>14}{'':>3}|")
    print(f"| {'        ID':<69}|")
    print("|" + "=" * 70 + "|")
    for i, h in enumerate(_devices()):
        try:
            gis = _gpu_instances(h)
        except pynvml.NVMLError_NotSupported:
            continue
        for _, gi in gis:
            gid = pynvml.nvmlGpuInstanceGetInfo(gi).id
            for enum in range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
                try:
                    cp = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, enum, 0)
                except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_InvalidArgument):
                    continue
                buf = (pynvml.c_nvmlComputeInstance_t * max(1, cp.instanceCount))()
                count = ctypes.c_uint(0)
                pynvml.nvmlGpuInstanceGetComputeInstances(gi, cp.id, buf, ctypes.byref(count))
                for k in range(count.value):
                    info = pynvml.nvmlComputeInstanceGetInfo(buf[k])
                    place = f"{info.placement.start}:{info.placement.size}"
                    print(f"| {i:>3} {gid:>9}       MIG {cp.name:<16}{cp.id:>9}{info.id:>10}{place:>14}{'':>3}|")
    print("+" + "-" * 70 + "+")


def _short(value) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0xFFFF:
        return f"{value:#x}" if value & 0xFFFF == 0x10DE else str(value)
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value))
    if isinstance(value, dict):
        return ",".join(f"{k}:{v}" for k, v in value.items())
    return str(value)


def provenance(only: str | None) -> int:
    """Each board on this node once (found by its PCI device id): its facts grouped by entry and source,
    with their class ("measured", "published", "derived"); `only` keeps one class."""
    from fake_gpus.catalog import all_boards
    from fake_gpus.catalog.provenance import grouped

    by_pci = {b.pci_device_id: b for b in all_boards()}
    indices: dict[int, list[int]] = {}
    for i, h in enumerate(_devices()):
        pci = pynvml.nvmlDeviceGetPciInfo_v3(h).pciDeviceId
        if pci not in by_pci:
            print(f"fake-nvidia-smi: GPU {i} has PCI device id {pci:#010x}, which no catalog board has; "
                  f"valid: {', '.join(f'{k:#010x}' for k in by_pci)}", file=sys.stderr)
            return 2
        indices.setdefault(pci, []).append(i)
    for pci, gpus in indices.items():
        board = by_pci[pci]
        print(f"GPU {','.join(map(str, gpus))}: {board.product_name} ({board.key}): where each fact comes from")
        for entry, cls, text, items in grouped(board):
            if only in (None, cls):
                print(f"  {entry:<24} {cls:<9}  " + "  ".join(f"{fact}={_short(value)}" for fact, value in items))
                print(f"  {'':<24} {'':<9}  {text}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fake-nvidia-smi", description="nvidia-smi views of the fake GPUs, through NVML")
    parser.add_argument("-L", "--list-gpus", action="store_true", help="list GPUs and MIG devices")
    parser.add_argument("--version", action="store_true", help="print the driver version")
    parser.add_argument("--provenance", nargs="?", const="all", choices=("all", "measured", "published", "derived"),
                        help="every catalog fact of the boards on this node with its class and source (or one class)")
    sub = parser.add_subparsers(dest="command")
    mig = sub.add_parser("mig", help="MIG views")
    group = mig.add_mutually_exclusive_group(required=True)
    for flag, helptext in (("-lgip", "GPU instance profiles"), ("-lgipp", "GPU instance placements"),
                           ("-lgi", "GPU instances"), ("-lci", "compute instances")):
        group.add_argument(flag, action="store_true", help=helptext)
    args = parser.parse_args(argv)
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        print(f"fake-nvidia-smi: NVML initialization failed: {exc}", file=sys.stderr)
        return 9
    try:
        if args.version:
            print(f"FAKE-NVIDIA-SMI version  : {pynvml.nvmlSystemGetDriverVersion()}")
            print(f"NVML version             : {pynvml.nvmlSystemGetNVMLVersion()}")
            print(f"DRIVER version           : {pynvml.nvmlSystemGetDriverVersion()}")
        elif args.provenance:
            return provenance(None if args.provenance == "all" else args.provenance)
        elif args.command == "mig" and not any(_has_mig(h) for h in _devices()):
            print(NO_MIG)
            return EXIT_NO_MIG
        elif args.command == "mig":
            {"lgip": lgip, "lgipp": lgipp, "lgi": lgi, "lci": lci}[next(k for k in ("lgipp", "lgip", "lgi", "lci") if getattr(args, k))]()
        elif args.list_gpus:
            list_gpus()
        else:
            table()
    finally:
        pynvml.nvmlShutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
