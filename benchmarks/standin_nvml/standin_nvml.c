/*
 * A compiled stand-in for libnvidia-ml.so.1, for the benchmark (benchmarks/bench.py).
 *
 * Built by the bench with the system C compiler against NVIDIA's nvml.h (PyPI
 * nvidia-nvml-dev, a dev dependency) into benchmarks/.standin/libnvidia-ml.so.1 and put
 * on LD_LIBRARY_PATH, so pynvml loads it with ctypes as it loads a real driver: every
 * call is a foreign call with its argument conversions, which the Python fake
 * (tests/support/fake_host.py, benchmarks/fake_nvml_site) skipped.
 *
 * The host is the Python fake's busy H100 (tests/support/fake_host.py: busy_h100,
 * busy_mig_h100, advance) on an R580 driver, chosen by environment variables read when
 * it is loaded:
 *   FAKE_NVML_GPUS     how many GPUs (default 8)
 *   FAKE_NVML_PIDS     comma-separated PIDs of the compute processes, dealt over the GPUs
 *   FAKE_NVML_MIG      a MIG layout on every GPU: 1, 3 or 7 MIG devices (unset: MIG off)
 *   FAKE_NVML_MIG_IDLE set: no process on the MIG devices (unset: one on each)
 *   FAKE_NVML_CALLS    a file the library maps and keeps its counts in (unset: none)
 *   FAKE_NVML_COSTS    a cost file: what each call charges (unset: every call is free)
 *   FAKE_NVML_UNLISTED_BUSY  set: a GPU with no process listed is busy all the same in the
 *                      first half of each second (95% GPU utilization, 0 in the second
 *                      half), in its utilization rates and its GPU sample buffer, its
 *                      memory at the idle baseline: work NVML does not list (another
 *                      container's, a vGPU guest's), as the outside judge's host
 *                      (../shared/perf-judge: util_gpu=square:1000:0:95)
 *
 * A GPU with no process on it is idle, as a real one is: 0% in its utilization rates,
 * its sample buffers and its GPM activity, and no memory used but the driver's
 * reservation (an idle H100 or L40S reports "0 MiB" used through the v2 call); with
 * processes it is busy (87% GPU, 41% memory, 40 GiB used). Timestamps (sample buffers, field entries, process samples) are microseconds
 * of wall time (CLOCK_REALTIME), a real driver's CPU timestamps; a sample buffer holds the
 * last SAMPLES_KEPT samples, one every SAMPLE_PERIOD_US, older ones overwritten.
 * A PID in FAKE_NVML_PIDS stays listed after its process died, as a real driver keeps
 * listing a process whose context it has not torn down yet (issue 43).
 *
 * Costs (issue 42): a real driver's calls are not free; a few poll the GPU's firmware
 * for milliseconds. The cost file has one `NAME MICROSECONDS` a line (# starts a comment):
 *   an entry point's name       charged at each call of it
 *   field.ID                    charged per nvmlDeviceGetFieldValues entry asking for ID
 *   fieldgroup.A-B              charged once per nvmlDeviceGetFieldValues call asking for
 *                               any ID in A..B (on top of the entries' and the function's)
 * Each charge is burnt on the calling thread's CPU (a busy loop on CLOCK_THREAD_CPUTIME_ID
 * before the call returns), as a driver's ioctl is paid by its caller, so it shows in the
 * program's CPU and in the counts' CPU inside the function. A file that is unreadable,
 * larger than COSTS_MAX_BYTES or has a malformed line is refused whole: one line on
 * stderr says why, and every call stays free (the counts say so; standin.py checks them).
 * A name the stand-in does not answer is accepted (another driver's list) and never
 * charged.
 *
 * Counts: for each exported function, its calls, whether it is made on a GPU (a device
 * handle, or nvmlGpmMetricsGet, which computes one GPU's samples) and the CPU time spent
 * inside it, taken on the calling thread's CPU clock (CLOCK_THREAD_CPUTIME_ID) at entry
 * and exit; the same CPU per calling thread (by kernel thread id). The file is a shared
 * mapping, written as the calls happen (atomic adds), read by the bench at any moment:
 *   header  "NVSTAND2", u64 functions, u64 thread slots, u64 cost entries loaded,
 *           i64 cost file refused: 0 no (or no file), the line number, or -1 the whole
 *           file (unreadable, too large)
 *   function[functions]  char name[48], u64 calls, u64 on_gpu (0/1), u64 cpu_ns
 *   thread[thread slots] u64 tid (0: free), u64 cpu_ns, u64 calls
 */
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include "nvml.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

/* ---- the functions, counted ------------------------------------------------------ */

/* X(name, on_gpu) */
#define FUNCTIONS(X)                                                                      \
    X(nvmlInitWithFlags, 0) X(nvmlInit_v2, 0) X(nvmlShutdown, 0)                          \
    X(nvmlErrorString, 0) X(nvmlSystemGetDriverVersion, 0)                                \
    X(nvmlSystemGetCudaDriverVersion, 0) X(nvmlSystemGetCudaDriverVersion_v2, 0)          \
    X(nvmlDeviceGetCount_v2, 0) X(nvmlDeviceGetHandleByIndex_v2, 0)                       \
    X(nvmlDeviceGetUUID, 1) X(nvmlDeviceGetName, 1) X(nvmlDeviceGetSerial, 1)             \
    X(nvmlDeviceGetVbiosVersion, 1) X(nvmlDeviceGetPciInfo_v3, 1)                         \
    X(nvmlDeviceGetMinorNumber, 1) X(nvmlDeviceGetCudaComputeCapability, 1)               \
    X(nvmlDeviceGetMaxClockInfo, 1) X(nvmlDeviceGetClockInfo, 1)                          \
    X(nvmlDeviceGetTemperatureThreshold, 1) X(nvmlDeviceGetMaxPcieLinkGeneration, 1)      \
    X(nvmlDeviceGetMaxPcieLinkWidth, 1) X(nvmlDeviceGetCurrPcieLinkGeneration, 1)         \
    X(nvmlDeviceGetCurrPcieLinkWidth, 1) X(nvmlDeviceGetPcieThroughput, 1)                \
    X(nvmlDeviceGetTemperature, 1) X(nvmlDeviceGetMarginTemperature, 1)                   \
    X(nvmlDeviceGetTemperatureV, 1)                                                       \
    X(nvmlDeviceGetFanSpeed, 1) X(nvmlDeviceGetPowerUsage, 1)                             \
    X(nvmlDeviceGetEnforcedPowerLimit, 1) X(nvmlDeviceGetPowerManagementLimit, 1)         \
    X(nvmlDeviceIsMigDeviceHandle, 1) X(nvmlDeviceGetPerformanceState, 1)                 \
    X(nvmlDeviceGetCurrentClocksEventReasons, 1)                                          \
    X(nvmlDeviceGetCurrentClocksThrottleReasons, 1) X(nvmlDeviceGetPersistenceMode, 1)    \
    X(nvmlDeviceGetMigMode, 1) X(nvmlDeviceGetUtilizationRates, 1)                        \
    X(nvmlDeviceGetEncoderUtilization, 1) X(nvmlDeviceGetDecoderUtilization, 1)           \
    X(nvmlDeviceGetMemoryInfo, 1) X(nvmlDeviceGetMemoryInfo_v2, 1)                        \
    X(nvmlDeviceGetTotalEnergyConsumption, 1)                                             \
    X(nvmlDeviceGetFieldValues, 1) X(nvmlDeviceGetNvLinkErrorCounter, 1)                  \
    X(nvmlDeviceGetSamples, 1) X(nvmlDeviceGetComputeRunningProcesses_v3, 1)              \
    X(nvmlDeviceGetGraphicsRunningProcesses_v3, 1)                                        \
    X(nvmlDeviceGetComputeRunningProcesses_v2, 1)                                         \
    X(nvmlDeviceGetGraphicsRunningProcesses_v2, 1) X(nvmlDeviceGetProcessUtilization, 1)  \
    X(nvmlDeviceGetMaxMigDeviceCount, 1) X(nvmlDeviceGetMigDeviceHandleByIndex, 1)        \
    X(nvmlDeviceGetGpuInstanceRemainingCapacity, 1) X(nvmlDeviceGetGpuInstanceId, 1)      \
    X(nvmlDeviceGetComputeInstanceId, 1) X(nvmlDeviceGetGpuInstanceById, 1)               \
    X(nvmlGpuInstanceGetInfo, 0) X(nvmlGpmQueryDeviceSupport, 1) X(nvmlGpmSampleAlloc, 0) \
    X(nvmlGpmSampleFree, 0) X(nvmlGpmSampleGet, 1) X(nvmlGpmMigSampleGet, 1)              \
    X(nvmlGpmMetricsGet, 1) X(nvmlEventSetCreate, 0)                                      \
    X(nvmlDeviceGetSupportedEventTypes, 1) X(nvmlDeviceRegisterEvents, 1)                 \
    X(nvmlEventSetWait_v2, 0) X(nvmlEventSetFree, 0) X(nvmlDeviceGetGpuFabricInfo, 1)        \
    X(nvmlDeviceGetGpuFabricInfoV, 1)

