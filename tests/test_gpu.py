"""gpu_status: the real no-GPU path on this machine, and the GPU path against a fake `pynvml`."""

import importlib.util
import os
import sys
from pathlib import Path

import pytest

import fake_pynvml
from tools import gpu


@pytest.fixture
def fake_nvml(monkeypatch):
    fake_pynvml.configure(None)
    fake_pynvml._state["init"] = 0
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml)
    monkeypatch.delenv("FAKE_NVML", raising=False)
    yield fake_pynvml
    assert fake_pynvml._state["init"] == 0, "nvmlShutdown was not called"
    fake_pynvml.configure(None)


def real_nvml_works() -> bool:
    try:
        import pynvml
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except Exception:  # noqa: BLE001
        return False


@pytest.mark.skipif(real_nvml_works(), reason="this machine has a working NVIDIA driver")
def test_machine_without_driver_reports_unavailable_with_the_reason():
    assert importlib.util.find_spec("pynvml"), "nvidia-ml-py is a dependency"
    r = gpu.gpu_status()
    assert r.available is False and r.gpus == []
    assert "libnvidia-ml" in r.reason or "driver" in r.reason
    assert r.text().startswith("no GPU")


def test_fake_module_mirrors_the_real_error_hierarchy():
    import pynvml as real
    for name in ("NVMLError_NotSupported", "NVMLError_LibraryNotFound", "NVMLError_DriverNotLoaded", "NVMLError_Uninitialized"):
        assert issubclass(getattr(fake_pynvml, name), fake_pynvml.NVMLError)
        assert hasattr(real, name)
    assert type(fake_pynvml.NVMLError(fake_pynvml.NVML_ERROR_NOT_SUPPORTED)) is fake_pynvml.NVMLError_NotSupported
    assert type(real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)) is real.NVMLError_NotSupported
    for fn in ("nvmlDeviceGetHandleByIndex", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetUtilizationRates",
               "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetCurrentClocksThrottleReasons",
               "nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetEnforcedPowerLimit", "nvmlSystemGetCudaDriverVersion"):
        assert callable(getattr(real, fn)) and callable(getattr(fake_pynvml, fn))
    assert (real.NVML_CLOCK_SM, real.NVML_TEMPERATURE_GPU, real.NVML_VOLATILE_ECC) == \
        (fake_pynvml.NVML_CLOCK_SM, fake_pynvml.NVML_TEMPERATURE_GPU, fake_pynvml.NVML_VOLATILE_ECC)


def test_full_gpu_and_unsupported_fields_become_null(fake_nvml):
    r = gpu.gpu_status()
    assert r.available and r.source == "nvml" and r.driver_version == "550.54.15" and r.cuda_version == "12.4"
    a100, rtx = r.gpus
    assert a100.name == "NVIDIA A100-SXM4-80GB" and a100.uuid == "GPU-aaaa"
    assert a100.memory_used_mib == 79 * 1024 and a100.memory_total_mib == 80 * 1024
    assert (a100.utilization_gpu_pct, a100.temperature_c, a100.power_draw_w, a100.power_limit_w, a100.sm_clock_mhz) == (12, 83, 398, 400, 1410)
    assert a100.throttle_reasons == ["sw_power_cap", "sw_thermal_slowdown"]
    assert (a100.ecc_corrected_volatile, a100.ecc_uncorrected_volatile) == (3, 0)
    me, ghost = a100.processes
    assert me.pid == os.getpid() and me.used_memory_mib == 78 * 1024 and "python" in me.cmdline.lower()
    assert ghost.used_memory_mib is None and ghost.cmdline is None  # pid in another container
    assert rtx.power_draw_w is None and rtx.ecc_corrected_volatile is None  # NVMLError_NotSupported -> null
    assert rtx.throttle_reasons == ["gpu_idle"] and rtx.processes == []
    modes = sorted(f.failure_mode for f in r.findings)
    assert modes == ["oom", "slow_throughput", "slow_throughput"]
    r.model_dump_json()


def test_driver_not_loaded_is_unavailable_not_a_crash(fake_nvml):
    fake_nvml.configure({"init_error": fake_nvml.NVML_ERROR_DRIVER_NOT_LOADED, "gpus": []})
    r = gpu.gpu_status()
    assert not r.available and "driver is not loaded" in r.reason


def test_library_missing_falls_back_to_nvidia_smi_only_when_it_exists(fake_nvml, tmp_path, monkeypatch):
    fake_nvml.configure({"init_error": fake_nvml.NVML_ERROR_LIBRARY_NOT_FOUND, "gpus": []})
    monkeypatch.setenv("PATH", str(tmp_path))
    assert gpu.gpu_status().available is False
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\n"
                   "case \"$1\" in --query-gpu*) echo '0, Tesla T4, GPU-cccc, 1000, 15360, 50, 10, 60, 30.5, 70.00, 1590, 535.1';;\n"
                   "*) echo 'GPU-cccc, 4242, 900';; esac\n")
    smi.chmod(0o755)
    r = gpu.gpu_status()
    assert r.available and r.source == "nvidia-smi" and r.driver_version == "535.1"
    g = r.gpus[0]
    assert (g.name, g.memory_used_mib, g.power_draw_w, g.sm_clock_mhz) == ("Tesla T4", 1000, 30.5, 1590)
    assert g.processes[0].pid == 4242 and g.processes[0].used_memory_mib == 900


def test_driver_with_zero_gpus(fake_nvml):
    fake_nvml.configure({"driver": "550", "cuda": 12040, "gpus": []})
    r = gpu.gpu_status()
    assert not r.available and "CUDA_VISIBLE_DEVICES" in r.reason


def test_gpu_memory_by_pid_sums_over_gpus(fake_nvml):
    assert gpu.gpu_memory_by_pid() == {os.getpid(): 78 * 1024}
