"""GPU state through NVML (`nvidia-ml-py`), imported lazily; `nvidia-smi` only when NVML itself is missing."""

import shutil
import subprocess
from typing import Any, Callable, Literal

from pydantic import BaseModel, Field

from tools.report import Evidence, Finding, Report

MIB = 1024 * 1024

# NVML clocks-event (throttle) reason bits, nvml.h; names as nvidia-smi prints them
THROTTLE_BITS = {
    0x001: "gpu_idle", 0x002: "applications_clocks_setting", 0x004: "sw_power_cap",
    0x008: "hw_slowdown", 0x010: "sync_boost", 0x020: "sw_thermal_slowdown",
    0x040: "hw_thermal_slowdown", 0x080: "hw_power_brake_slowdown", 0x100: "display_clock_setting",
}
SLOWDOWNS = {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}


class GpuProcess(BaseModel):
    pid: int
    used_memory_mib: float | None
    cmdline: str | None = Field(None, description="from psutil; null if the process is not visible (another container/user)")


class Gpu(BaseModel):
    index: int
    name: str | None = None
    uuid: str | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    utilization_gpu_pct: float | None = None
    utilization_memory_pct: float | None = None
    temperature_c: float | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: float | None = None
    throttle_reasons: list[str] | None = Field(None, description="active clock slowdown reasons, decoded")
    ecc_corrected_volatile: int | None = None
    ecc_uncorrected_volatile: int | None = None
    processes: list[GpuProcess] | None = None


class GpuStatusReport(Report):
    available: bool
    reason: str | None = Field(None, description="why no GPU could be read, when available is false")
    source: Literal["nvml", "nvidia-smi"] | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    gpus: list[Gpu] = Field(default_factory=list)

    def headline(self) -> str:
        if not self.available:
            return f"no GPU: {self.reason}"
        parts = [f"{len(self.gpus)} GPU(s), driver {self.driver_version}, CUDA {self.cuda_version} ({self.source})"]
        for g in self.gpus:
            mem = f"{g.memory_used_mib:.0f}/{g.memory_total_mib:.0f} MiB" if g.memory_used_mib is not None and g.memory_total_mib else "mem n/a"
            parts.append(f"  [{g.index}] {g.name}: {mem}, util {g.utilization_gpu_pct}%, {g.temperature_c} C, "
                         f"{len(g.processes or [])} process(es)" + (f", throttled: {', '.join(g.throttle_reasons)}" if g.throttle_reasons else ""))
        return "\n".join(parts)


def _text(x: Any) -> str:
    return x.decode(errors="replace") if isinstance(x, bytes) else str(x)


def _cmdline(pid: int) -> str | None:
    try:
        import psutil
        return " ".join(psutil.Process(pid).cmdline())[:500] or None
    except Exception:  # noqa: BLE001 - gone, another namespace, or access denied: unknown, not an error
        return None


