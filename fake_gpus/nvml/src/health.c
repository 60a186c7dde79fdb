/* GPU health of the fake: Xid and ECC events, ECC counters and lost GPUs, and the NVML event-set API
 * (nvmlEventSetCreate, nvmlDeviceGetSupportedEventTypes, nvmlDeviceRegisterEvents, nvmlEventSetWait(_v2),
 * nvmlEventSetFree) that delivers them.
 *
 * The injector (fake_gpus/nvml/health.py, `dra-testbed gpu fail/heal`) is another process than the
 * driver that waits, so faults travel through the node's state directory:
 *   events  "fake-nvml-events 1", then "event <seq> <gpu> <kind> <data> <gi> <ci>", kind one of
 *           xid (data = the Xid), ecc-single, ecc-double, lost, heal; gi/ci 4294967295 when the fault is
 *           not attributable to a MIG instance. Append-only: the writer takes the state lock exclusively,
 *           numbers the record (last seq + 1) and appends the whole line with one write(); readers need
 *           no lock because they consume complete lines only.
 * Each process folds the log into per-GPU health (lost, ECC counters) as it reads, so the log is the one
 * truth and a process started after a fault sees it. An event set registered on a GPU at sequence S
 * receives that GPU's records with seq > S exactly once; records from before the registration never.
 * A `lost` record makes every call on that GPU (and its MIG devices) answer NVML_ERROR_GPU_IS_LOST until
 * a `heal` record; a set registered on it receives NVML_ERROR_GPU_IS_LOST from nvmlEventSetWait once
 * per `lost` record (not on every later wait: NVIDIA's monitor retries at once, it would spin).
 * `heal` clears the lost state and the volatile ECC counters (a GPU reset does), not the aggregate ones.
 * An `xid` record leaves NVML's recovery action for the GPU at the action the catalog gives that Xid (the
 * most drastic one pending, if several); `heal` (the reset) brings it back to NVML_GPU_RECOVERY_ACTION_NONE.
 * fields.c answers it as NVML_FI_DEV_GET_GPU_RECOVERY_ACTION.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define FK_EVENTS_MAGIC "fake-nvml-events 1"
#define FK_NO_INSTANCE 0xFFFFFFFFu
#define FK_MAX_SETS 64
#define FK_MAX_REGS (FK_MAX_GPUS * 4)
#define FK_POLL_NS 10000000L /* 10 ms between looks at the log while a wait is pending */
/* what every board of the catalog answers: the events NVIDIA's health monitor asks for. The catalog
 * holds no per-board ECC fact, and PState/Clock events would never fire on a fake that does not
 * change either, so they are not claimed. */
#define FK_SUPPORTED_EVENTS (nvmlEventTypeXidCriticalError | nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError)

enum { FK_EV_XID, FK_EV_ECC_SINGLE, FK_EV_ECC_DOUBLE, FK_EV_LOST, FK_EV_HEAL, FK_EV_KINDS };
static const char *const fk_kind_names[FK_EV_KINDS] = {"xid", "ecc-single", "ecc-double", "lost", "heal"};

typedef struct {
    unsigned long long seq, data;
    unsigned gpu, kind, gi, ci;
} fk_event;

typedef struct {
    int lost;
    unsigned recovery; /* nvmlDeviceGpuRecoveryAction_t pending since the last heal */
    unsigned long long ecc_volatile[2], ecc_aggregate[2]; /* [0] corrected (single-bit), [1] uncorrected */
} fk_health;

/* Generated from fake_gpus/catalog/xids.py into catalog_data.c (build.py). */
extern const fk_xid_recovery fk_xid_recoveries[];
extern const unsigned fk_n_xid_recoveries;
extern const unsigned fk_xid_recovery_unlisted;

typedef struct { unsigned gpu; unsigned long long mask, from_seq; } fk_reg;

struct nvmlEventSet_st {
    int used;
    size_t next; /* index of the first record of fk_events this set has not looked at */
    unsigned n_regs;
    fk_reg regs[FK_MAX_REGS];
};

