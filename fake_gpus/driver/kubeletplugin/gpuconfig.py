"""Opaque device configs of a claim (`resource.nvidia.com/v1beta1` GpuConfig and MigDeviceConfig), read as
NVIDIA's gpu-kubelet-plugin reads them: decoded strictly, the config of each allocated device chosen by
precedence, defaults filled in (normalized) and checked (validated), with NVIDIA's messages.

Our plugin behaves as NVIDIA's with TimeSlicingSettings and MPSSupport on (docs/design/sharing.md, "Prepare").
Messages NVIDIA takes from Go's JSON decoder (a wrong type, a missing kind) are ours, in the same places.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

GROUP_VERSION = "resource.nvidia.com/v1beta1"
GPU_CONFIG = "GpuConfig"
MIG_CONFIG = "MigDeviceConfig"
TIME_SLICING = "TimeSlicing"
MPS = "MPS"
INTERVALS = {"Default": 0, "Short": 1, "Medium": 2, "Long": 3}  # nvidia-smi compute-policy --set-timeslice values
DEFAULT_INTERVAL = "Default"
GPU, MIG = "gpu", "mig"  # the device types a config applies to

_MPS_FIELDS = {"defaultActiveThreadPercentage": int, "defaultPinnedDeviceMemoryLimit": str,
               "defaultPerDevicePinnedMemoryLimit": dict, "multiUser": bool}
_SHARING_FIELDS = {GPU_CONFIG: {"strategy": str, "timeSlicingConfig": dict, "mpsConfig": dict},
                   MIG_CONFIG: {"strategy": str, "mpsConfig": dict}}


class ConfigError(ValueError):
    """A config NVIDIA's plugin refuses; the message is the text its prepare error carries."""


@dataclass(frozen=True)
class Sharing:
    """A normalized, valid config: which strategy (None: the device is used as is) and its settings."""

    kind: str  # GPU_CONFIG | MIG_CONFIG
    strategy: str | None = None
    interval: str | None = None  # TimeSlicing on a GpuConfig
    mps: dict | None = None  # the mpsConfig fields given (MPS)
    time_slicing_with_mps: bool = False  # both sections given: refused when the strategy is applied
    mps_with_time_slicing: bool = False

    def canonical(self) -> dict:
        """What two claims' configs are compared by (NVIDIA compares the normalized objects)."""
        return {"kind": self.kind, "strategy": self.strategy, "interval": self.interval, "mps": self.mps,
                "extra": [self.time_slicing_with_mps, self.mps_with_time_slicing]}


@dataclass(frozen=True)
class _Opaque:
    requests: tuple[str, ...]
    kind: str
    body: dict = field(hash=False, compare=False)


def _check_fields(obj: dict, fields: dict[str, type], path: str) -> None:
    """Strict decoding: every field known and of its JSON type (Go's strict decoder's rule)."""
    for name, value in obj.items():
        full = f"{path}.{name}" if path else name
        if name not in fields:
            raise ConfigError(f"error decoding config parameters: strict decoding error: unknown field \"{full}\"")
        wanted = fields[name]
        ok = isinstance(value, wanted) and not (wanted is int and isinstance(value, bool)) or value is None
        if not ok:
            raise ConfigError(f"error decoding config parameters: field {full} must be a {wanted.__name__}, not {json.dumps(value)}")


def decode(parameters: dict) -> _Opaque:
    """One config's parameters as NVIDIA's strict decoder takes them."""
    if not isinstance(parameters, dict):
        raise ConfigError("error decoding config parameters: parameters must be a JSON object")
    kind, version = parameters.get("kind"), parameters.get("apiVersion")
    if not kind:
        raise ConfigError(f"error decoding config parameters: Object 'Kind' is missing in '{json.dumps(parameters, separators=(',', ':'))}'")
    if version != GROUP_VERSION or kind not in _SHARING_FIELDS:
        raise ConfigError(f"error decoding config parameters: no kind \"{kind}\" is registered for version \"{version}\" "
                          f"(valid: {GPU_CONFIG}, {MIG_CONFIG} of {GROUP_VERSION})")
    _check_fields(parameters, {"apiVersion": str, "kind": str, "sharing": dict}, "")
    sharing = parameters.get("sharing") or {}
    _check_fields(sharing, _SHARING_FIELDS[kind], "sharing")
    _check_fields(sharing.get("timeSlicingConfig") or {}, {"interval": str}, "sharing.timeSlicingConfig")
    _check_fields(sharing.get("mpsConfig") or {}, _MPS_FIELDS, "sharing.mpsConfig")
    return _Opaque((), kind, parameters)


def opaque_configs(allocation: dict, driver: str) -> list[_Opaque]:
    """This driver's configs of an allocation, lowest precedence first: class configs, then the claim's."""
    entries = (allocation.get("devices") or {}).get("config") or []
    by_source: dict[str, list[dict]] = {"FromClass": [], "FromClaim": []}
    for entry in entries:
        source = entry.get("source")
        if source not in by_source:
            raise ConfigError(f"error getting opaque device configs: invalid config source: {source}")
        by_source[source].append(entry)
    out = []
    for entry in by_source["FromClass"] + by_source["FromClaim"]:
        opaque = entry.get("opaque")
        if opaque is None:
            raise ConfigError("error getting opaque device configs: only opaque parameters are supported by this driver")
        if opaque.get("driver") != driver:
            continue  # a config for another driver that could have served the request
        try:
            decoded = decode(opaque.get("parameters"))
        except ConfigError as exc:
            raise ConfigError(f"error getting opaque device configs: {exc}") from exc
        out.append(_Opaque(tuple(entry.get("requests") or ()), decoded.kind, decoded.body))
    return out