#define AS_ID(name, on_gpu) F_##name,
enum { FUNCTIONS(AS_ID) F_COUNT };
#define AS_NAME(name, on_gpu) #name,
static const char *const function_names[F_COUNT] = {FUNCTIONS(AS_NAME)};
#define AS_ON_GPU(name, on_gpu) on_gpu,
static const uint64_t function_on_gpu[F_COUNT] = {FUNCTIONS(AS_ON_GPU)};

#define THREAD_SLOTS 256

struct function_slot {
    char name[48];
    uint64_t calls, on_gpu, cpu_ns;
};
struct thread_slot {
    uint64_t tid, cpu_ns, calls;
};
struct counts {
    char magic[8];
    uint64_t functions, thread_slots, cost_entries;
    int64_t cost_refused;
    struct function_slot function[F_COUNT];
    struct thread_slot thread[THREAD_SLOTS];
};

static struct counts private_counts; /* where counts go without FAKE_NVML_CALLS */
static struct counts *counts = &private_counts;
static __thread struct thread_slot *my_slot;

static uint64_t thread_cpu_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static struct thread_slot *thread_slot(void) {
    if (my_slot != NULL) return my_slot;
    uint64_t tid = (uint64_t)syscall(SYS_gettid);
    for (int i = 0; i < THREAD_SLOTS; i++) {
        uint64_t expected = 0;
        if (__atomic_load_n(&counts->thread[i].tid, __ATOMIC_ACQUIRE) == tid ||
            __atomic_compare_exchange_n(&counts->thread[i].tid, &expected, tid, 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            my_slot = &counts->thread[i];
            return my_slot;
        }
    }
    return NULL; /* more threads than slots: counted per function only */
}

/* ---- costs (FAKE_NVML_COSTS) ----------------------------------------------------- */

#define COSTS_MAX_BYTES 65536
#define COSTS_MAX_LINE 255
#define COST_MAX_US 10000000ull /* 10 s: more is a mistake, not a driver */
#define FIELD_IDS 1024          /* field ids charged: 0..FIELD_IDS-1 (nvml.h 13 ends near 300) */
#define FIELD_GROUPS 64

static uint64_t function_cost_ns[F_COUNT];
static uint64_t field_cost_ns[FIELD_IDS];
static struct {
    unsigned first, last;
    uint64_t ns;
} field_groups[FIELD_GROUPS];
static int field_group_count;
static uint64_t cost_entries;
static int64_t cost_refused;
static __thread uint64_t pending_ns; /* charged by the call under way on this thread */

static void burn(uint64_t ns) {
    if (ns == 0) return;
    uint64_t until = thread_cpu_ns() + ns;
    while (thread_cpu_ns() < until) {
    }
}

/* "12" or "6.5" microseconds (at most 3 decimals) -> ns; 0: not a number */
static int parse_microseconds(const char *text, uint64_t *ns) {
    uint64_t whole = 0, fraction = 0, scale = 1000;
    const char *p = text;
    if (*p < '0' || *p > '9') return 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        whole = whole * 10 + (uint64_t)(*p - '0');
        if (whole > COST_MAX_US) return 0;
    }
    if (*p == '.') {
        p++;
        if (*p < '0' || *p > '9') return 0;
        for (; *p >= '0' && *p <= '9'; p++) {
            if (scale == 1) return 0; /* finer than a nanosecond */
            scale /= 10;
            fraction += (uint64_t)(*p - '0') * scale;
        }
    }
    if (*p != '\0') return 0;
    *ns = whole * 1000 + fraction;
    return 1;
}

/* "123" -> 123 below FIELD_IDS, advancing *text; 0: not one */
static int parse_field_id(const char **text, unsigned *id) {
    unsigned value = 0;
    const char *p = *text;
    if (*p < '0' || *p > '9') return 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        value = value * 10 + (unsigned)(*p - '0');
        if (value >= FIELD_IDS) return 0;
    }
    *text = p;
    *id = value;
    return 1;
}

/* one NAME and its cost: NULL, or why the line is refused */
static const char *cost_entry(const char *name, uint64_t ns, unsigned char *field_seen,
                              unsigned char *function_seen) {
    const char *p = name;
    if (strncmp(name, "fieldgroup.", 11) == 0) {
        unsigned first, last;
        p += 11;
        if (!parse_field_id(&p, &first) || *p++ != '-' || !parse_field_id(&p, &last) ||
            *p != '\0' || last < first)
            return "a field group is fieldgroup.A-B, A <= B < 1024";
        for (int k = 0; k < field_group_count; k++)
            if (field_groups[k].first == first && field_groups[k].last == last)
                return "this cost was given before";
        if (field_group_count == FIELD_GROUPS) return "more than 64 field groups";
        field_groups[field_group_count].first = first;
        field_groups[field_group_count].last = last;
        field_groups[field_group_count++].ns = ns;
        return NULL;
    }
    if (strncmp(name, "field.", 6) == 0) {
        unsigned id;
        p += 6;
        if (!parse_field_id(&p, &id) || *p != '\0') return "a field is field.ID, ID < 1024";
        if (field_seen[id]) return "this cost was given before";
        field_seen[id] = 1;
        field_cost_ns[id] = ns;
        return NULL;
    }
    if (strncmp(name, "nvml", 4) != 0) return "a name is an nvml entry point, field.ID or fieldgroup.A-B";
    for (; *p != '\0'; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '_'))
            return "an entry point's name is letters, digits and _";
    for (int f = 0; f < F_COUNT; f++) {
        if (strcmp(function_names[f], name) != 0) continue;
        if (function_seen[f]) return "this cost was given before";
        function_seen[f] = 1;
        function_cost_ns[f] = ns;
        return NULL;
    }
    return NULL; /* not a function the stand-in answers: never called, never charged */
}

