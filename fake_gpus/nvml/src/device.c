/* Device enumeration and per-device queries, for whole GPUs and MIG devices. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"

#define FK_MIB 1048576ULL

/* A resolved device: the GPU (state index), and for a MIG device its instances (copied from the
 * state snapshot, which is re-read so a destroyed MIG device is refused). */
typedef struct {
    struct nvmlDevice_st *h;
    const fk_gpu *gpu;
    int is_mig;
    const fk_gi_profile *gip;
    const fk_ci_profile *cip;
    fk_ci ci;
} fk_resolved;

/* Resolve `device` under fk_enter(); INVALID_ARGUMENT for garbage or a MIG device that is gone. */
static nvmlReturn_t fk_resolve(nvmlDevice_t device, fk_resolved *r) {
    memset(r, 0, sizeof *r);
    r->h = fk_dev(device);
    if (!r->h) return NVML_ERROR_INVALID_ARGUMENT;
    if (fk_gpu_lost(r->h->gpu)) return NVML_ERROR_GPU_IS_LOST; /* a MIG device of a lost GPU too */
    r->gpu = &fk_gpus[r->h->gpu];
    if (!r->h->is_mig) return NVML_SUCCESS;
    r->is_mig = 1;
    nvmlReturn_t rc = fk_state_load(0);
    if (rc) return rc;
    const fk_gi *gi = fk_find_gi(r->h->gpu, r->h->gi);
    const fk_ci *ci = fk_find_ci(r->h->gpu, r->h->gi, r->h->ci);
    if (gi && ci) {
        r->ci = *ci;
        r->gip = fk_gi_profile_by_id(r->gpu->board, gi->profile_id);
        r->cip = r->gip ? fk_ci_profile_by_id(r->gip, ci->profile_id) : NULL;
    }
    fk_state_unlock();
    return (gi && ci && r->gip && r->cip) ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

/* ---------------------------------------------------------------- enumeration */

static nvmlReturn_t fk_count(unsigned int *count) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    if (!count) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    *count = fk_n_views;
    return fk_leave(NVML_SUCCESS);
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount) { return fk_count(deviceCount); }
FK_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount) { return fk_count(deviceCount); }

static nvmlReturn_t fk_by_index(unsigned int index, nvmlDevice_t *device) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    if (!device || index >= fk_n_views) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    if (fk_gpu_lost(fk_views[index].gpu)) return fk_leave(NVML_ERROR_GPU_IS_LOST); /* as nvml.h documents */
    *device = fk_gpu_handle(index);
    return fk_leave(NVML_SUCCESS);
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) { return fk_by_index(index, device); }
FK_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) { return fk_by_index(index, device); }

/* A GPU UUID finds a visible GPU; a MIG UUID finds a visible MIG device. A lost GPU's UUID answers
 * GPU_IS_LOST, and so does a UUID found nowhere while some GPU is lost (nvml.h: "if any GPU has fallen
 * off the bus"; the search would have had to ask it); healthy GPUs stay reachable so that a monitor keeps
 * watching them. */
FK_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    if (!uuid || !device) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned v = 0; v < fk_n_views; v++) {
        if (strcasecmp(fk_gpus[fk_views[v].gpu].uuid, uuid) == 0) {
            if (fk_gpu_lost(fk_views[v].gpu)) return fk_leave(NVML_ERROR_GPU_IS_LOST);
            *device = fk_gpu_handle(v);
            return fk_leave(NVML_SUCCESS);
        }
    }
    if (strncasecmp(uuid, "MIG-", 4) != 0) return fk_leave(fk_any_gpu_lost() ? NVML_ERROR_GPU_IS_LOST : NVML_ERROR_NOT_FOUND);
    rc = fk_state_load(0);
    if (rc) return fk_leave(rc);
    rc = NVML_ERROR_NOT_FOUND;
    for (unsigned v = 0; v < fk_n_views && rc; v++) {
        const fk_mig_gpu *m = &fk_mig[fk_views[v].gpu];
        for (unsigned i = 0; i < m->n_ci && rc; i++) {
            if (strcasecmp(m->ci[i].uuid, uuid) == 0 && fk_view_shows(v, m->ci[i].gi, m->ci[i].id)) {
                *device = fk_mig_handle(fk_views[v].gpu, m->ci[i].gi, m->ci[i].id);
                rc = fk_gpu_lost(fk_views[v].gpu) ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
            }
        }
    }
    fk_state_unlock();
    if (rc == NVML_ERROR_NOT_FOUND && fk_any_gpu_lost()) rc = NVML_ERROR_GPU_IS_LOST;
    return fk_leave(rc);
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetHandleBySerial(const char *serial, nvmlDevice_t *device) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    if (!serial || !device) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned v = 0; v < fk_n_views; v++) {
        if (strcmp(fk_gpus[fk_views[v].gpu].serial, serial) == 0) {
            *device = fk_gpu_handle(v);
            return fk_leave(NVML_SUCCESS);
        }
    }
    return fk_leave(NVML_ERROR_NOT_FOUND);
}

