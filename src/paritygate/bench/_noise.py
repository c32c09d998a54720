"""Noise checks: what else the machine was doing around a benchmark, read where readable.

Read before and after a run (and so around every block range the run covers): load average and
running processes, the processes that used CPU meanwhile, the CPU frequency governor and turbo
state, and GPU clocks and throttle reasons through NVML when ``pynvml`` is importable. Each check
that suggests the timings are disturbed becomes an "unstable: ..." warning with its reason; all
readings go into the result's provenance. Nothing here imports a framework.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

__all__ = ["snapshot", "busy_processes", "unstable_reasons", "load_class"]

_CPU_DIR = Path("/sys/devices/system/cpu")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _cpu_ticks() -> dict[int, tuple[str, int]]:
    """pid -> (command name, utime + stime in clock ticks), for every readable process."""
    out: dict[int, tuple[str, int]] = {}
    proc = Path("/proc")
    if not proc.is_dir():
        return out
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        text = _read(entry / "stat")
        if not text or ")" not in text:
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text[text.rindex(")") + 2 :].split()
        try:
            out[int(entry.name)] = (name, int(fields[11]) + int(fields[12]))
        except (IndexError, ValueError):
            continue
    return out


def busy_processes(
    before: dict[int, tuple[str, int]], after: dict[int, tuple[str, int]], seconds: float
) -> list[dict[str, Any]]:
    """Other processes that used more than 20 % of one CPU between two readings."""
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    me = os.getpid()
    busy = []
    for pid, (name, ticks) in after.items():
        if pid == me or pid not in before or seconds <= 0:
            continue
        share = (ticks - before[pid][1]) / hz / seconds
        if share > 0.2:
            busy.append({"pid": pid, "name": name, "cpu": round(share, 2)})
    return sorted(busy, key=lambda p: -p["cpu"])[:8]


def _governors() -> list[str]:
    found = set()
    for path in _CPU_DIR.glob("cpu[0-9]*/cpufreq/scaling_governor"):
        value = _read(path)
        if value:
            found.add(value)
    return sorted(found)


def _turbo() -> str | None:
    no_turbo = _read(_CPU_DIR / "intel_pstate" / "no_turbo")
    if no_turbo is not None:
        return "off" if no_turbo == "1" else "on"
    boost = _read(_CPU_DIR / "cpufreq" / "boost")
    if boost is not None:
        return "on" if boost == "1" else "off"
    return None


def _nvml() -> list[dict[str, Any]] | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver: nothing to read
        return None
    gpus = []
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            gpus.append(
                {
                    "index": i,
                    "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                    "max_sm_clock_mhz": pynvml.nvmlDeviceGetMaxClockInfo(
                        handle, pynvml.NVML_CLOCK_SM
                    ),
                    "temperature_c": pynvml.nvmlDeviceGetTemperature(
                        handle, pynvml.NVML_TEMPERATURE_GPU
                    ),
                    "utilization": pynvml.nvmlDeviceGetUtilizationRates(handle).gpu,
                    "throttle_reasons": int(
                        pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)
                    ),
                }
            )
    except Exception as exc:  # a partial reading is still a reading
        gpus.append({"error": str(exc)})
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    return gpus


def snapshot(sample_s: float = 0.1) -> dict[str, Any]:
    """One reading of the machine's state (cheap: about ``sample_s`` seconds)."""
    reading: dict[str, Any] = {"time": time.time(), "cpu_count": os.cpu_count()}
    if hasattr(os, "sched_getaffinity"):
        reading["cpus_usable"] = len(os.sched_getaffinity(0))
    try:
        reading["load_average"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    stat = _read(Path("/proc/stat"))
    if stat:
        for line in stat.splitlines():
            if line.startswith("procs_running"):
                reading["procs_running"] = int(line.split()[1])
    ticks = _cpu_ticks()
    if ticks and sample_s > 0:
        start = time.perf_counter()
        time.sleep(sample_s)
        reading["busy_processes"] = busy_processes(ticks, _cpu_ticks(), time.perf_counter() - start)
    governors = _governors()
    if governors:
        reading["governor"] = governors
    turbo = _turbo()
    if turbo is not None:
        reading["turbo"] = turbo
    gpus = _nvml()
    if gpus is not None:
        reading["nvml"] = gpus
    return reading


# NVML throttle reasons that are not "idle" or "applications clocks setting"
_THROTTLE_MASK = ~(0x1 | 0x2) & 0xFFFFFFFF


def unstable_reasons(reading: dict[str, Any]) -> list[str]:
    """Why the timings taken around this reading may be disturbed (empty when none is seen)."""
    reasons = []
    cpus = reading.get("cpus_usable") or reading.get("cpu_count") or 1
    load = reading.get("load_average")
    if load and load[0] > 0.75 * cpus:
        reasons.append(f"load average {load[0]:.2f} on {cpus} CPUs")
    busy = reading.get("busy_processes") or []
    if busy:
        reasons.append(
            "busy processes: " + ", ".join(f"{p['name']} ({p['cpu']:.0%})" for p in busy[:3])
        )
    governors = [g for g in reading.get("governor", []) if g != "performance"]
    if governors:
        reasons.append(f"CPU governor {'/'.join(governors)} (not 'performance')")
    if reading.get("turbo") == "on":
        reasons.append("turbo boost on (clock depends on temperature and load)")
    for gpu in reading.get("nvml") or []:
        if "throttle_reasons" in gpu and gpu["throttle_reasons"] & _THROTTLE_MASK:
            reasons.append(f"GPU {gpu['index']} throttled (reasons {gpu['throttle_reasons']:#x})")
    return reasons


def load_class(reading: dict[str, Any]) -> str:
    """The machine's load as a class that keys cached A/A thresholds: ``quiet`` (1-minute load
    average at most 0.75 per usable CPU, the level :func:`unstable_reasons` flags, and no other
    busy process), ``busy`` (up to 2 per CPU), ``overloaded`` (more), ``unmeasured`` (no reading,
    ``noise=False``). A threshold measured in one class is never reused in another: a quiet
    machine's A/A spread says nothing about a busy run."""
    load = reading.get("load_average")
    if not load:
        return "unmeasured"
    cpus = reading.get("cpus_usable") or reading.get("cpu_count") or 1
    per_cpu = load[0] / cpus
    if per_cpu <= 0.75 and not reading.get("busy_processes"):
        return "quiet"
    return "busy" if per_cpu <= 2.0 else "overloaded"