static void refuse_costs(const char *path, int64_t line, const char *why) {
    memset(function_cost_ns, 0, sizeof function_cost_ns);
    memset(field_cost_ns, 0, sizeof field_cost_ns);
    field_group_count = 0;
    cost_entries = 0;
    cost_refused = line;
    if (line > 0)
        fprintf(stderr, "standin_nvml: FAKE_NVML_COSTS=%s line %lld: %s; every call is free\n",
                path, (long long)line, why);
    else
        fprintf(stderr, "standin_nvml: FAKE_NVML_COSTS=%s: %s; every call is free\n", path, why);
}

/* FAKE_NVML_COSTS read: every cost set, or none (refuse_costs) */
static void load_costs(void) {
    const char *path = getenv("FAKE_NVML_COSTS");
    if (path == NULL || *path == '\0') return;
    static char text[COSTS_MAX_BYTES + 1];
    static unsigned char field_seen[FIELD_IDS], function_seen[F_COUNT];
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        refuse_costs(path, -1, "cannot be read");
        return;
    }
    size_t size = fread(text, 1, sizeof text, f);
    fclose(f);
    if (size > COSTS_MAX_BYTES) {
        refuse_costs(path, -1, "larger than 64 KiB: not a cost file");
        return;
    }
    text[size] = '\0';
    int64_t line = 0;
    for (char *start = text; start < text + size; ) {
        char *end = memchr(start, '\n', (size_t)(text + size - start));
        if (end == NULL) end = text + size;
        *end = '\0';
        line++;
        if (end - start > COSTS_MAX_LINE) {
            refuse_costs(path, line, "longer than 255 characters");
            return;
        }
        char *hash = strchr(start, '#');
        if (hash != NULL) *hash = '\0';
        char *words[3] = {NULL, NULL, NULL}, *save = NULL;
        int n = 0;
        for (char *w = strtok_r(start, " \t\r", &save); w != NULL && n < 3;
             w = strtok_r(NULL, " \t\r", &save))
            words[n++] = w;
        start = end + 1;
        if (n == 0) continue; /* blank or a comment */
        if (n != 2) {
            refuse_costs(path, line, "a line is NAME MICROSECONDS");
            return;
        }
        const char *name = words[0], *value = words[1];
        uint64_t ns;
        if (strlen(name) >= 48) {
            refuse_costs(path, line, "a name is at most 47 characters");
            return;
        }
        if (!parse_microseconds(value, &ns)) {
            refuse_costs(path, line, "MICROSECONDS is a number from 0 to 10000000, at most 3 decimals");
            return;
        }
        const char *why = cost_entry(name, ns, field_seen, function_seen);
        if (why != NULL) {
            refuse_costs(path, line, why);
            return;
        }
        cost_entries++;
    }
}

/* a nvmlDeviceGetFieldValues call's charge beyond the function's own: each entry's field,
 * each group asked for once */
static uint64_t fields_cost_ns(const nvmlFieldValue_t *values, int count) {
    uint64_t ns = 0;
    for (int i = 0; i < count; i++)
        if (values[i].fieldId < FIELD_IDS) ns += field_cost_ns[values[i].fieldId];
    for (int k = 0; k < field_group_count; k++) {
        for (int i = 0; i < count; i++) {
            if (values[i].fieldId >= field_groups[k].first &&
                values[i].fieldId <= field_groups[k].last) {
                ns += field_groups[k].ns;
                break;
            }
        }
    }
    return ns;
}

static void leave(int function, uint64_t started) {
    burn(function_cost_ns[function] + pending_ns);
    pending_ns = 0;
    uint64_t spent = thread_cpu_ns() - started;
    __atomic_fetch_add(&counts->function[function].calls, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&counts->function[function].cpu_ns, spent, __ATOMIC_RELAXED);
    struct thread_slot *slot = thread_slot();
    if (slot != NULL) {
        __atomic_fetch_add(&slot->cpu_ns, spent, __ATOMIC_RELAXED);
        __atomic_fetch_add(&slot->calls, 1, __ATOMIC_RELAXED);
    }
}

/* every exported function: ENTER first, and RETURN(code) on every way out */
#define ENTER(name) const int function_id_ = F_##name; const uint64_t started_ = thread_cpu_ns()
#define RETURN(code)                          \
    do {                                      \
        nvmlReturn_t code_ = (code);          \
        leave(function_id_, started_);        \
        return code_;                         \
    } while (0)

/* ---- the simulated host ---------------------------------------------------------- */

#define MAX_GPUS 64
#define MAX_PROCESSES 4096
#define MIG_SLOTS 7
#define NVLINK_LINKS 18
#define SAMPLE_PERIOD_US 166667ull /* the driver fills its buffers every 1/6 s */
#define SAMPLES_KEPT 100
#define GIB (1024ull * 1024 * 1024)

struct nvmlDevice_st {
    int gpu;  /* index of the GPU (of the parent, for a MIG device) */
    int mig;  /* index into the GPU's MIG devices; -1: the GPU itself */
};
struct nvmlGpuInstance_st {
    int gpu, mig; /* the first MIG device of the GPU instance speaks for it */
};
struct nvmlGpmSample_st {
    uint64_t magic;
    int gpu, gpu_instance; /* gpu_instance -1: the whole GPU */
    uint64_t interval;
};
struct nvmlEventSet_st {
    uint64_t magic;
    unsigned long long registered[MAX_GPUS];
};

struct mig_device {
    unsigned slot, gpu_instance, compute_instance, slices;
    char uuid[32], name[64];
    int busy; /* one process on it */
};

struct gpu {
    struct nvmlDevice_st handle;
    struct nvmlDevice_st mig_handle[MIG_SLOTS];
    struct nvmlGpuInstance_st gi_handle[MIG_SLOTS];
    int mig_count;
    struct mig_device mig[MIG_SLOTS];
    unsigned pids[MAX_PROCESSES];
    int processes;
    uint64_t gpm_takes[MIG_SLOTS + 1]; /* per GPU instance slot, [MIG_SLOTS]: the GPU */
};

static struct gpu gpus[MAX_GPUS];
static int gpu_count = 8;
static int unlisted_busy; /* FAKE_NVML_UNLISTED_BUSY */
static struct timespec started_at;
static const char *const DRIVER_VERSION = "580.159.04"; /* the H200's of the cost file */
#define CUDA_DRIVER_VERSION 13000
#define GPM_MAGIC 0x4750534d504c4531ull
#define EVENT_MAGIC 0x4556534554000001ull

static const struct {
    unsigned metric;
    double value;
} GPM_VALUES[] = {
    {NVML_GPM_METRIC_GRAPHICS_UTIL, 90.0},  {NVML_GPM_METRIC_SM_UTIL, 40.0},
    {NVML_GPM_METRIC_SM_OCCUPANCY, 25.0},   {NVML_GPM_METRIC_DRAM_BW_UTIL, 30.0},
    {NVML_GPM_METRIC_ANY_TENSOR_UTIL, 55.0}, {NVML_GPM_METRIC_FP64_UTIL, 0.0},
    {NVML_GPM_METRIC_FP32_UTIL, 10.0},      {NVML_GPM_METRIC_FP16_UTIL, 20.0},
    {NVML_GPM_METRIC_INTEGER_UTIL, 5.0},    {NVML_GPM_METRIC_PCIE_TX_PER_SEC, 100.0},
    {NVML_GPM_METRIC_PCIE_RX_PER_SEC, 300.0}, {NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, 1000.0},
    {NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, 2000.0},
};