/* Accept "dddddddd:bb:dd.f", "dddd:bb:dd.f" and "bb:dd.f", hex, any case, as NVML does. */
static int fk_parse_bus_id(const char *s, unsigned *dom, unsigned *bus, unsigned *dev) {
    unsigned fn;
    char tail;
    if (sscanf(s, "%x:%x:%x.%x%c", dom, bus, dev, &fn, &tail) == 4) return 1;
    *dom = 0;
    return sscanf(s, "%x:%x.%x%c", bus, dev, &fn, &tail) == 3;
}

static nvmlReturn_t fk_by_bus_id(const char *pciBusId, nvmlDevice_t *device) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    unsigned dom, bus, dev;
    if (!pciBusId || !device || !fk_parse_bus_id(pciBusId, &dom, &bus, &dev)) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned v = 0; v < fk_n_views; v++) {
        const fk_gpu *g = &fk_gpus[fk_views[v].gpu];
        if (g->domain == dom && g->bus == bus && g->device == dev) {
            *device = fk_gpu_handle(v);
            return fk_leave(NVML_SUCCESS);
        }
    }
    return fk_leave(NVML_ERROR_NOT_FOUND);
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device) { return fk_by_bus_id(pciBusId, device); }
FK_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device) { return fk_by_bus_id(pciBusId, device); }

/* ---------------------------------------------------------------- identity */

FK_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    fk_resolved r;
    if ((rc = fk_resolve(device, &r))) return fk_leave(rc);
    if (!name) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    char buf[192];
    if (r.is_mig) /* e.g. "NVIDIA H100 80GB HBM3 MIG 1g.10gb"; a partial compute instance shows its own profile */
        snprintf(buf, sizeof buf, "%s MIG %s", r.gpu->board->product_name,
                 r.cip->slice_count < r.gip->slice_count ? r.cip->name : r.gip->name);
    else
        snprintf(buf, sizeof buf, "%s", r.gpu->board->product_name);
    fk_copy_str(name, buf, length, &rc);
    return fk_leave(rc);
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    fk_resolved r;
    if ((rc = fk_resolve(device, &r))) return fk_leave(rc);
    if (!uuid) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    fk_copy_str(uuid, r.is_mig ? r.ci.uuid : r.gpu->uuid, length, &rc);
    return fk_leave(rc);
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    fk_resolved r;
    if ((rc = fk_resolve(device, &r))) return fk_leave(rc);
    if (!serial) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    fk_copy_str(serial, r.gpu->serial, length, &rc);
    return fk_leave(rc);
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    fk_resolved r;
    if ((rc = fk_resolve(device, &r))) return fk_leave(rc);
    if (!index) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    *index = r.h->view;
    return fk_leave(NVML_SUCCESS);
}

/* Minor numbers belong to whole GPUs (/dev/nvidiaN); MIG devices have none. */
FK_EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    fk_resolved r;
    if ((rc = fk_resolve(device, &r))) return fk_leave(rc);
    if (!minorNumber) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    if (r.is_mig) return fk_leave(NVML_ERROR_NOT_SUPPORTED);
    *minorNumber = r.gpu->minor;
    return fk_leave(NVML_SUCCESS);
}

/* Fill an nvmlPciInfo_t; `full` = 0 writes only the fields every struct revision shares. */
static nvmlReturn_t fk_pci(nvmlDevice_t device, nvmlPciInfo_t *pci, int full) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    fk_resolved r;
    if ((rc = fk_resolve(device, &r))) return fk_leave(rc);
    if (!pci) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    const fk_gpu *g = r.gpu;
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT, g->domain & 0xffff, g->bus, g->device);
    pci->domain = g->domain;
    pci->bus = g->bus;
    pci->device = g->device;
    pci->pciDeviceId = g->board->pci_device_id;
    pci->pciSubSystemId = g->board->pci_subsystem_id;
    if (full) snprintf(pci->busId, sizeof pci->busId, NVML_DEVICE_PCI_BUS_ID_FMT, g->domain, g->bus, g->device);
    return fk_leave(NVML_SUCCESS);
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) { return fk_pci(device, pci, 1); }
FK_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci) { return fk_pci(device, pci, 1); }
/* v1 callers pass the older, shorter struct: only the shared prefix is written. */
FK_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci) { return fk_pci(device, pci, 0); }

/* ---------------------------------------------------------------- capabilities */