static fk_event *fk_events;
static size_t fk_n_events, fk_cap_events;
static unsigned long long fk_last_seq;
static fk_health fk_gpu_health[FK_MAX_GPUS];
static int fk_events_fd = -1;
static off_t fk_events_offset;
static char fk_partial[256]; /* bytes of a line whose end has not been written yet */
static size_t fk_n_partial;
static struct nvmlEventSet_st fk_sets[FK_MAX_SETS];

/* ---------------------------------------------------------------- reading the log */

static unsigned fk_xid_recovery_of(unsigned long long xid) {
    for (unsigned i = 0; i < fk_n_xid_recoveries; i++)
        if (fk_xid_recoveries[i].xid == xid) return fk_xid_recoveries[i].action;
    return fk_xid_recovery_unlisted;
}

static void fk_fold(const fk_event *e) {
    fk_health *h = &fk_gpu_health[e->gpu];
    switch (e->kind) {
    case FK_EV_ECC_SINGLE:
    case FK_EV_ECC_DOUBLE: {
        unsigned k = e->kind == FK_EV_ECC_DOUBLE;
        h->ecc_volatile[k]++;
        h->ecc_aggregate[k]++;
        break;
    }
    case FK_EV_XID: {
        /* NONE < GPU_RESET < NODE_REBOOT, the only values the catalog uses: keep the most drastic */
        unsigned action = fk_xid_recovery_of(e->data);
        if (action > h->recovery) h->recovery = action;
        break;
    }
    case FK_EV_LOST: h->lost = 1; break;
    case FK_EV_HEAL:
        h->lost = 0;
        h->recovery = NVML_GPU_RECOVERY_ACTION_NONE;
        h->ecc_volatile[0] = h->ecc_volatile[1] = 0;
        break;
    default: break;
    }
}

/* Parse one complete line; malformed lines and GPUs this node lacks are skipped (a reader never fails
 * a caller's NVML call over the injector's file). */
static void fk_take_line(const char *line) {
    char kind[32], extra[8];
    fk_event e;
    if (strncmp(line, "fake-nvml-events", 16) == 0) return;
    if (sscanf(line, "event %llu %u %31s %llu %u %u %7s", &e.seq, &e.gpu, kind, &e.data, &e.gi, &e.ci, extra) != 6) return;
    if (e.gpu >= fk_n_gpus || e.seq <= fk_last_seq) return;
    for (e.kind = 0; e.kind < FK_EV_KINDS && strcmp(kind, fk_kind_names[e.kind]) != 0; e.kind++) {}
    if (e.kind == FK_EV_KINDS) return;
    if (fk_n_events == fk_cap_events) {
        size_t cap = fk_cap_events ? 2 * fk_cap_events : 64;
        fk_event *grown = realloc(fk_events, cap * sizeof *grown);
        if (!grown) return;
        fk_events = grown;
        fk_cap_events = cap;
    }
    fk_events[fk_n_events++] = e;
    fk_last_seq = e.seq;
    fk_fold(&e);
}

/* Read what was appended since the last look; caller holds fk_mutex (fk_enter). */
static void fk_health_refresh(void) {
    if (fk_events_fd < 0) {
        char path[PATH_MAX];
        fk_state_path(path, "events");
        fk_events_fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fk_events_fd < 0) return; /* no fault injected on this node yet */
    }
    struct stat st;
    if (fstat(fk_events_fd, &st) != 0 || st.st_size <= fk_events_offset) return;
    char buf[8192];
    ssize_t got;
    while ((got = pread(fk_events_fd, buf, sizeof buf, fk_events_offset)) > 0) {
        fk_events_offset += got;
        for (ssize_t i = 0; i < got; i++) {
            if (buf[i] != '\n') {
                if (fk_n_partial < sizeof fk_partial - 1) fk_partial[fk_n_partial++] = buf[i];
                continue;
            }
            fk_partial[fk_n_partial] = '\0';
            fk_take_line(fk_partial);
            fk_n_partial = 0;
        }
    }
}

/* Session start (core.c): forget the previous state directory's log, read this one's. */
void fk_health_open(void) {
    if (fk_events_fd >= 0) close(fk_events_fd);
    fk_events_fd = -1;
    fk_events_offset = 0;
    fk_n_partial = 0;
    fk_n_events = 0;
    fk_last_seq = 0;
    memset(fk_gpu_health, 0, sizeof fk_gpu_health);
    memset(fk_sets, 0, sizeof fk_sets); /* sets do not outlive nvmlShutdown */
    fk_health_refresh();
}

