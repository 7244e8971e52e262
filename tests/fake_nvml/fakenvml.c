/*
 * A fake NVML driver library (libnvidia-ml.so.1) for tests: real pynvml, real ctypes, fake hardware.
 *
 * Every call re-reads the file named by $FAKE_NVML_CONFIG, so a test changes what the "driver" says
 * between two polls by rewriting that file. Lines are `key=value`; unknown keys are ignored:
 *
 *   init_rc=9                      nvmlInitWithFlags returns NVML_ERROR_DRIVER_NOT_LOADED
 *   count=2                        number of GPUs (at most 8)
 *   driver_version=550.54.15
 *   gpu0.name=NVIDIA H100 80GB HBM3    gpu0.uuid=GPU-…    gpu0.bus_id=00000000:3B:00.0
 *   gpu0.memory_total=…  gpu0.memory_reserved=…  gpu0.memory_free=…  gpu0.memory_used=…   (bytes)
 *   gpu0.util_gpu=87  gpu0.util_memory=40  (percent)   gpu0.temperature=61  (°C)
 *   gpu0.power_mw=350000  gpu0.power_limit_mw=700000
 *   gpu0.procs=1234:21474836480,5678:1048576     pid:used_bytes, comma separated
 *   gpu0.sm_clock_mhz=1980  gpu0.mem_clock_mhz=2619  gpu0.clocks_event_reasons=4  (NVML's bitmask)
 *   gpu0.ecc_corrected=3  gpu0.ecc_uncorrected=0  (aggregate counts)
 *   gpu0.remapped_correctable=2  gpu0.remapped_uncorrectable=1  gpu0.remap_pending=1  gpu0.remap_failure=0
 *   gpu0.lost=1                    every call on GPU 0 returns NVML_ERROR_GPU_IS_LOST
 *   gpu0.rc.nvmlDeviceGetTemperatureV=3          that call on GPU 0 returns 3 (NotSupported)
 *   rc.nvmlDeviceGetCount_v2=999                 that call returns 999 on every GPU
 *
 * Xid events are a queue in the file `$FAKE_NVML_CONFIG.events`, one `gpu xid` pair per line;
 * nvmlEventSetWait_v2 pops the first line, or returns NVML_ERROR_TIMEOUT when the queue is empty.
 *
 * Struct layouts and version words follow nvml.h as pynvml (nvidia-ml-py 13.x) declares them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GPUS 8

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
};

typedef struct { int index; } fake_device;
typedef fake_device *nvmlDevice_t;
typedef struct { int unused; } fake_event_set;
typedef fake_event_set *nvmlEventSet_t;

typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned int version; unsigned int sensorType; int temperature; } nvmlTemperature_v1_t;
typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;
typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType, eventData;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

#define MEMORY_V2_VERSION 0x02000028u
#define TEMPERATURE_V1_VERSION 0x0100000Cu
#define EVENT_TYPE_XID 0x8ull

static fake_device devices[MAX_GPUS] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};
static fake_event_set the_event_set;

/* Copy the value of `key` from the config file into `out`; 1 when found. */
static int cfg(const char *key, char *out, size_t n) {
    const char *path = getenv("FAKE_NVML_CONFIG");
    if (!path) return 0;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[1024];
    size_t klen = strlen(key);
    int found = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, klen) == 0 && line[klen] == '=') {
            char *v = line + klen + 1;
            v[strcspn(v, "\r\n")] = '\0';
            snprintf(out, n, "%s", v);
            found = 1;
        }
    }
    fclose(f);
    return found;
}

static unsigned long long cfg_u64(const char *key, unsigned long long dflt) {
    char v[64];
    return cfg(key, v, sizeof v) ? strtoull(v, NULL, 10) : dflt;
}

static unsigned long long gpu_u64(int gpu, const char *name, unsigned long long dflt) {
    char key[128];
    snprintf(key, sizeof key, "gpu%d.%s", gpu, name);
    return cfg_u64(key, dflt);
}

static int gpu_count(void) {
    unsigned long long n = cfg_u64("count", 1);
    return n > MAX_GPUS ? MAX_GPUS : (int)n;
}

/* The return code the test chose for `fn` on `gpu` (-1: not a device call); 0 when none. */
static nvmlReturn_t forced_rc(const char *fn, int gpu) {
    char key[160];
    if (gpu >= 0) {
        if (gpu_u64(gpu, "lost", 0)) return NVML_ERROR_GPU_IS_LOST;
        snprintf(key, sizeof key, "gpu%d.rc.%s", gpu, fn);
        unsigned long long rc = cfg_u64(key, 0);
        if (rc) return (nvmlReturn_t)rc;
    }
    snprintf(key, sizeof key, "rc.%s", fn);
    return (nvmlReturn_t)cfg_u64(key, 0);
}

static int device_index(nvmlDevice_t d) {
    if (d < devices || d >= devices + MAX_GPUS) return -1;
    return d->index;
}