/* Memory of a whole GPU or of a MIG device's GPU instance; nothing is ever allocated on a fake. */
static unsigned long long fk_total_bytes(const fk_resolved *r) {
    return (r->is_mig ? r->gip->memory_mib : r->gpu->board->memory_mib) * FK_MIB;
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    fk_resolved r;
    if ((rc = fk_resolve(device, &r))) return fk_leave(rc);
    if (!memory) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    memory->total = fk_total_bytes(&r);
    memory->free = memory->total;
    memory->used = 0;
    return fk_leave(NVML_SUCCESS);
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    fk_resolved r;
    if ((rc = fk_resolve(device, &r))) return fk_leave(rc);
    if (!memory) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    if (memory->version != nvmlMemory_v2) return fk_leave(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    memory->total = fk_total_bytes(&r);
    memory->reserved = 0;
    memory->free = memory->total;
    memory->used = 0;
    return fk_leave(NVML_SUCCESS);
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t *arch) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    fk_resolved r;
    if ((rc = fk_resolve(device, &r))) return fk_leave(rc);
    if (!arch) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    *arch = r.gpu->board->nvml_architecture;
    return fk_leave(NVML_SUCCESS);
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *type) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    fk_resolved r;
    if ((rc = fk_resolve(device, &r))) return fk_leave(rc);
    if (!type) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    *type = (nvmlBrandType_t)r.gpu->board->nvml_brand;
    return fk_leave(NVML_SUCCESS);
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    fk_resolved r;
    if ((rc = fk_resolve(device, &r))) return fk_leave(rc);
    if (!major || !minor) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    *major = r.gpu->board->cc_major;
    *minor = r.gpu->board->cc_minor;
    return fk_leave(NVML_SUCCESS);
}

/* Bare metal: no virtualization. */
FK_EXPORT nvmlReturn_t nvmlDeviceGetVirtualizationMode(nvmlDevice_t device, nvmlGpuVirtualizationMode_t *pVirtualMode) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    fk_resolved r;
    if ((rc = fk_resolve(device, &r))) return fk_leave(rc);
    if (!pVirtualMode) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    *pVirtualMode = NVML_GPU_VIRTUALIZATION_MODE_NONE;
    return fk_leave(NVML_SUCCESS);
}

/* ---------------------------------------------------------------- MIG devices */

FK_EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    struct nvmlDevice_st *h = fk_dev(device);
    if (!h || !isMigDevice) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    *isMigDevice = (unsigned)h->is_mig;
    return fk_leave(NVML_SUCCESS);
}

/* Ids of the instances behind a MIG device; a whole GPU answers NOT_SUPPORTED like real NVML. */
static nvmlReturn_t fk_instance_id(nvmlDevice_t device, unsigned int *id, int want_ci) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    fk_resolved r;
    if ((rc = fk_resolve(device, &r))) return fk_leave(rc);
    if (!id) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    if (!r.is_mig) return fk_leave(NVML_ERROR_NOT_SUPPORTED);
    *id = want_ci ? r.ci.id : r.ci.gi;
    return fk_leave(NVML_SUCCESS);
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) { return fk_instance_id(device, id, 0); }
FK_EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id) { return fk_instance_id(device, id, 1); }

/* One MIG device per compute slice at most: the largest GPU-instance slice count of the board. */
static unsigned fk_max_mig(const fk_board *b) {
    unsigned m = 0;
    for (unsigned i = 0; i < b->n_gi; i++)
        if (b->gi[i].slice_count > m) m = b->gi[i].slice_count;
    return m;
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    fk_resolved r;
    if ((rc = fk_resolve(device, &r))) return fk_leave(rc);
    if (!count) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    if (r.is_mig) return fk_leave(NVML_ERROR_NOT_SUPPORTED);
    *count = fk_max_mig(r.gpu->board);
    return fk_leave(NVML_SUCCESS);
}

/* MIG devices of a GPU are indexed in (GPU instance id, compute instance id) order; an index past
 * the existing ones but below the maximum is an empty slot: NOT_FOUND. */
FK_EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *migDevice) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    fk_resolved r;
    if ((rc = fk_resolve(device, &r))) return fk_leave(rc);
    if (r.is_mig || !migDevice || index >= fk_max_mig(r.gpu->board)) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    if ((rc = fk_state_load(0))) return fk_leave(rc);
    unsigned gpu = r.h->gpu, view = r.h->view, seen = 0;
    rc = fk_mig[gpu].cur ? NVML_ERROR_NOT_FOUND : NVML_ERROR_NOT_SUPPORTED;
    for (unsigned gi = 0; gi < FK_MAX_GI && rc == NVML_ERROR_NOT_FOUND; gi++) {
        for (unsigned ci = 0; ci < FK_MAX_CI && rc == NVML_ERROR_NOT_FOUND; ci++) {
            if (!fk_find_ci(gpu, gi, ci) || !fk_view_shows(view, gi, ci)) continue;
            if (seen++ == index) {
                *migDevice = fk_mig_handle(gpu, gi, ci);
                rc = NVML_SUCCESS;
            }
        }
    }
    fk_state_unlock();
    return fk_leave(rc);
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    fk_resolved r;
    if ((rc = fk_resolve(migDevice, &r))) return fk_leave(rc);
    if (!device) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    if (!r.is_mig) return fk_leave(NVML_ERROR_NOT_SUPPORTED);
    *device = fk_gpu_handle(r.h->view);
    return fk_leave(NVML_SUCCESS);
}