def config_for(configs: list[_Opaque], device: str, device_type: str, request: str) -> _Opaque | None:
    """The config that applies to one allocated device (None: the default of its type). The last config naming
    the device's request wins, else the last one naming no request that fits the device's type; a config naming
    the request but not fitting the type is an error."""
    wanted = GPU_CONFIG if device_type == GPU else MIG_CONFIG
    for config in reversed(configs):
        if request in config.requests:
            if config.kind != wanted:
                nvidia_type = "gpu" if device_type == GPU else "mig"
                raise ConfigError(f"cannot apply {config.kind} to device \"{device}\" of type \"{nvidia_type}\" (request: {request})")
            return config
        if not config.requests and config.kind == wanted:
            return config
    return None


def normalize(config: _Opaque | None, device_type: str) -> Sharing:
    """Defaults filled in and the result validated (ConfigError with NVIDIA's message)."""
    kind = config.kind if config else (GPU_CONFIG if device_type == GPU else MIG_CONFIG)
    sharing = config.body.get("sharing") if config else None
    if sharing is None:  # `sharing: {}` is not this: an empty strategy, refused below
        return Sharing(kind)
    strategy = sharing.get("strategy") or ""
    tsc, mps = sharing.get("timeSlicingConfig"), sharing.get("mpsConfig")
    if strategy == TIME_SLICING and kind == GPU_CONFIG and tsc is None:
        tsc = {"interval": DEFAULT_INTERVAL}
    if strategy == MPS and mps is None:
        mps = {}
    if strategy not in (TIME_SLICING, MPS):
        raise ConfigError(f"unknown GPU sharing strategy: {strategy}, supported GPU sharing strategies: {TIME_SLICING}, {MPS}")
    interval = None
    if strategy == TIME_SLICING and kind == GPU_CONFIG:
        interval = tsc.get("interval")
        if interval not in INTERVALS:
            # NVIDIA's plugin panics on a timeSlicingConfig without interval; refused here instead
            raise ConfigError(f"unknown time-slice interval: {interval or ''}, supported time-slice intervals: {', '.join(INTERVALS)}")
    if strategy == MPS:
        percentage = mps.get("defaultActiveThreadPercentage")
        if percentage is not None and percentage < 0:
            raise ConfigError("active thread percentage must not be negative")
        if percentage is not None and percentage > 100:
            raise ConfigError("active thread percentage must not be greater than 100")
    return Sharing(kind, strategy, interval, {k: v for k, v in sorted((mps or {}).items())} if strategy == MPS else None,
                   time_slicing_with_mps=strategy == TIME_SLICING and sharing.get("mpsConfig") is not None,
                   mps_with_time_slicing=strategy == MPS and kind == GPU_CONFIG and sharing.get("timeSlicingConfig") is not None)


def check_time_slicing(sharing: Sharing) -> str | None:
    """The interval a TimeSlicing GpuConfig sets (None: nothing to set); ConfigError for an MpsConfig beside it."""
    if sharing.strategy != TIME_SLICING or sharing.kind != GPU_CONFIG:
        return None  # a MigDeviceConfig's TimeSlicing is valid and sets nothing (MIG devices have no time slice)
    if sharing.time_slicing_with_mps:
        raise ConfigError(f"cannot use MpsConfig with the '{TIME_SLICING}' strategy")
    return sharing.interval


def pinned_limits(mps: dict, uuids: list[str]) -> dict[str, str]:
    """Pinned device memory limit per device UUID (`<MiB>M`), from the default and the per-device entries (keyed
    by UUID or index among `uuids`); ConfigError with NVIDIA's message for a bad key or a limit under 1 MiB."""
    limits: dict[str, str] = {}
    default = mps.get("defaultPinnedDeviceMemoryLimit")
    if default is not None and uuids:
        mib = _mebibytes(default)
        if mib <= 0:
            raise ConfigError(f"invalid limit: default value set too low: {default}")
        limits = {u: f"{mib}M" for u in uuids}
    for key, value in (mps.get("defaultPerDevicePinnedMemoryLimit") or {}).items():
        if key in uuids:
            target = key
        elif key.lstrip("-").isdigit():
            if not 0 <= int(key) < len(uuids):
                raise ConfigError(f"invalid device: invalid device index: {int(key)}")
            target = uuids[int(key)]
        else:
            raise ConfigError(f"invalid device: unable to parse key as an integer: {key}")
        mib = _mebibytes(value)
        if mib <= 0:
            raise ConfigError(f"invalid limit: value set too low: {key}: {value}")
        limits[target] = f"{mib}M"
    return limits


_SUFFIXES = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def _mebibytes(quantity: str) -> int:
    """Whole MiB of a Kubernetes quantity (rounded down, as NVIDIA's limit is)."""
    text = str(quantity)
    digits = text.rstrip("kMGTi")
    suffix = text[len(digits):]
    try:
        value = float(digits) * _SUFFIXES[suffix]
    except (ValueError, KeyError) as exc:
        raise ConfigError(f"quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {text}") from exc
    return int(value) // 2**20