def _nvml_status(nv) -> GpuStatusReport:
    def get(fn: Callable, *args, default=None):
        """One NVML field; a field this GPU or driver does not support is null, never a crash."""
        try:
            return fn(*args)
        except nv.NVMLError:
            return default
        except (AttributeError, TypeError, ValueError):  # an older nvidia-ml-py without this function
            return default

    report = GpuStatusReport(available=True, source="nvml")
    report.driver_version = (lambda v: _text(v) if v is not None else None)(get(nv.nvmlSystemGetDriverVersion))
    cuda = get(nv.nvmlSystemGetCudaDriverVersion)
    if cuda:
        report.cuda_version = f"{cuda // 1000}.{cuda % 1000 // 10}"
    for i in range(nv.nvmlDeviceGetCount()):
        try:
            h = nv.nvmlDeviceGetHandleByIndex(i)
        except nv.NVMLError as e:
            report.gpus.append(Gpu(index=i, name=f"unreadable: {e}"))
            continue
        g = Gpu(index=i)
        name, uuid = get(nv.nvmlDeviceGetName, h), get(nv.nvmlDeviceGetUUID, h)
        g.name, g.uuid = (_text(name) if name is not None else None), (_text(uuid) if uuid is not None else None)
        mem = get(nv.nvmlDeviceGetMemoryInfo, h)
        if mem is not None:
            g.memory_used_mib, g.memory_total_mib = mem.used / MIB, mem.total / MIB
        util = get(nv.nvmlDeviceGetUtilizationRates, h)
        if util is not None:
            g.utilization_gpu_pct, g.utilization_memory_pct = float(util.gpu), float(util.memory)
        g.temperature_c = get(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
        power = get(nv.nvmlDeviceGetPowerUsage, h)
        g.power_draw_w = power / 1000 if power is not None else None
        limit = get(nv.nvmlDeviceGetEnforcedPowerLimit, h)
        g.power_limit_w = limit / 1000 if limit is not None else None
        g.sm_clock_mhz = get(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)
        reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or nv.nvmlDeviceGetCurrentClocksThrottleReasons
        bits = get(reasons_fn, h)
        if bits is not None:
            g.throttle_reasons = [n for b, n in THROTTLE_BITS.items() if bits & b]
        g.ecc_corrected_volatile = get(nv.nvmlDeviceGetTotalEccErrors, h, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC)
        g.ecc_uncorrected_volatile = get(nv.nvmlDeviceGetTotalEccErrors, h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC)
        procs = get(nv.nvmlDeviceGetComputeRunningProcesses, h)
        if procs is not None:
            g.processes = [GpuProcess(pid=p.pid, used_memory_mib=(p.usedGpuMemory / MIB if p.usedGpuMemory is not None else None),
                                      cmdline=_cmdline(p.pid)) for p in procs]
        report.gpus.append(g)
    return report


_SMI_FIELDS = ["index", "name", "uuid", "memory.used", "memory.total", "utilization.gpu", "utilization.memory",
               "temperature.gpu", "power.draw", "power.limit", "clocks.sm", "driver_version"]


def _smi_value(s: str) -> float | None:
    s = s.strip()
    try:
        return float(s)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def _smi_status(smi: str) -> GpuStatusReport:
    def run(*args: str) -> str:
        return subprocess.run([smi, *args], capture_output=True, text=True, timeout=15, check=True).stdout

    try:
        rows = run(f"--query-gpu={','.join(_SMI_FIELDS)}", "--format=csv,noheader,nounits")
        apps = run("--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv,noheader,nounits")
    except (OSError, subprocess.SubprocessError) as e:
        return GpuStatusReport(available=False, reason=f"NVML is not installed and nvidia-smi failed: {e}")
    report = GpuStatusReport(available=True, source="nvidia-smi")
    by_uuid: dict[str, list[GpuProcess]] = {}
    for line in apps.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == 3 and cells[1].isdigit():
            mem = _smi_value(cells[2])
            by_uuid.setdefault(cells[0], []).append(GpuProcess(pid=int(cells[1]), used_memory_mib=mem, cmdline=_cmdline(int(cells[1]))))
    for line in rows.splitlines():
        c = [x.strip() for x in line.split(",")]
        if len(c) != len(_SMI_FIELDS):
            continue
        v = dict(zip(_SMI_FIELDS, c))
        report.driver_version = v["driver_version"]
        report.gpus.append(Gpu(
            index=int(v["index"]), name=v["name"], uuid=v["uuid"], memory_used_mib=_smi_value(v["memory.used"]),
            memory_total_mib=_smi_value(v["memory.total"]), utilization_gpu_pct=_smi_value(v["utilization.gpu"]),
            utilization_memory_pct=_smi_value(v["utilization.memory"]), temperature_c=_smi_value(v["temperature.gpu"]),
            power_draw_w=_smi_value(v["power.draw"]), power_limit_w=_smi_value(v["power.limit"]),
            sm_clock_mhz=_smi_value(v["clocks.sm"]), processes=by_uuid.get(v["uuid"], [])))
    return report


def gpu_status() -> GpuStatusReport:
    """Every GPU NVML can see; `available=False` with the reason when there is no driver or no GPU."""
    try:
        import pynvml as nv
    except ImportError:
        nv = None
    if nv is not None:
        try:
            nv.nvmlInit()
        except nv.NVMLError as e:
            missing = isinstance(e, getattr(nv, "NVMLError_LibraryNotFound", ()))
            smi = shutil.which("nvidia-smi") if missing else None
            if smi:
                report = _smi_status(smi)
            else:
                reason = {True: "the NVIDIA driver library (libnvidia-ml.so) is not installed: no NVIDIA driver on this machine"}.get(
                    missing, f"NVML could not initialise: {e}")
                if isinstance(e, getattr(nv, "NVMLError_DriverNotLoaded", ())):
                    reason = "the NVIDIA kernel driver is not loaded (nvidia-smi would fail too)"
                return GpuStatusReport(available=False, reason=reason)
        else:
            try:
                report = _nvml_status(nv)
            finally:
                try:
                    nv.nvmlShutdown()
                except nv.NVMLError:
                    pass
    else:
        smi = shutil.which("nvidia-smi")
        if not smi:
            return GpuStatusReport(available=False, reason="nvidia-ml-py is not installed and nvidia-smi is not on PATH")
        report = _smi_status(smi)
    if report.available and not report.gpus:
        report.available, report.reason = False, "the driver is loaded but reports no GPU (check CUDA_VISIBLE_DEVICES / container --gpus)"
    report.findings = _findings(report)
    return report


def gpu_memory_by_pid() -> dict[int, float]:
    """MiB of GPU memory each process holds, summed over GPUs; empty when NVML is not usable."""
    try:
        import pynvml as nv
        nv.nvmlInit()
    except Exception:  # noqa: BLE001 - no NVML means no per-pid GPU memory, nothing more
        return {}
    out: dict[int, float] = {}
    try:
        for i in range(nv.nvmlDeviceGetCount()):
            try:
                for p in nv.nvmlDeviceGetComputeRunningProcesses(nv.nvmlDeviceGetHandleByIndex(i)):
                    if p.usedGpuMemory is not None:
                        out[p.pid] = out.get(p.pid, 0.0) + p.usedGpuMemory / MIB
            except nv.NVMLError:
                continue
    finally:
        try:
            nv.nvmlShutdown()
        except nv.NVMLError:
            pass
    return out


def _findings(r: GpuStatusReport) -> list[Finding]:
    out: list[Finding] = []
    for g in r.gpus:
        src = f"gpu_status GPU {g.index} ({g.name})"
        if g.memory_used_mib is not None and g.memory_total_mib and g.memory_used_mib / g.memory_total_mib > 0.95:
            out.append(Finding(failure_mode="oom", confidence=0.35, summary=f"GPU {g.index} memory is almost full",
                               evidence=[Evidence(what="memory used / total MiB", value=f"{g.memory_used_mib:.0f}/{g.memory_total_mib:.0f}", source=src),
                                         Evidence(what="processes on it", value=len(g.processes or []), source=src)],
                               fix="If another process holds it, stop it; else reduce batch size / sequence length or checkpoint activations",
                               location=f"GPU {g.index}"))
        busy = [p for p in g.processes or []]
        if busy and g.utilization_gpu_pct is not None and g.utilization_gpu_pct < 30:
            out.append(Finding(failure_mode="slow_throughput", confidence=0.35,
                               summary=f"GPU {g.index} has {len(busy)} process(es) but is only {g.utilization_gpu_pct:.0f}% busy",
                               evidence=[Evidence(what="utilization.gpu %", value=g.utilization_gpu_pct, source=src)],
                               fix="Profile a few steps (profile_steps): a data-bound loader or host-device syncs (.item(), print(tensor)) starve the GPU",
                               location=f"GPU {g.index}"))
        slow = sorted(set(g.throttle_reasons or []) & SLOWDOWNS)
        if slow:
            out.append(Finding(failure_mode="slow_throughput", confidence=0.4, summary=f"GPU {g.index} clocks are throttled: {', '.join(slow)}",
                               evidence=[Evidence(what="throttle reasons", value=", ".join(slow), source=src),
                                         Evidence(what="temperature C", value=g.temperature_c, source=src),
                                         Evidence(what="power draw / limit W", value=f"{g.power_draw_w}/{g.power_limit_w}", source=src)],
                               fix="Thermal: check cooling/airflow; power: check the power limit (nvidia-smi -q -d POWER)",
                               location=f"GPU {g.index}"))
    return out