enum kind { UNSIGNED, SIGNED, ADDS }; /* ADDS: added into the caller's value (ECC totals) */
static const struct {
    unsigned field;
    long long value;
    enum kind kind;
} FIELDS[] = {
    {NVML_FI_DEV_ECC_CURRENT, 1, UNSIGNED},
    {NVML_FI_DEV_ECC_SBE_VOL_TOTAL, 3, ADDS},
    {NVML_FI_DEV_ECC_DBE_VOL_TOTAL, 0, ADDS},
    {NVML_FI_DEV_RETIRED_SBE, 0, UNSIGNED},
    {NVML_FI_DEV_RETIRED_DBE, 0, UNSIGNED},
    {NVML_FI_DEV_RETIRED_PENDING, 0, UNSIGNED},
    {NVML_FI_DEV_REMAPPED_COR, 2, UNSIGNED},
    {NVML_FI_DEV_REMAPPED_UNC, 1, UNSIGNED},
    {NVML_FI_DEV_REMAPPED_PENDING, 1, UNSIGNED},
    {NVML_FI_DEV_REMAPPED_FAILURE, 0, UNSIGNED},
    {NVML_FI_DEV_MEMORY_TEMP, 71, UNSIGNED},
    {NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, 123456789, UNSIGNED},
    {NVML_FI_DEV_PCIE_REPLAY_COUNTER, 7, UNSIGNED},
    {NVML_FI_DEV_TEMPERATURE_SHUTDOWN_TLIMIT, -8, SIGNED},
    {NVML_FI_DEV_TEMPERATURE_SLOWDOWN_TLIMIT, -2, SIGNED},
    {NVML_FI_DEV_TEMPERATURE_GPU_MAX_TLIMIT, 0, SIGNED},
    {NVML_FI_DEV_TEMPERATURE_MEM_MAX_TLIMIT, 0, SIGNED},
    {NVML_FI_DEV_POWER_AVERAGE, 512345, UNSIGNED},
    {NVML_FI_DEV_POWER_INSTANT, 530000, UNSIGNED},
    {NVML_FI_DEV_NVLINK_LINK_COUNT, NVLINK_LINKS, UNSIGNED},
    /* R580: nanoseconds the clocks were held back for each reason since driver load (a
     * busy H100 capped by its power limit now and then), and no recovery action pending */
    {NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP, 81234567890, UNSIGNED},
    {NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST, 0, UNSIGNED},
    {NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN, 0, UNSIGNED},
    {NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN, 0, UNSIGNED},
    {NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN, 0, UNSIGNED},
    {NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, NVML_GPU_RECOVERY_ACTION_NONE, UNSIGNED},
    /* the PCIe link error counters: a few correctable errors, none of the others */
    {NVML_FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS, 12, UNSIGNED},
    {NVML_FI_DEV_PCIE_COUNT_NAKS_RECEIVED, 0, UNSIGNED},
    {NVML_FI_DEV_PCIE_COUNT_RECEIVER_ERROR, 0, UNSIGNED},
    {NVML_FI_DEV_PCIE_COUNT_BAD_TLP, 0, UNSIGNED},
    {NVML_FI_DEV_PCIE_COUNT_NAKS_SENT, 0, UNSIGNED},
    {NVML_FI_DEV_PCIE_COUNT_BAD_DLLP, 0, UNSIGNED},
    {NVML_FI_DEV_PCIE_COUNT_NON_FATAL_ERROR, 0, UNSIGNED},
    {NVML_FI_DEV_PCIE_COUNT_FATAL_ERROR, 0, UNSIGNED},
    {NVML_FI_DEV_PCIE_COUNT_UNSUPPORTED_REQ, 0, UNSIGNED},
    {NVML_FI_DEV_PCIE_COUNT_LCRC_ERROR, 0, UNSIGNED},
    /* the legacy per-lane data-CRC fields pynvml names (L0-L11): a false 0 */
    {NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L0, 0, UNSIGNED},
    {NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L1, 0, UNSIGNED},
    {NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L2, 0, UNSIGNED},
    {NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L3, 0, UNSIGNED},
    {NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L4, 0, UNSIGNED},
    {NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L5, 0, UNSIGNED},
    {NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L6, 0, UNSIGNED},
    {NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L7, 0, UNSIGNED},
    {NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L8, 0, UNSIGNED},
    {NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L9, 0, UNSIGNED},
    {NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L10, 0, UNSIGNED},
    {NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L11, 0, UNSIGNED},
};
/* per link (scopeId 0..NVLINK_LINKS-1): state 1, error counters 0 */
static const struct {
    unsigned field;
    unsigned long long value;
} LINK_FIELDS[] = {
    {NVML_FI_DEV_NVLINK_GET_STATE, 1},
    {NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY, 0},
    {NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY, 0},
    {NVML_FI_DEV_NVLINK_ERROR_DL_CRC, 0},
};

static void map_counts(void) {
    const char *path = getenv("FAKE_NVML_CALLS");
    if (path != NULL && *path != '\0') {
        int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0 && ftruncate(fd, sizeof(struct counts)) == 0) {
            void *mapped =
                mmap(NULL, sizeof(struct counts), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (mapped != MAP_FAILED) counts = mapped;
        }
        if (fd >= 0) close(fd);
    }
    for (int f = 0; f < F_COUNT; f++) {
        snprintf(counts->function[f].name, sizeof counts->function[f].name, "%s",
                 function_names[f]);
        counts->function[f].on_gpu = function_on_gpu[f];
    }
    counts->functions = F_COUNT;
    counts->thread_slots = THREAD_SLOTS;
    counts->cost_entries = cost_entries;
    counts->cost_refused = cost_refused;
    memcpy(counts->magic, "NVSTAND2", 8); /* last: the reader checks it */
}

static void add_mig(struct gpu *g, unsigned slot, unsigned gi, unsigned ci, unsigned slices,
                    const char *profile, int busy) {
    struct mig_device *m = &g->mig[g->mig_count];
    m->slot = slot;
    m->gpu_instance = gi;
    m->compute_instance = ci;
    m->slices = slices;
    m->busy = busy;
    snprintf(m->uuid, sizeof m->uuid, "MIG-%u", slot);
    snprintf(m->name, sizeof m->name, "NVIDIA H100 80GB HBM3 MIG %s", profile);
    g->mig_handle[g->mig_count] = (struct nvmlDevice_st){(int)(g - gpus), g->mig_count};
    g->gi_handle[g->mig_count] = (struct nvmlGpuInstance_st){(int)(g - gpus), g->mig_count};
    g->mig_count++;
}

