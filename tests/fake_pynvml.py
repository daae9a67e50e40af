"""A stand-in for nvidia-ml-py's `pynvml` module on machines without a GPU.

It copies the real module's surface that tools/gpu.py uses: the same function names and signatures,
the same constants, and the same error hierarchy (`NVMLError(value)` maps to a generated subclass such as
`NVMLError_NotSupported`, exactly as `_extractNVMLErrorsAsClasses` does in pynvml.py). The devices come
from the JSON in $FAKE_NVML (or `configure()`), so a stdio server can use it from a PYTHONPATH shim.
"""

import json
import os
import string
import sys
from types import SimpleNamespace

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
nvmlClocksThrottleReasonGpuIdle = 0x1
nvmlClocksThrottleReasonSwPowerCap = 0x4
nvmlClocksThrottleReasonHwSlowdown = 0x8
nvmlClocksThrottleReasonSwThermalSlowdown = 0x20
nvmlClocksThrottleReasonHwThermalSlowdown = 0x40


class NVMLError(Exception):
    _valClassMapping: dict = {}
    _errcode_to_string = {NVML_ERROR_NOT_SUPPORTED: "Not Supported", NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
                          NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded", NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
                          NVML_ERROR_UNINITIALIZED: "Uninitialized", NVML_ERROR_GPU_IS_LOST: "GPU is lost"}

    def __new__(typ, value):
        if typ == NVMLError:
            typ = NVMLError._valClassMapping.get(value, typ)
        obj = Exception.__new__(typ)
        obj.value = value
        return obj

    def __str__(self):
        return self._errcode_to_string.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other):
        return self.value == other.value

    __hash__ = Exception.__hash__


def _extractNVMLErrorsAsClasses():
    this = sys.modules[__name__]
    for err_name in [x for x in dir(this) if x.startswith("NVML_ERROR_")]:
        class_name = "NVMLError_" + string.capwords(err_name.replace("NVML_ERROR_", ""), "_").replace("_", "")
        val = getattr(this, err_name)

        def gen_new(v):
            def new(typ, *args):
                return NVMLError.__new__(typ, v)
            return new
        cls = type(class_name, (NVMLError,), {"__new__": gen_new(val)})
        cls.__module__ = __name__
        setattr(this, class_name, cls)
        NVMLError._valClassMapping[val] = cls


_extractNVMLErrorsAsClasses()

# ---------------------------------------------------------------- the fake machine

_state = {"config": None, "init": 0}

DEFAULT = {
    "driver": "550.54.15", "cuda": 12040,
    "gpus": [
        {"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-aaaa", "total": 80 * 2**30, "used": 79 * 2**30, "util": [12, 40],
         "temp": 83, "power": 398000, "limit": 400000, "sm": 1410, "throttle": 0x4 | 0x20, "ecc": [3, 0],
         "procs": [{"pid": os.getpid(), "used": 78 * 2**30}, {"pid": 4_000_000, "used": None}]},
        {"name": "NVIDIA GeForce RTX 3090", "uuid": "GPU-bbbb", "total": 24 * 2**30, "used": 2**30, "util": [0, 0],
         "temp": 40, "power": 30000, "limit": 350000, "sm": 210, "throttle": 0x1, "ecc": None,
         "unsupported": ["power", "ecc"], "procs": []},
    ],
}


def configure(config: dict | None) -> None:
    _state["config"] = config


def _config() -> dict:
    if _state["config"] is None:
        env = os.environ.get("FAKE_NVML")
        _state["config"] = json.loads(env) if env else DEFAULT
    return _state["config"]


def _check_init():
    if not _state["init"]:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)


def _gpu(handle) -> dict:
    _check_init()
    return _config()["gpus"][handle.index]


def _field(handle, key):
    g = _gpu(handle)
    if key in g.get("unsupported", []):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return g[key]


def nvmlInit():
    fail = _config().get("init_error")
    if fail is not None:
        raise NVMLError(fail)
    _state["init"] += 1


def nvmlInitWithFlags(flags):
    nvmlInit()


def nvmlShutdown():
    _check_init()
    _state["init"] -= 1


def nvmlSystemGetDriverVersion():
    _check_init()
    return _config()["driver"]


def nvmlSystemGetCudaDriverVersion():
    _check_init()
    return _config()["cuda"]


def nvmlDeviceGetCount():
    _check_init()
    return len(_config()["gpus"])


def nvmlDeviceGetHandleByIndex(index):
    _check_init()
    if not 0 <= index < len(_config()["gpus"]):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return SimpleNamespace(index=index)


def nvmlDeviceGetName(handle):
    return _field(handle, "name")


def nvmlDeviceGetUUID(handle):
    return _field(handle, "uuid")


def nvmlDeviceGetMemoryInfo(handle, version=None):
    g = _gpu(handle)
    return SimpleNamespace(total=g["total"], used=g["used"], free=g["total"] - g["used"])


def nvmlDeviceGetUtilizationRates(handle):
    gpu, mem = _field(handle, "util")
    return SimpleNamespace(gpu=gpu, memory=mem)


def nvmlDeviceGetTemperature(handle, sensor):
    return _field(handle, "temp")


def nvmlDeviceGetPowerUsage(handle):
    return _field(handle, "power")


def nvmlDeviceGetEnforcedPowerLimit(handle):
    return _field(handle, "limit")


def nvmlDeviceGetPowerManagementLimit(handle):
    return _field(handle, "limit")


def nvmlDeviceGetClockInfo(handle, type):
    return _field(handle, "sm")


def nvmlDeviceGetCurrentClocksThrottleReasons(handle):
    return _field(handle, "throttle")


def nvmlDeviceGetCurrentClocksEventReasons(handle):
    return _field(handle, "throttle")


def nvmlDeviceGetTotalEccErrors(handle, errorType, counterType):
    ecc = _field(handle, "ecc")
    if ecc is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return ecc[errorType]


def nvmlDeviceGetComputeRunningProcesses(handle):
    return [SimpleNamespace(pid=p["pid"], usedGpuMemory=p["used"], gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF)
            for p in _field(handle, "procs")]