#define DEVICE_CALL(fn, dev, gpu)                                   \
    int gpu = device_index(dev);                                    \
    if (gpu < 0 || gpu >= gpu_count()) return NVML_ERROR_INVALID_ARGUMENT; \
    do { nvmlReturn_t rc_ = forced_rc(fn, gpu); if (rc_) return rc_; } while (0)

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    return (nvmlReturn_t)cfg_u64("init_rc", 0);
}

nvmlReturn_t nvmlShutdown(void) { return forced_rc("nvmlShutdown", -1); }

const char *nvmlErrorString(nvmlReturn_t rc) {
    static char text[64];
    snprintf(text, sizeof text, "fake NVML error %d", rc);
    return text;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    nvmlReturn_t rc = forced_rc("nvmlSystemGetDriverVersion", -1);
    if (rc) return rc;
    char v[80] = "550.54.15";
    cfg("driver_version", v, sizeof v);
    snprintf(version, length, "%s", v);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    nvmlReturn_t rc = forced_rc("nvmlDeviceGetCount_v2", -1);
    if (rc) return rc;
    *count = (unsigned int)gpu_count();
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (index >= (unsigned int)gpu_count()) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t rc = forced_rc("nvmlDeviceGetHandleByIndex_v2", (int)index);
    if (rc) return rc;
    *device = &devices[index];
    return NVML_SUCCESS;
}