int fk_gpu_lost(unsigned gpu) {
    fk_health_refresh();
    return gpu < fk_n_gpus && fk_gpu_health[gpu].lost;
}

unsigned fk_gpu_recovery_action(unsigned gpu) {
    fk_health_refresh();
    return gpu < fk_n_gpus ? fk_gpu_health[gpu].recovery : NVML_GPU_RECOVERY_ACTION_NONE;
}

int fk_any_gpu_lost(void) {
    fk_health_refresh();
    for (unsigned v = 0; v < fk_n_views; v++)
        if (fk_gpu_health[fk_views[v].gpu].lost) return 1;
    return 0;
}

/* ---------------------------------------------------------------- device handles */

/* The GPU of a device handle (a MIG device answers for its parent); INVALID_ARGUMENT or GPU_IS_LOST. */
static nvmlReturn_t fk_health_gpu(nvmlDevice_t device, unsigned *gpu) {
    struct nvmlDevice_st *h = fk_dev(device);
    if (!h) return NVML_ERROR_INVALID_ARGUMENT;
    if (fk_gpu_lost(h->gpu)) return NVML_ERROR_GPU_IS_LOST;
    *gpu = h->gpu;
    return NVML_SUCCESS;
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    unsigned gpu;
    if ((rc = fk_health_gpu(device, &gpu))) return fk_leave(rc);
    if (!eventTypes) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    *eventTypes = FK_SUPPORTED_EVENTS;
    return fk_leave(NVML_SUCCESS);
}

/* ---------------------------------------------------------------- event sets */

static struct nvmlEventSet_st *fk_set_of(nvmlEventSet_t set) {
    uintptr_t a = (uintptr_t)set.handle, b = (uintptr_t)fk_sets;
    if (a < b || a >= b + sizeof fk_sets || (a - b) % sizeof fk_sets[0] != 0) return NULL;
    return set.handle->used ? set.handle : NULL;
}

FK_EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    if (!set) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned i = 0; i < FK_MAX_SETS; i++) {
        if (fk_sets[i].used) continue;
        fk_health_refresh();
        fk_sets[i] = (struct nvmlEventSet_st){.used = 1, .next = fk_n_events};
        set->handle = &fk_sets[i];
        return fk_leave(NVML_SUCCESS);
    }
    return fk_leave(NVML_ERROR_UNKNOWN); /* the fake holds 64 sets per process */
}

FK_EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    struct nvmlEventSet_st *s = fk_set_of(set);
    if (!s) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    memset(s, 0, sizeof *s);
    return fk_leave(NVML_SUCCESS);
}

/* Events are per GPU: real NVML does not register per MIG device ("does not currently support
 * per-instance event reporting using MIG device handles"), so a MIG handle is NOT_SUPPORTED; a whole
 * GPU in MIG mode reports its instances' Xids with their gpuInstanceId/computeInstanceId. */
FK_EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    unsigned gpu;
    if ((rc = fk_health_gpu(device, &gpu))) return fk_leave(rc);
    struct nvmlEventSet_st *s = fk_set_of(set);
    if (!s || (eventTypes & ~(unsigned long long)nvmlEventTypeAll)) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    if (fk_dev(device)->is_mig) return fk_leave(NVML_ERROR_NOT_SUPPORTED);
    if (s->n_regs == FK_MAX_REGS) return fk_leave(NVML_ERROR_UNKNOWN);
    /* the types this GPU supports are registered; asking for others is NOT_SUPPORTED, as the header says,
     * and the set stays usable for the supported ones */
    if (eventTypes & FK_SUPPORTED_EVENTS)
        s->regs[s->n_regs++] = (fk_reg){gpu, eventTypes & FK_SUPPORTED_EVENTS, fk_last_seq};
    return fk_leave((eventTypes & ~FK_SUPPORTED_EVENTS) ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS);
}

static unsigned long long fk_event_type(const fk_event *e) {
    switch (e->kind) {
    case FK_EV_XID: return nvmlEventTypeXidCriticalError;
    case FK_EV_ECC_SINGLE: return nvmlEventTypeSingleBitEccError;
    case FK_EV_ECC_DOUBLE: return nvmlEventTypeDoubleBitEccError;
    default: return 0;
    }
}