__attribute__((constructor)) static void set_up(void) {
    clock_gettime(CLOCK_MONOTONIC, &started_at);
    const char *n = getenv("FAKE_NVML_GPUS");
    if (n != NULL && atoi(n) > 0) gpu_count = atoi(n) < MAX_GPUS ? atoi(n) : MAX_GPUS;
    const char *layout = getenv("FAKE_NVML_MIG");
    int mig = layout != NULL ? atoi(layout) : 0;
    int busy = getenv("FAKE_NVML_MIG_IDLE") == NULL;
    unlisted_busy = getenv("FAKE_NVML_UNLISTED_BUSY") != NULL;
    for (int i = 0; i < gpu_count; i++) {
        struct gpu *g = &gpus[i];
        g->handle = (struct nvmlDevice_st){i, -1};
        if (mig == 1) {
            add_mig(g, 0, 0, 0, 7, "7g.80gb", busy);
        } else if (mig == 3) {
            add_mig(g, 0, 2, 0, 3, "3g.40gb", busy);
            add_mig(g, 3, 2, 1, 3, "3g.40gb", busy);
            add_mig(g, 5, 9, 0, 1, "1g.10gb", busy);
        } else if (mig == 7) {
            for (unsigned s = 0; s < 7; s++) add_mig(g, s, 7 + s, 0, 1, "1g.10gb", busy);
        }
    }
    /* the PIDs dealt over the GPUs in turn (pids[i::gpus]) */
    const char *pids = getenv("FAKE_NVML_PIDS");
    for (int k = 0; pids != NULL && *pids != '\0'; k++) {
        char *end;
        unsigned long pid = strtoul(pids, &end, 10);
        if (end == pids) break;
        struct gpu *g = &gpus[k % gpu_count];
        if (g->processes < MAX_PROCESSES) g->pids[g->processes++] = (unsigned)pid;
        pids = *end == ',' ? end + 1 : end;
    }
    load_costs();
    map_counts();
}

static int mig_on(const struct gpu *g) { return g->mig_count > 0; }

/* the GPU of a handle (the parent, for a MIG device), or NULL: not one of ours */
static struct gpu *gpu_of(nvmlDevice_t device) {
    for (int i = 0; i < gpu_count; i++) {
        struct gpu *g = &gpus[i];
        if (device == &g->handle) return g;
        if (device >= g->mig_handle && device < g->mig_handle + g->mig_count) return g;
    }
    return NULL;
}

static struct mig_device *mig_of(nvmlDevice_t device) {
    struct gpu *g = gpu_of(device);
    if (g == NULL || device == &g->handle) return NULL;
    return &g->mig[device - g->mig_handle];
}

/* microseconds of wall time: a real driver's timestamps (its CPU's clock) */
static uint64_t now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000;
}

/* microseconds since the library was loaded (the energy counter's clock) */
static uint64_t loaded_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)(t.tv_sec - started_at.tv_sec) * 1000000u +
           (uint64_t)((t.tv_nsec - started_at.tv_nsec) / 1000);
}

/* a GPU at work: a process on it (a MIG device: on that device) */
static int gpu_busy(const struct gpu *g) { return g->processes > 0; }

/* its GPU utilization at `t_us` (wall microseconds): 87% with a process listed; with
 * none, 95% in the first half of each second under FAKE_NVML_UNLISTED_BUSY, else 0 */
static unsigned gpu_utilization(const struct gpu *g, uint64_t t_us) {
    if (gpu_busy(g)) return 87;
    return unlisted_busy && t_us % 1000000u < 500000u ? 95 : 0;
}

static nvmlReturn_t put_string(char *buf, unsigned size, const char *value) {
    if (buf == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(value) + 1 > size) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, value, strlen(value) + 1);
    return NVML_SUCCESS;
}

static nvmlReturn_t put_uint(unsigned *out, unsigned value) {
    if (out == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *out = value;
    return NVML_SUCCESS;
}

/* a device call's prologue: its handle must be ours */
#define DEVICE(name)                                               \
    ENTER(name);                                                   \
    struct gpu *g = gpu_of(device);                                \
    if (g == NULL) RETURN(NVML_ERROR_INVALID_ARGUMENT);            \
    (void)g

/* what nvml.h says a GPU with MIG enabled does not answer */
#define NOT_UNDER_MIG() \
    if (mig_on(g)) RETURN(NVML_ERROR_NOT_SUPPORTED)

/* ---- library --------------------------------------------------------------------- */

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    ENTER(nvmlInitWithFlags);
    (void)flags;
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlInit_v2(void) {
    ENTER(nvmlInit_v2);
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlShutdown(void) {
    ENTER(nvmlShutdown);
    RETURN(NVML_SUCCESS);
}

EXPORT const char *nvmlErrorString(nvmlReturn_t result) {
    ENTER(nvmlErrorString);
    const char *text = "Unknown Error";
    switch (result) {
        case NVML_SUCCESS: text = "Success"; break;
        case NVML_ERROR_INVALID_ARGUMENT: text = "Invalid Argument"; break;
        case NVML_ERROR_NOT_SUPPORTED: text = "Not Supported"; break;
        case NVML_ERROR_INSUFFICIENT_SIZE: text = "Insufficient Size"; break;
        case NVML_ERROR_NOT_FOUND: text = "Not Found"; break;
        case NVML_ERROR_TIMEOUT: text = "Timeout"; break;
        case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: text = "Argument version mismatch"; break;
        default: break;
    }
    leave(function_id_, started_);
    return text;
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    ENTER(nvmlSystemGetDriverVersion);
    RETURN(put_string(version, length, DRIVER_VERSION));
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version) {
    ENTER(nvmlSystemGetCudaDriverVersion);
    *version = CUDA_DRIVER_VERSION;
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version) {
    ENTER(nvmlSystemGetCudaDriverVersion_v2);
    *version = CUDA_DRIVER_VERSION;
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    ENTER(nvmlDeviceGetCount_v2);
    RETURN(put_uint(count, (unsigned)gpu_count));
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    ENTER(nvmlDeviceGetHandleByIndex_v2);
    if (index >= (unsigned)gpu_count || device == NULL) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *device = &gpus[index].handle;
    RETURN(NVML_SUCCESS);
}

/* ---- identity -------------------------------------------------------------------- */

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    DEVICE(nvmlDeviceGetUUID);
    struct mig_device *m = mig_of(device);
    char value[32];
    snprintf(value, sizeof value, "GPU-h100-%d", (int)(g - gpus));
    RETURN(put_string(uuid, length, m != NULL ? m->uuid : value));
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    DEVICE(nvmlDeviceGetName);
    struct mig_device *m = mig_of(device);
    RETURN(put_string(name, length, m != NULL ? m->name : "NVIDIA H100 80GB HBM3"));
}

EXPORT nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length) {
    DEVICE(nvmlDeviceGetSerial);
    RETURN(put_string(serial, length, "1654922001234"));
}

EXPORT nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char *version,
                                              unsigned int length) {
    DEVICE(nvmlDeviceGetVbiosVersion);
    RETURN(put_string(version, length, "96.00.89.00.01"));
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    DEVICE(nvmlDeviceGetPciInfo_v3);
    snprintf(pci->busId, sizeof pci->busId, "00000000:%02X:00.0", 0x18 + (int)(g - gpus));
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor) {
    DEVICE(nvmlDeviceGetMinorNumber);
    RETURN(put_uint(minor, (unsigned)(g - gpus)));
}

EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major,
                                                       int *minor) {
    DEVICE(nvmlDeviceGetCudaComputeCapability);
    *major = 9;
    *minor = 0;
    RETURN(NVML_SUCCESS);
}

/* ---- scalars --------------------------------------------------------------------- */

static nvmlReturn_t clock_of(nvmlClockType_t type, int max, unsigned *mhz) {
    switch (type) {
        case NVML_CLOCK_GRAPHICS: return put_uint(mhz, max ? 1980 : 1755);
        case NVML_CLOCK_SM: return put_uint(mhz, max ? 1980 : 1755);
        case NVML_CLOCK_MEM: return put_uint(mhz, 2619);
        case NVML_CLOCK_VIDEO: return put_uint(mhz, max ? 1545 : 1260);
        default: return NVML_ERROR_NOT_SUPPORTED;
    }
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                              unsigned int *clock) {
    DEVICE(nvmlDeviceGetMaxClockInfo);
    RETURN(clock_of(type, 1, clock));
}

EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                           unsigned int *clock) {
    DEVICE(nvmlDeviceGetClockInfo);
    RETURN(clock_of(type, 0, clock));
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device,
                                                      nvmlTemperatureThresholds_t which,
                                                      unsigned int *temp) {
    DEVICE(nvmlDeviceGetTemperatureThreshold);
    if (which == NVML_TEMPERATURE_THRESHOLD_SLOWDOWN) RETURN(put_uint(temp, 87));
    if (which == NVML_TEMPERATURE_THRESHOLD_SHUTDOWN) RETURN(put_uint(temp, 92));
    RETURN(NVML_ERROR_NOT_SUPPORTED);
}

/* a device call that answers one constant (unsigned int) */
#define CONSTANT(name, value)                                               \
    EXPORT nvmlReturn_t name(nvmlDevice_t device, unsigned int *out) {      \
        DEVICE(name);                                                       \
        RETURN(put_uint(out, value));                                       \
    }

CONSTANT(nvmlDeviceGetMaxPcieLinkGeneration, 5)
CONSTANT(nvmlDeviceGetMaxPcieLinkWidth, 16)
CONSTANT(nvmlDeviceGetCurrPcieLinkGeneration, 5)
CONSTANT(nvmlDeviceGetCurrPcieLinkWidth, 16)
CONSTANT(nvmlDeviceGetPowerUsage, 512345)          /* mW */
CONSTANT(nvmlDeviceGetEnforcedPowerLimit, 700000)  /* mW */
CONSTANT(nvmlDeviceGetPowerManagementLimit, 700000)

EXPORT nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, nvmlPcieUtilCounter_t counter,
                                                unsigned int *value) {
    DEVICE(nvmlDeviceGetPcieThroughput);
    RETURN(put_uint(value, counter == NVML_PCIE_UTIL_TX_BYTES ? 1250000 : 31000));
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device,
                                             nvmlTemperatureSensors_t sensor, unsigned int *temp) {
    DEVICE(nvmlDeviceGetTemperature);
    (void)sensor;
    RETURN(put_uint(temp, 64));
}

/* nvml.h 13's replacement of nvmlDeviceGetTemperature, which an R580 driver has */
EXPORT nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_t *temp) {
    DEVICE(nvmlDeviceGetTemperatureV);
    if (temp == NULL) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (temp->version != nvmlTemperature_v1) RETURN(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    temp->temperature = 64;
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetMarginTemperature(nvmlDevice_t device,
                                                   nvmlMarginTemperature_t *margin) {
    DEVICE(nvmlDeviceGetMarginTemperature);
    if (margin->version != nvmlMarginTemperature_v1) RETURN(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    margin->marginTemperature = 24;
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int *speed) {
    DEVICE(nvmlDeviceGetFanSpeed); /* SXM boards are fanless and say so */
    (void)speed;
    RETURN(NVML_ERROR_NOT_SUPPORTED);
}

EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *is_mig) {
    DEVICE(nvmlDeviceIsMigDeviceHandle);
    RETURN(put_uint(is_mig, mig_of(device) != NULL));
}

EXPORT nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, nvmlPstates_t *state) {
    DEVICE(nvmlDeviceGetPerformanceState);
    *state = NVML_PSTATE_0;
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                           unsigned long long *reasons) {
    DEVICE(nvmlDeviceGetCurrentClocksEventReasons);
    *reasons = nvmlClocksEventReasonSwPowerCap;
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                              unsigned long long *reasons) {
    DEVICE(nvmlDeviceGetCurrentClocksThrottleReasons);
    *reasons = nvmlClocksEventReasonSwPowerCap;
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode) {
    DEVICE(nvmlDeviceGetPersistenceMode);
    *mode = NVML_FEATURE_ENABLED;
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current,
                                         unsigned int *pending) {
    DEVICE(nvmlDeviceGetMigMode);
    *current = *pending = mig_on(g) ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                  nvmlUtilization_t *utilization) {
    DEVICE(nvmlDeviceGetUtilizationRates);
    NOT_UNDER_MIG();
    utilization->gpu = gpu_utilization(g, now_us());
    utilization->memory = gpu_busy(g) ? 41 : 0;
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int *util,
                                                    unsigned int *period_us) {
    DEVICE(nvmlDeviceGetEncoderUtilization);
    NOT_UNDER_MIG();
    *period_us = 167000;
    RETURN(put_uint(util, 0));
}

EXPORT nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int *util,
                                                    unsigned int *period_us) {
    DEVICE(nvmlDeviceGetDecoderUtilization);
    NOT_UNDER_MIG();
    *period_us = 167000;
    RETURN(put_uint(util, 0));
}

static const unsigned long long MEMORY[4] = {85520809984ull, 593494016ull, 42949672960ull,
                                             41977643008ull}; /* total, reserved, used, free */

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    DEVICE(nvmlDeviceGetMemoryInfo);
    if (mig_of(device) != NULL) {
        memory->total = 10 * GIB;
        memory->used = 8 * GIB;
        memory->free = 2 * GIB;
    } else if (!gpu_busy(g) && !mig_on(g)) { /* no context: the reservation alone (v1) */
        memory->total = MEMORY[0];
        memory->used = MEMORY[1];
        memory->free = MEMORY[0] - MEMORY[1];
    } else {
        memory->total = MEMORY[0];
        memory->used = MEMORY[2];
        memory->free = MEMORY[3];
    }
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    DEVICE(nvmlDeviceGetMemoryInfo_v2);
    if (memory->version != nvmlMemory_v2) RETURN(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    if (mig_of(device) != NULL) {
        memory->total = 10 * GIB;
        memory->reserved = 0;
        memory->used = 8 * GIB;
        memory->free = 2 * GIB;
    } else if (!gpu_busy(g) && !mig_on(g)) { /* no context: nothing used (v2) */
        memory->total = MEMORY[0];
        memory->reserved = MEMORY[1];
        memory->used = 0;
        memory->free = MEMORY[0] - MEMORY[1];
    } else {
        memory->total = MEMORY[0];
        memory->reserved = MEMORY[1];
        memory->used = MEMORY[2];
        memory->free = MEMORY[3];
    }
    RETURN(NVML_SUCCESS);
}

/* ---- arrays ---------------------------------------------------------------------- */

/* millijoules since driver load: 512 W since the library was loaded */
static unsigned long long energy_mj(void) { return 123456789ull + loaded_us() / 1000 * 512; }

EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device,
                                                        unsigned long long *energy) {
    DEVICE(nvmlDeviceGetTotalEnergyConsumption);
    if (energy == NULL) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *energy = energy_mj();
    RETURN(NVML_SUCCESS);
}

/* what changes every call on a GPU at work: the energy counter (512 W since load) and
 * the instantaneous power (around 530 W); the rest of FIELDS is constant, as ECC counts,
 * remapped rows, T.Limit thresholds and link counts are on a healthy GPU */
static int moving_field(nvmlFieldValue_t *entry) {
    uint64_t us = loaded_us();
    unsigned long long value;
    if (entry->fieldId == NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION) value = energy_mj();
    else if (entry->fieldId == NVML_FI_DEV_POWER_INSTANT) value = 520000 + us % 20000;
    else return 0;
    entry->nvmlReturn = NVML_SUCCESS;
    entry->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
    entry->value.ullVal = value;
    return 1;
}