static nvmlReturn_t gpu_string(nvmlDevice_t dev, const char *fn, const char *name, const char *dflt,
                               char *out, unsigned int length) {
    DEVICE_CALL(fn, dev, gpu);
    char key[64], v[128];
    snprintf(key, sizeof key, "gpu%d.%s", gpu, name);
    if (!cfg(key, v, sizeof v)) snprintf(v, sizeof v, dflt, gpu);
    if (strlen(v) >= length) return NVML_ERROR_INSUFFICIENT_SIZE;
    snprintf(out, length, "%s", v);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t dev, char *name, unsigned int length) {
    return gpu_string(dev, "nvmlDeviceGetName", "name", "Fake GPU %d", name, length);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t dev, char *uuid, unsigned int length) {
    return gpu_string(dev, "nvmlDeviceGetUUID", "uuid", "GPU-00000000-0000-0000-0000-00000000000%d", uuid, length);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t dev, nvmlPciInfo_t *pci) {
    memset(pci, 0, sizeof *pci);
    return gpu_string(dev, "nvmlDeviceGetPciInfo_v3", "bus_id", "00000000:%02X:00.0", pci->busId,
                      sizeof pci->busId);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *m) {
    DEVICE_CALL("nvmlDeviceGetMemoryInfo", dev, gpu);
    m->total = gpu_u64(gpu, "memory_total", 0);
    m->free = gpu_u64(gpu, "memory_free", 0);
    /* v1 has no reserved field: its `used` includes what the driver reserved. */
    m->used = gpu_u64(gpu, "memory_used", 0) + gpu_u64(gpu, "memory_reserved", 0);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev, nvmlMemory_v2_t *m) {
    DEVICE_CALL("nvmlDeviceGetMemoryInfo_v2", dev, gpu);
    if (m->version != MEMORY_V2_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    m->total = gpu_u64(gpu, "memory_total", 0);
    m->reserved = gpu_u64(gpu, "memory_reserved", 0);
    m->free = gpu_u64(gpu, "memory_free", 0);
    m->used = gpu_u64(gpu, "memory_used", 0);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t dev, nvmlUtilization_t *u) {
    DEVICE_CALL("nvmlDeviceGetUtilizationRates", dev, gpu);
    u->gpu = (unsigned int)gpu_u64(gpu, "util_gpu", 0);
    u->memory = (unsigned int)gpu_u64(gpu, "util_memory", 0);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t dev, nvmlTemperature_v1_t *t) {
    DEVICE_CALL("nvmlDeviceGetTemperatureV", dev, gpu);
    if (t->version != TEMPERATURE_V1_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    t->temperature = (int)gpu_u64(gpu, "temperature", 0);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t dev, unsigned int sensor, unsigned int *temp) {
    (void)sensor;
    DEVICE_CALL("nvmlDeviceGetTemperature", dev, gpu);
    *temp = (unsigned int)gpu_u64(gpu, "temperature", 0);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t dev, unsigned int *mw) {
    DEVICE_CALL("nvmlDeviceGetPowerUsage", dev, gpu);
    *mw = (unsigned int)gpu_u64(gpu, "power_mw", 0);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t dev, unsigned int *mw) {
    DEVICE_CALL("nvmlDeviceGetEnforcedPowerLimit", dev, gpu);
    *mw = (unsigned int)gpu_u64(gpu, "power_limit_mw", 0);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t dev, unsigned int type, unsigned int *mhz) {
    DEVICE_CALL("nvmlDeviceGetClockInfo", dev, gpu);
    /* NVML_CLOCK_GRAPHICS 0, SM 1, MEM 2, VIDEO 3 */
    if (type > 3) return NVML_ERROR_INVALID_ARGUMENT;
    static const char *names[] = {"graphics_clock_mhz", "sm_clock_mhz", "mem_clock_mhz", "video_clock_mhz"};
    *mhz = (unsigned int)gpu_u64(gpu, names[type], 0);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t dev, unsigned long long *reasons) {
    DEVICE_CALL("nvmlDeviceGetCurrentClocksEventReasons", dev, gpu);
    *reasons = gpu_u64(gpu, "clocks_event_reasons", 0);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t dev, unsigned int error_type, unsigned int counter_type,
                                         unsigned long long *count) {
    DEVICE_CALL("nvmlDeviceGetTotalEccErrors", dev, gpu);
    /* error_type: NVML_MEMORY_ERROR_TYPE_CORRECTED 0, UNCORRECTED 1; counter_type: VOLATILE 0, AGGREGATE 1 */
    if (error_type > 1 || counter_type > 1) return NVML_ERROR_INVALID_ARGUMENT;
    *count = gpu_u64(gpu, error_type ? "ecc_uncorrected" : "ecc_corrected", 0);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t dev, unsigned int *corr, unsigned int *unc,
                                       unsigned int *pending, unsigned int *failure) {
    DEVICE_CALL("nvmlDeviceGetRemappedRows", dev, gpu);
    *corr = (unsigned int)gpu_u64(gpu, "remapped_correctable", 0);
    *unc = (unsigned int)gpu_u64(gpu, "remapped_uncorrectable", 0);
    *pending = (unsigned int)gpu_u64(gpu, "remap_pending", 0);
    *failure = (unsigned int)gpu_u64(gpu, "remap_failure", 0);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t dev, unsigned int *count,
                                                     nvmlProcessInfo_t *infos) {
    DEVICE_CALL("nvmlDeviceGetComputeRunningProcesses_v3", dev, gpu);
    char key[32], list[512];
    nvmlProcessInfo_t procs[32];
    unsigned int n = 0;
    snprintf(key, sizeof key, "gpu%d.procs", gpu);
    if (cfg(key, list, sizeof list)) {
        for (char *tok = strtok(list, ","); tok && n < 32; tok = strtok(NULL, ",")) {
            unsigned int pid;
            unsigned long long used;
            if (sscanf(tok, "%u:%llu", &pid, &used) == 2) {
                procs[n].pid = pid;
                procs[n].usedGpuMemory = used;
                procs[n].gpuInstanceId = procs[n].computeInstanceId = 0xFFFFFFFFu;
                n++;
            }
        }
    }
    if (n == 0) {
        *count = 0;
        return NVML_SUCCESS;
    }
    if (infos == NULL || *count < n) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    memcpy(infos, procs, n * sizeof *procs);
    *count = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    nvmlReturn_t rc = forced_rc("nvmlEventSetCreate", -1);
    if (rc) return rc;
    *set = &the_event_set;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    (void)set;
    return forced_rc("nvmlEventSetFree", -1);
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t dev, unsigned long long types, nvmlEventSet_t set) {
    (void)types;
    (void)set;
    DEVICE_CALL("nvmlDeviceRegisterEvents", dev, gpu);
    return NVML_SUCCESS;
}

/* Pop the first `gpu xid` line of the events file; the rest is written back. */
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeout_ms) {
    (void)set;
    (void)timeout_ms;
    nvmlReturn_t rc = forced_rc("nvmlEventSetWait_v2", -1);
    if (rc) return rc;
    const char *cfg_path = getenv("FAKE_NVML_CONFIG");
    if (!cfg_path) return NVML_ERROR_TIMEOUT;
    char path[1024];
    snprintf(path, sizeof path, "%s.events", cfg_path);
    FILE *f = fopen(path, "r");
    if (!f) return NVML_ERROR_TIMEOUT;
    static char rest[65536];
    char line[128];
    size_t used = 0;
    int gpu = -1;
    unsigned long long xid = 0;
    while (fgets(line, sizeof line, f)) {
        if (gpu < 0) {
            if (sscanf(line, "%d %llu", &gpu, &xid) != 2) gpu = -1;
        } else if (used + strlen(line) < sizeof rest) {
            memcpy(rest + used, line, strlen(line));
            used += strlen(line);
        }
    }
    fclose(f);
    if (gpu < 0 || gpu >= MAX_GPUS) return NVML_ERROR_TIMEOUT;
    f = fopen(path, "w");
    if (f) {
        fwrite(rest, 1, used, f);
        fclose(f);
    }
    memset(data, 0, sizeof *data);
    data->device = &devices[gpu];
    data->eventType = EVENT_TYPE_XID;
    data->eventData = xid;
    data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFFu;
    return NVML_SUCCESS;
}