/* Whether set s takes record e: registered on e's GPU before e, for e's type (any type for `lost`). */
static int fk_set_takes(const struct nvmlEventSet_st *s, const fk_event *e) {
    unsigned long long type = fk_event_type(e);
    if (e->kind == FK_EV_HEAL) return 0;
    for (unsigned i = 0; i < s->n_regs; i++)
        if (s->regs[i].gpu == e->gpu && s->regs[i].from_seq < e->seq && (e->kind == FK_EV_LOST || (s->regs[i].mask & type)))
            return 1;
    return 0;
}

static long long fk_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Polls the log every 10 ms, without holding the library mutex in between, so that other threads'
 * NVML calls (NVIDIA's plugin waits in one goroutine and serves claims in others) never stall. */
FK_EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    long long deadline = fk_now_ms() + timeoutms;
    for (;;) {
        nvmlReturn_t rc = fk_enter();
        if (rc) return rc;
        struct nvmlEventSet_st *s = fk_set_of(set);
        if (!s || !data) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
        fk_health_refresh();
        while (s->next < fk_n_events) {
            const fk_event *e = &fk_events[s->next++];
            if (!fk_set_takes(s, e)) continue;
            int view = fk_view_of_gpu(e->gpu);
            data->device = fk_gpu_handle(view < 0 ? 0 : (unsigned)view);
            data->eventType = fk_event_type(e);
            data->eventData = e->kind == FK_EV_XID ? e->data : 0;
            data->gpuInstanceId = e->kind == FK_EV_XID ? e->gi : FK_NO_INSTANCE;
            data->computeInstanceId = e->kind == FK_EV_XID ? e->ci : FK_NO_INSTANCE;
            return fk_leave(e->kind == FK_EV_LOST ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS);
        }
        fk_leave(NVML_SUCCESS);
        long long left = deadline - fk_now_ms();
        if (left <= 0) return NVML_ERROR_TIMEOUT;
        struct timespec pause = {0, left * 1000000LL < FK_POLL_NS ? left * 1000000LL : FK_POLL_NS};
        nanosleep(&pause, NULL);
    }
}

FK_EXPORT nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    return nvmlEventSetWait_v2(set, data, timeoutms);
}

/* ---------------------------------------------------------------- ECC counters */

/* Injected ECC errors count as device-memory (DRAM) errors: single-bit ones are corrected,
 * double-bit ones uncorrected. */
static nvmlReturn_t fk_ecc_count(nvmlDevice_t device, nvmlMemoryErrorType_t type, nvmlEccCounterType_t counter,
                                 unsigned long long *count) {
    unsigned gpu;
    nvmlReturn_t rc = fk_health_gpu(device, &gpu);
    if (rc) return rc;
    if (!count || type >= NVML_MEMORY_ERROR_TYPE_COUNT || counter >= NVML_ECC_COUNTER_TYPE_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    if (fk_dev(device)->is_mig && counter == NVML_VOLATILE_ECC) return NVML_ERROR_NOT_SUPPORTED;
    const fk_health *h = &fk_gpu_health[gpu];
    *count = counter == NVML_VOLATILE_ECC ? h->ecc_volatile[type] : h->ecc_aggregate[type];
    return NVML_SUCCESS;
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                                   nvmlEccCounterType_t counterType, unsigned long long *eccCounts) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    return fk_leave(fk_ecc_count(device, errorType, counterType, eccCounts));
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetMemoryErrorCounter(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                                       nvmlEccCounterType_t counterType, nvmlMemoryLocation_t locationType,
                                                       unsigned long long *count) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    if (locationType >= NVML_MEMORY_LOCATION_COUNT) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    unsigned long long n = 0;
    rc = fk_ecc_count(device, errorType, counterType, &n);
    if (rc == NVML_SUCCESS && count) *count = locationType == NVML_MEMORY_LOCATION_DEVICE_MEMORY ? n : 0;
    return fk_leave(rc == NVML_SUCCESS && !count ? NVML_ERROR_INVALID_ARGUMENT : rc);
}