static void field_value(nvmlFieldValue_t *entry) {
    if (moving_field(entry)) return;
    for (size_t i = 0; i < sizeof LINK_FIELDS / sizeof LINK_FIELDS[0]; i++) {
        if (LINK_FIELDS[i].field == entry->fieldId && entry->scopeId < NVLINK_LINKS) {
            entry->nvmlReturn = NVML_SUCCESS;
            entry->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
            entry->value.ullVal = LINK_FIELDS[i].value;
            return;
        }
    }
    for (size_t i = 0; i < sizeof FIELDS / sizeof FIELDS[0]; i++) {
        if (FIELDS[i].field != entry->fieldId) continue;
        entry->nvmlReturn = NVML_SUCCESS;
        if (FIELDS[i].kind == SIGNED) {
            entry->valueType = NVML_VALUE_TYPE_SIGNED_INT;
            entry->value.siVal = (int)FIELDS[i].value;
        } else {
            entry->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
            unsigned long long added = FIELDS[i].kind == ADDS ? entry->value.ullVal : 0;
            entry->value.ullVal = (unsigned long long)FIELDS[i].value + added;
        }
        return;
    }
    entry->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
}

EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int count,
                                             nvmlFieldValue_t *values) {
    DEVICE(nvmlDeviceGetFieldValues);
    long long now = (long long)now_us();
    pending_ns += fields_cost_ns(values, count);
    for (int i = 0; i < count; i++) {
        field_value(&values[i]);
        values[i].timestamp = now + i; /* as a driver stamps each entry */
        values[i].latencyUsec = 1;
    }
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device, unsigned int link,
                                                    nvmlNvLinkErrorCounter_t counter,
                                                    unsigned long long *value) {
    DEVICE(nvmlDeviceGetNvLinkErrorCounter);
    if (link >= NVLINK_LINKS || counter != NVML_NVLINK_ERROR_DL_CRC_DATA)
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    *value = 0;
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t device, nvmlSamplingType_t type,
                                         unsigned long long since, nvmlValueType_t *value_type,
                                         unsigned int *count, nvmlSample_t *samples) {
    DEVICE(nvmlDeviceGetSamples);
    NOT_UNDER_MIG();
    unsigned value;
    if (type == NVML_GPU_UTILIZATION_SAMPLES) value = gpu_busy(g) ? 87 : 0;
    else if (type == NVML_MEMORY_UTILIZATION_SAMPLES) value = gpu_busy(g) ? 41 : 0;
    else RETURN(NVML_ERROR_NOT_SUPPORTED);
    /* the ring: the last SAMPLES_KEPT stamps up to now, one per period, oldest first */
    uint64_t now = now_us(), newest = now - now % SAMPLE_PERIOD_US;
    unsigned newer = 0;
    for (unsigned i = 0; i < SAMPLES_KEPT; i++) {
        if (newest < i * SAMPLE_PERIOD_US + 1) break;
        if (newest - i * SAMPLE_PERIOD_US > since) newer++;
    }
    if (newer == 0) RETURN(NVML_ERROR_NOT_FOUND);
    *value_type = NVML_VALUE_TYPE_UNSIGNED_INT;
    if (samples == NULL) {
        *count = newer;
        RETURN(NVML_SUCCESS);
    }
    if (*count < newer) {
        *count = newer;
        RETURN(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    for (unsigned k = 0; k < newer; k++) {
        samples[k].timeStamp = newest - (newer - 1 - k) * SAMPLE_PERIOD_US;
        samples[k].sampleValue.uiVal =
            type == NVML_GPU_UTILIZATION_SAMPLES ? gpu_utilization(g, samples[k].timeStamp) : value;
    }
    *count = newer;
    RETURN(NVML_SUCCESS);
}

static nvmlReturn_t process_list(const struct gpu *g, const struct mig_device *m,
                                 unsigned *count, nvmlProcessInfo_t *infos) {
    unsigned n = m != NULL ? (unsigned)m->busy : (unsigned)g->processes;
    if (infos == NULL) {
        *count = n;
        return n ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    }
    if (*count < n) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < n; i++) {
        memset(&infos[i], 0, sizeof infos[i]);
        if (m != NULL) {
            infos[i].pid = 20000 + m->slot;
            infos[i].usedGpuMemory = 8 * GIB;
        } else {
            infos[i].pid = g->pids[i];
            infos[i].usedGpuMemory = (1 + i % 5) * GIB;
        }
        infos[i].gpuInstanceId = infos[i].computeInstanceId = 0xFFFFFFFFu;
    }
    *count = n;
    return NVML_SUCCESS;
}

/* the compute processes (graphics: none); _v2 is the older branches' symbol */
#define PROCESS_LIST(name, graphics)                                                       \
    EXPORT nvmlReturn_t name(nvmlDevice_t device, unsigned int *count,                     \
                             nvmlProcessInfo_t *infos) {                                   \
        DEVICE(name);                                                                      \
        if (graphics) {                                                                    \
            *count = 0;                                                                    \
            RETURN(NVML_SUCCESS);                                                          \
        }                                                                                  \
        RETURN(process_list(g, mig_of(device), count, infos));                             \
    }

PROCESS_LIST(nvmlDeviceGetComputeRunningProcesses_v3, 0)
PROCESS_LIST(nvmlDeviceGetComputeRunningProcesses_v2, 0)
PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses_v3, 1)
PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses_v2, 1)

EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                                    nvmlProcessUtilizationSample_t *samples,
                                                    unsigned int *count,
                                                    unsigned long long since) {
    DEVICE(nvmlDeviceGetProcessUtilization);
    NOT_UNDER_MIG();
    uint64_t now = now_us(), newest = now - now % SAMPLE_PERIOD_US;
    unsigned n = newest > since ? (unsigned)g->processes : 0; /* one sample each, the newest */
    if (n == 0) RETURN(NVML_ERROR_NOT_FOUND);
    if (samples == NULL || *count < n) {
        *count = n;
        RETURN(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    for (unsigned i = 0; i < n; i++) {
        samples[i].pid = g->pids[i];
        samples[i].timeStamp = newest;
        samples[i].smUtil = 10 + i % 50;
        samples[i].memUtil = 5;
        samples[i].encUtil = samples[i].decUtil = 0;
    }
    *count = n;
    RETURN(NVML_SUCCESS);
}

/* ---- MIG ------------------------------------------------------------------------- */

EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    DEVICE(nvmlDeviceGetMaxMigDeviceCount);
    if (!mig_on(g)) RETURN(NVML_ERROR_NOT_SUPPORTED);
    RETURN(put_uint(count, MIG_SLOTS));
}

EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                        nvmlDevice_t *mig) {
    DEVICE(nvmlDeviceGetMigDeviceHandleByIndex);
    for (int i = 0; i < g->mig_count; i++) {
        if (g->mig[i].slot == index) {
            *mig = &g->mig_handle[i];
            RETURN(NVML_SUCCESS);
        }
    }
    RETURN(NVML_ERROR_NOT_FOUND); /* an empty slot */
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device,
                                                              unsigned int profile,
                                                              unsigned int *count) {
    DEVICE(nvmlDeviceGetGpuInstanceRemainingCapacity);
    if (!mig_on(g) || profile != NVML_GPU_INSTANCE_PROFILE_1_SLICE)
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    unsigned used = 0;
    for (int i = 0; i < g->mig_count; i++) {
        int first = 1; /* each GPU instance's slices once */
        for (int j = 0; j < i; j++) first &= g->mig[j].gpu_instance != g->mig[i].gpu_instance;
        if (first) used += g->mig[i].slices;
    }
    RETURN(put_uint(count, used < MIG_SLOTS ? MIG_SLOTS - used : 0));
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
    DEVICE(nvmlDeviceGetGpuInstanceId);
    struct mig_device *m = mig_of(device);
    if (m == NULL) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    RETURN(put_uint(id, m->gpu_instance));
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id) {
    DEVICE(nvmlDeviceGetComputeInstanceId);
    struct mig_device *m = mig_of(device);
    if (m == NULL) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    RETURN(put_uint(id, m->compute_instance));
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
                                                 nvmlGpuInstance_t *instance) {
    DEVICE(nvmlDeviceGetGpuInstanceById);
    if (!mig_on(g)) RETURN(NVML_ERROR_NOT_SUPPORTED);
    for (int i = 0; i < g->mig_count; i++) {
        if (g->mig[i].gpu_instance == id) {
            *instance = &g->gi_handle[i];
            RETURN(NVML_SUCCESS);
        }
    }
    RETURN(NVML_ERROR_NOT_FOUND);
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t instance,
                                           nvmlGpuInstanceInfo_t *info) {
    ENTER(nvmlGpuInstanceGetInfo);
    (void)instance;
    (void)info;
    RETURN(NVML_ERROR_NOT_FOUND); /* the Python fake's busy MIG H100 gives no placement */
}

/* ---- GPM ------------------------------------------------------------------------- */

EXPORT nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *support) {
    DEVICE(nvmlGpmQueryDeviceSupport);
    support->isSupportedDevice = 1;
    RETURN(NVML_SUCCESS);
}

/* a new opaque handle (a GPM sample, an event set): zeroed, its magic first */
static void *new_handle(size_t size, uint64_t magic) {
    uint64_t *handle = calloc(1, size);
    if (handle != NULL) *handle = magic;
    return handle;
}

EXPORT nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *sample) {
    ENTER(nvmlGpmSampleAlloc);
    *sample = new_handle(sizeof **sample, GPM_MAGIC);
    if (*sample == NULL) RETURN(NVML_ERROR_MEMORY);
    (*sample)->gpu = -1;
    RETURN(NVML_SUCCESS);
}

static int gpm_sample_ok(nvmlGpmSample_t s) { return s != NULL && s->magic == GPM_MAGIC; }

EXPORT nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample) {
    ENTER(nvmlGpmSampleFree);
    if (!gpm_sample_ok(sample)) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    sample->magic = 0;
    free(sample);
    RETURN(NVML_SUCCESS);
}

static nvmlReturn_t gpm_take(struct gpu *g, int gpu_instance, nvmlGpmSample_t sample) {
    if (!gpm_sample_ok(sample)) return NVML_ERROR_INVALID_ARGUMENT;
    int slot = MIG_SLOTS;
    if (gpu_instance >= 0) {
        slot = -1;
        for (int i = 0; i < g->mig_count && slot < 0; i++)
            if ((int)g->mig[i].gpu_instance == gpu_instance) slot = i;
        if (slot < 0) return NVML_ERROR_INVALID_ARGUMENT;
    }
    sample->gpu = (int)(g - gpus);
    sample->gpu_instance = gpu_instance;
    sample->interval = __atomic_fetch_add(&g->gpm_takes[slot], 1, __ATOMIC_RELAXED);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t sample) {
    DEVICE(nvmlGpmSampleGet);
    RETURN(gpm_take(g, -1, sample));
}

EXPORT nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned int gpu_instance,
                                        nvmlGpmSample_t sample) {
    DEVICE(nvmlGpmMigSampleGet);
    RETURN(gpm_take(g, (int)gpu_instance, sample));
}

EXPORT nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *request) {
    ENTER(nvmlGpmMetricsGet);
    nvmlGpmSample_t first = request->sample1, second = request->sample2;
    if (!gpm_sample_ok(first) || !gpm_sample_ok(second) || first->gpu < 0 ||
        first->gpu != second->gpu)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    int mig = second->gpu_instance >= 0, at_work = 0;
    const struct gpu *g = &gpus[first->gpu];
    if (!mig) at_work = gpu_busy(g);
    for (int i = 0; mig && i < g->mig_count; i++)
        at_work |= (int)g->mig[i].gpu_instance == second->gpu_instance && g->mig[i].busy;
    for (unsigned i = 0; i < request->numMetrics && i < NVML_GPM_METRIC_MAX; i++) {
        nvmlGpmMetric_t *metric = &request->metrics[i];
        metric->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        if (mig) { /* a GPU instance: SM activity only */
            if (metric->metricId == NVML_GPM_METRIC_SM_UTIL) {
                metric->nvmlReturn = NVML_SUCCESS;
                metric->value = at_work ? 50.0 : 0.0;
            }
            continue;
        }
        for (size_t k = 0; k < sizeof GPM_VALUES / sizeof GPM_VALUES[0]; k++) {
            if (GPM_VALUES[k].metric == metric->metricId) {
                metric->nvmlReturn = NVML_SUCCESS;
                metric->value = at_work ? GPM_VALUES[k].value : 0.0;
            }
        }
    }
    RETURN(NVML_SUCCESS);
}

/* ---- events ---------------------------------------------------------------------- */

EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    ENTER(nvmlEventSetCreate);
    *set = new_handle(sizeof **set, EVENT_MAGIC);
    RETURN(*set == NULL ? NVML_ERROR_MEMORY : NVML_SUCCESS);
}

#define SUPPORTED_EVENTS                                                                    \
    (nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError | nvmlEventTypePState | \
     nvmlEventTypeXidCriticalError | nvmlEventTypeClock)

EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device,
                                                     unsigned long long *types) {
    DEVICE(nvmlDeviceGetSupportedEventTypes);
    *types = SUPPORTED_EVENTS;
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types,
                                             nvmlEventSet_t set) {
    DEVICE(nvmlDeviceRegisterEvents);
    if (set == NULL || set->magic != EVENT_MAGIC) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    if (types & ~(unsigned long long)SUPPORTED_EVENTS) RETURN(NVML_ERROR_NOT_SUPPORTED);
    set->registered[g - gpus] |= types;
    RETURN(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data,
                                        unsigned int timeout_ms) {
    ENTER(nvmlEventSetWait_v2);
    (void)data;
    if (set == NULL || set->magic != EVENT_MAGIC) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    /* no event ever comes: the wait blocks for its timeout, off the CPU, as a driver's */
    struct timespec wait = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000};
    while (nanosleep(&wait, &wait) != 0) {
    }
    RETURN(NVML_ERROR_TIMEOUT);
}

EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    ENTER(nvmlEventSetFree);
    if (set == NULL || set->magic != EVENT_MAGIC) RETURN(NVML_ERROR_INVALID_ARGUMENT);
    set->magic = 0;
    free(set);
    RETURN(NVML_SUCCESS);
}

/* ---- fabric ---------------------------------------------------------------------- */

/* an H100 without an NVLink fabric (no NVSwitch), as the Python fake's busy H100 */
EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *info) {
    DEVICE(nvmlDeviceGetGpuFabricInfo);
    (void)info;
    RETURN(NVML_ERROR_NOT_SUPPORTED);
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device,
                                                nvmlGpuFabricInfoV_t *info) {
    DEVICE(nvmlDeviceGetGpuFabricInfoV);
    (void)info;
    RETURN(NVML_ERROR_NOT_SUPPORTED);
}
