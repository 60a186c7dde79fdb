/* MIG: mode, GPU-instance and compute-instance profiles, placements and instance life cycle.
 * Every fact about profiles and placements comes from the generated catalog data; every mutation
 * is a read-modify-write of <state>/mig under an exclusive flock.
 *
 * Error codes follow the per-call lists in nvml.h:
 *   - profile queries by NVML_*_PROFILE_* enum: enum >= *_PROFILE_COUNT -> INVALID_ARGUMENT
 *     (the documented end of enumeration), enum the board/GI lacks -> NOT_SUPPORTED;
 *   - GPU-instance profile info (by enum or id) of a profile whose catalog facts are incomplete
 *     -> NOT_SUPPORTED, never zeros;
 *   - GPU-instance profile info and possible placements answer with MIG off (nvml.h: placements
 *     are returned "regardless of whether MIG is enabled"; the DRA driver reads them at start-up);
 *   - remaining capacity, create, list and by-id calls on a GPU need MIG on: NOT_SUPPORTED;
 *   - unknown GPU-instance profile id, or a placement not in the profile's list -> INVALID_ARGUMENT;
 *   - unknown compute-instance profile id for that GPU instance -> NOT_SUPPORTED ("profileId isn't
 *     supported"), out-of-range id -> INVALID_ARGUMENT;
 *   - overlapping placement, no free placement or profile at its instance limit -> INSUFFICIENT_RESOURCES;
 *   - destroying a GPU instance that still has compute instances -> IN_USE;
 *   - switching MIG mode while GPU instances exist -> IN_USE. Real NVML refuses a mode change
 *     while the GPU is in use; we treat existing instances as use, so a DRA driver that disables
 *     MIG after its last unprepare succeeds, and one that tries too early gets a clear error.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "internal.h"

/* ---------------------------------------------------------------- helpers */

/* A whole-GPU handle (MIG devices have no MIG of their own) -> its state index, or -1. */
static int fk_whole_gpu(nvmlDevice_t device, unsigned *view) {
    struct nvmlDevice_st *h = fk_dev(device);
    if (!h || h->is_mig) return -1;
    if (view) *view = h->view;
    return (int)h->gpu;
}

static const fk_gi_profile *fk_gi_profile_by_enum(const fk_board *b, unsigned e) {
    for (unsigned i = 0; i < b->n_gi; i++)
        if (b->gi[i].nvml_profile == e) return &b->gi[i];
    return NULL;
}

static const fk_ci_profile *fk_ci_profile_by_enum(const fk_gi_profile *p, unsigned e) {
    for (unsigned i = 0; i < p->n_ci; i++)
        if (p->ci[i].nvml_profile == e) return &p->ci[i];
    return NULL;
}

static int fk_overlap(unsigned a, unsigned as, unsigned b, unsigned bs) {
    return a < b + bs && b < a + as;
}

/* GPU instance ids follow the memory-slice tree real MIG uses: the whole GPU is 0, halves 1-2,
 * quarters 3-6, eighths 7-14 (so 7g.80gb is GI 0 and a 1g at slice 6 is GI 13, as nvidia-smi
 * shows). The tree counts parts of the GPU, not slices: on the RTX PRO 6000's 12 memory slices a
 * quarter is 3 slices, and real `-lgi` shows 1g.24gb at 6:3 as GI 5 and 2g.48gb at 0:6 as GI 1.
 * Placements that are not an aligned power-of-two part take the lowest free id above the tree. */
static unsigned fk_gi_id(const fk_board *b, unsigned gpu, unsigned start, unsigned size) {
    unsigned total = b->memory_slices;
    unsigned parts = size && total % size == 0 ? total / size : 0;
    int pow2 = parts && (parts & (parts - 1)) == 0;
    if (pow2 && start % size == 0 && parts + start / size - 1 < FK_MAX_GI)
        return total / size - 1 + start / size;
    for (unsigned id = 2 * total - 1; id < FK_MAX_GI; id++)
        if (!fk_find_gi(gpu, id)) return id;
    return FK_MAX_GI;
}

static unsigned fk_count_gi(unsigned gpu, unsigned profile_id) {
    unsigned n = 0;
    for (unsigned i = 0; i < fk_mig[gpu].n_gi; i++) n += fk_mig[gpu].gi[i].profile_id == profile_id;
    return n;
}

/* Compute slices used by all GPU instances of a GPU. */
static unsigned fk_used_compute(unsigned gpu) {
    unsigned n = 0;
    const fk_board *b = fk_gpus[gpu].board;
    for (unsigned i = 0; i < fk_mig[gpu].n_gi; i++) {
        const fk_gi_profile *p = fk_gi_profile_by_id(b, fk_mig[gpu].gi[i].profile_id);
        n += p ? p->slice_count : 0;
    }
    return n;
}

static unsigned fk_full_compute(const fk_board *b) {
    unsigned m = 0;
    for (unsigned i = 0; i < b->n_gi; i++) if (b->gi[i].slice_count > m) m = b->gi[i].slice_count;
    return m;
}

/* Whether profile p can be placed at `start` now: SUCCESS, or INSUFFICIENT_RESOURCES. */
static nvmlReturn_t fk_gi_fits(unsigned gpu, const fk_gi_profile *p, unsigned start) {
    const fk_mig_gpu *m = &fk_mig[gpu];
    if (m->n_gi >= FK_MAX_GI || fk_count_gi(gpu, p->id) >= p->max_instances) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    if (fk_used_compute(gpu) + p->slice_count > fk_full_compute(fk_gpus[gpu].board)) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    for (unsigned i = 0; i < m->n_gi; i++)
        if (fk_overlap(start, p->memory_slices, m->gi[i].start, m->gi[i].size)) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    return NVML_SUCCESS;
}

/* ---------------------------------------------------------------- MIG mode */

FK_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    int gpu = fk_whole_gpu(device, NULL);
    if (gpu < 0 || !currentMode || !pendingMode) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    if (fk_gpu_lost((unsigned)gpu)) return fk_leave(NVML_ERROR_GPU_IS_LOST);
    if (fk_gpus[gpu].board->n_gi == 0) return fk_leave(NVML_ERROR_NOT_SUPPORTED);
    if ((rc = fk_state_load(0))) return fk_leave(rc);
    *currentMode = fk_mig[gpu].cur;
    *pendingMode = fk_mig[gpu].pend;
    fk_state_unlock();
    return fk_leave(NVML_SUCCESS);
}

/* The fake needs no GPU reset: the new mode is current at once and activationStatus is SUCCESS. */
FK_EXPORT nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode, nvmlReturn_t *activationStatus) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    int gpu = fk_whole_gpu(device, NULL);
    if (gpu < 0 || !activationStatus || mode > NVML_DEVICE_MIG_ENABLE) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    if (fk_gpu_lost((unsigned)gpu)) return fk_leave(NVML_ERROR_GPU_IS_LOST);
    if (fk_gpus[gpu].board->n_gi == 0) return fk_leave(NVML_ERROR_NOT_SUPPORTED);
    if ((rc = fk_state_load(1))) return fk_leave(rc);
    fk_mig_gpu *m = &fk_mig[gpu];
    if (m->cur != mode && m->n_gi > 0) {
        rc = NVML_ERROR_IN_USE;
    } else if (m->cur != mode || m->pend != mode) {
        m->cur = m->pend = mode;
        rc = fk_state_store();
    }
    fk_state_unlock();
    if (rc == NVML_SUCCESS) *activationStatus = NVML_SUCCESS;
    return fk_leave(rc);
}

/* ---------------------------------------------------------------- GPU-instance profiles */

typedef struct {
    unsigned id, p2p, slices, count, sms, ce, dec, enc, jpg, ofa;
    unsigned long long mem;
    const char *name;
} fk_gip_info;

static nvmlReturn_t fk_gip_lookup(nvmlDevice_t device, unsigned profile, int by_id, fk_gip_info *out) {
    int gpu = fk_whole_gpu(device, NULL);
    if (gpu < 0) return NVML_ERROR_INVALID_ARGUMENT;
    if (fk_gpu_lost((unsigned)gpu)) return NVML_ERROR_GPU_IS_LOST;
    const fk_board *b = fk_gpus[gpu].board;
    if (b->n_gi == 0) return NVML_ERROR_NOT_SUPPORTED;
    const fk_gi_profile *p;
    if (by_id) {
        p = fk_gi_profile_by_id(b, profile);
        if (!p) return NVML_ERROR_INVALID_ARGUMENT;
    } else {
        if (profile >= NVML_GPU_INSTANCE_PROFILE_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
        p = fk_gi_profile_by_enum(b, profile);
        if (!p) return NVML_ERROR_NOT_SUPPORTED;
    }
    /* A profile whose counts nobody has published is not answered with made-up zeros: callers see it
     * as a profile this GPU does not support and skip it, as NVIDIA's driver skips NOT_SUPPORTED. */
    if (!p->complete) return NVML_ERROR_NOT_SUPPORTED;
    *out = (fk_gip_info){p->id, p->p2p_supported, p->slice_count, p->max_instances, p->multiprocessors, p->copy_engines,
                         p->decoders, p->encoders, p->jpeg_engines, p->ofa_engines, p->memory_mib, p->name};
    return NVML_SUCCESS;
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile, nvmlGpuInstanceProfileInfo_t *info) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    fk_gip_info p;
    if (!info) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    if ((rc = fk_gip_lookup(device, profile, 0, &p))) return fk_leave(rc);
    *info = (nvmlGpuInstanceProfileInfo_t){.id = p.id, .isP2pSupported = p.p2p, .sliceCount = p.slices,
        .instanceCount = p.count, .multiprocessorCount = p.sms, .copyEngineCount = p.ce, .decoderCount = p.dec,
        .encoderCount = p.enc, .jpegCount = p.jpg, .ofaCount = p.ofa, .memorySizeMB = p.mem};
    return fk_leave(NVML_SUCCESS);
}

/* Fill a v2 or v3 profile struct, chosen by info->version as real NVML does. */
static nvmlReturn_t fk_gip_versioned(nvmlDevice_t device, unsigned profile, int by_id, nvmlGpuInstanceProfileInfo_v2_t *info) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    fk_gip_info p;
    if (!info) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    if (info->version != nvmlGpuInstanceProfileInfo_v2 && info->version != nvmlGpuInstanceProfileInfo_v3)
        return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    if ((rc = fk_gip_lookup(device, profile, by_id, &p))) return fk_leave(rc);
    if (info->version == nvmlGpuInstanceProfileInfo_v2) {
        *info = (nvmlGpuInstanceProfileInfo_v2_t){.version = info->version, .id = p.id, .isP2pSupported = p.p2p, .sliceCount = p.slices,
            .instanceCount = p.count, .multiprocessorCount = p.sms, .copyEngineCount = p.ce, .decoderCount = p.dec,
            .encoderCount = p.enc, .jpegCount = p.jpg, .ofaCount = p.ofa, .memorySizeMB = p.mem};
        snprintf(info->name, sizeof info->name, "%s", p.name);
    } else {
        nvmlGpuInstanceProfileInfo_v3_t *v3 = (nvmlGpuInstanceProfileInfo_v3_t *)info;
        *v3 = (nvmlGpuInstanceProfileInfo_v3_t){.version = v3->version, .id = p.id, .sliceCount = p.slices,
            .instanceCount = p.count, .multiprocessorCount = p.sms, .copyEngineCount = p.ce, .decoderCount = p.dec,
            .encoderCount = p.enc, .jpegCount = p.jpg, .ofaCount = p.ofa, .memorySizeMB = p.mem, .capabilities = p.p2p ? NVML_GPU_INSTANCE_PROFILE_CAPS_P2P : 0};
        snprintf(v3->name, sizeof v3->name, "%s", p.name);
    }
    return fk_leave(NVML_SUCCESS);
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile, nvmlGpuInstanceProfileInfo_v2_t *info) {
    return fk_gip_versioned(device, profile, 0, info);
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoByIdV(nvmlDevice_t device, unsigned int profileId, nvmlGpuInstanceProfileInfo_v2_t *info) {
    return fk_gip_versioned(device, profileId, 1, info);
}

/* NULL `placements` asks for the count only. */
static nvmlReturn_t fk_gi_placements(nvmlDevice_t device, unsigned int profileId, nvmlGpuInstancePlacement_t *placements, unsigned int *count) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    int gpu = fk_whole_gpu(device, NULL);
    if (gpu < 0 || !count) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    if (fk_gpu_lost((unsigned)gpu)) return fk_leave(NVML_ERROR_GPU_IS_LOST);
    const fk_board *b = fk_gpus[gpu].board;
    if (b->n_gi == 0) return fk_leave(NVML_ERROR_NOT_SUPPORTED);
    const fk_gi_profile *p = fk_gi_profile_by_id(b, profileId);
    if (!p) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    if (placements) {
        if (*count < p->n_placements) {
            *count = p->n_placements;
            return fk_leave(NVML_ERROR_INSUFFICIENT_SIZE);
        }
        for (unsigned i = 0; i < p->n_placements; i++)
            placements[i] = (nvmlGpuInstancePlacement_t){p->placements[i], p->memory_slices};
    }
    *count = p->n_placements;
    return fk_leave(NVML_SUCCESS);
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device, unsigned int profileId, nvmlGpuInstancePlacement_t *placements, unsigned int *count) {
    return fk_gi_placements(device, profileId, placements, count);
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements(nvmlDevice_t device, unsigned int profileId, nvmlGpuInstancePlacement_t *placements, unsigned int *count) {
    return fk_gi_placements(device, profileId, placements, count);
}

/* Load state for a MIG call on a whole GPU: checks handle, profile id and MIG mode. */
static nvmlReturn_t fk_mig_call(nvmlDevice_t device, unsigned profileId, int exclusive, int *gpu, const fk_gi_profile **p) {
    *gpu = fk_whole_gpu(device, NULL);
    if (*gpu < 0) return NVML_ERROR_INVALID_ARGUMENT;
    if (fk_gpu_lost((unsigned)*gpu)) return NVML_ERROR_GPU_IS_LOST;
    const fk_board *b = fk_gpus[*gpu].board;
    if (b->n_gi == 0) return NVML_ERROR_NOT_SUPPORTED;
    if (p) {
        *p = fk_gi_profile_by_id(b, profileId);
        if (!*p) return NVML_ERROR_INVALID_ARGUMENT;
    }
    nvmlReturn_t rc = fk_state_load(exclusive);
    if (rc) return rc;
    if (!fk_mig[*gpu].cur) {
        fk_state_unlock();
        return NVML_ERROR_NOT_SUPPORTED;
    }
    return NVML_SUCCESS;
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device, unsigned int profileId, unsigned int *count) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    int gpu;
    const fk_gi_profile *p;
    if (!count) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    if ((rc = fk_mig_call(device, profileId, 0, &gpu, &p))) return fk_leave(rc);
    unsigned n = 0;
    /* Placements are alternatives, not independent: count how many can be created greedily, one after
     * another, in creation order (this is what "remaining" means to a caller that then creates). */
    fk_mig_gpu saved = fk_mig[gpu];
    for (unsigned k = p->n_placements; k-- > 0;) {
        if (fk_gi_fits(gpu, p, p->placements[k]) == NVML_SUCCESS) {
            fk_mig_gpu *m = &fk_mig[gpu];
            m->gi[m->n_gi++] = (fk_gi){FK_MAX_GI, p->id, p->placements[k], p->memory_slices};
            n++;
        }
    }
    fk_mig[gpu] = saved;
    fk_state_unlock();
    *count = n;
    return fk_leave(NVML_SUCCESS);
}

/* Create under the exclusive lock; `start` < 0 picks the first free placement, highest start first
 * (NVIDIA's MIG user guide examples: a first 1g lands on slice 6 = GI 13, two 3g get GI 2 then 1). */
static nvmlReturn_t fk_create_gi(nvmlDevice_t device, unsigned profileId, const nvmlGpuInstancePlacement_t *placement,
                                 nvmlGpuInstance_t *out) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    int gpu;
    const fk_gi_profile *p;
    if (!out) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    if ((rc = fk_mig_call(device, profileId, 1, &gpu, &p))) return fk_leave(rc);
    int start = -1;
    if (placement) {
        for (unsigned k = 0; k < p->n_placements; k++)
            if (p->placements[k] == placement->start && placement->size == p->memory_slices) start = (int)placement->start;
        rc = start < 0 ? NVML_ERROR_INVALID_ARGUMENT : fk_gi_fits(gpu, p, (unsigned)start);
    } else {
        rc = NVML_ERROR_INSUFFICIENT_RESOURCES;
        for (unsigned k = p->n_placements; k-- > 0 && rc;) {
            if (fk_gi_fits(gpu, p, p->placements[k]) == NVML_SUCCESS) {
                start = (int)p->placements[k];
                rc = NVML_SUCCESS;
            }
        }
    }
    if (rc == NVML_SUCCESS) {
        unsigned id = fk_gi_id(fk_gpus[gpu].board, (unsigned)gpu, (unsigned)start, p->memory_slices);
        if (id >= FK_MAX_GI || fk_find_gi((unsigned)gpu, id)) {
            rc = NVML_ERROR_INSUFFICIENT_RESOURCES;
        } else {
            fk_mig_gpu *m = &fk_mig[gpu];
            m->gi[m->n_gi++] = (fk_gi){id, p->id, (unsigned)start, p->memory_slices};
            rc = fk_state_store();
            if (rc == NVML_SUCCESS) *out = fk_gi_handle((unsigned)gpu, id);
        }
    }
    fk_state_unlock();
    return fk_leave(rc);
}

FK_EXPORT nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device, unsigned int profileId, nvmlGpuInstance_t *gpuInstance) {
    return fk_create_gi(device, profileId, NULL, gpuInstance);
}

FK_EXPORT nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned int profileId,
                                                                const nvmlGpuInstancePlacement_t *placement, nvmlGpuInstance_t *gpuInstance) {
    if (!placement) {
        nvmlReturn_t rc = fk_enter();
        return rc ? rc : fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    }
    return fk_create_gi(device, profileId, placement, gpuInstance);
}

/* Resolve a GPU-instance handle against freshly loaded state; the instance must still exist. */
static nvmlReturn_t fk_gi_call(nvmlGpuInstance_t gpuInstance, int exclusive, struct nvmlGpuInstance_st **h, fk_gi **gi) {
    *h = fk_gi_of(gpuInstance);
    if (!*h) return NVML_ERROR_INVALID_ARGUMENT;
    if (fk_gpu_lost((*h)->gpu)) return NVML_ERROR_GPU_IS_LOST;
    nvmlReturn_t rc = fk_state_load(exclusive);
    if (rc) return rc;
    *gi = fk_find_gi((*h)->gpu, (*h)->gi);
    if (!*gi) {
        fk_state_unlock();
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    return NVML_SUCCESS;
}

FK_EXPORT nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    struct nvmlGpuInstance_st *h;
    fk_gi *gi;
    if ((rc = fk_gi_call(gpuInstance, 1, &h, &gi))) return fk_leave(rc);
    fk_mig_gpu *m = &fk_mig[h->gpu];
    for (unsigned i = 0; i < m->n_ci && rc == NVML_SUCCESS; i++)
        if (m->ci[i].gi == h->gi) rc = NVML_ERROR_IN_USE;
    if (rc == NVML_SUCCESS) {
        *gi = m->gi[--m->n_gi];
        rc = fk_state_store();
    }
    fk_state_unlock();
    return fk_leave(rc);
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId, nvmlGpuInstance_t *gpuInstances, unsigned int *count) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    int gpu;
    unsigned view = 0;
    const fk_gi_profile *p;
    if (!gpuInstances || !count) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    fk_whole_gpu(device, &view);
    if ((rc = fk_mig_call(device, profileId, 0, &gpu, &p))) return fk_leave(rc);
    unsigned n = 0;
    for (unsigned id = 0; id < FK_MAX_GI; id++) {
        const fk_gi *gi = fk_find_gi((unsigned)gpu, id);
        if (gi && gi->profile_id == profileId && fk_view_shows(view, id, UINT_MAX) && n < p->max_instances)
            gpuInstances[n++] = fk_gi_handle((unsigned)gpu, id);
    }
    fk_state_unlock();
    *count = n;
    return fk_leave(NVML_SUCCESS);
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id, nvmlGpuInstance_t *gpuInstance) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    int gpu;
    unsigned view = 0;
    if (!gpuInstance || id >= FK_MAX_GI) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    fk_whole_gpu(device, &view);
    if ((rc = fk_mig_call(device, 0, 0, &gpu, NULL))) return fk_leave(rc);
    rc = fk_find_gi((unsigned)gpu, id) && fk_view_shows(view, id, UINT_MAX) ? NVML_SUCCESS : NVML_ERROR_NOT_FOUND;
    if (rc == NVML_SUCCESS) *gpuInstance = fk_gi_handle((unsigned)gpu, id);
    fk_state_unlock();
    return fk_leave(rc);
}

FK_EXPORT nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t *info) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    struct nvmlGpuInstance_st *h;
    fk_gi *gi;
    if (!info) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    if ((rc = fk_gi_call(gpuInstance, 0, &h, &gi))) return fk_leave(rc);
    int view = fk_view_of_gpu(h->gpu);
    info->device = fk_gpu_handle(view < 0 ? 0 : (unsigned)view);
    info->id = gi->id;
    info->profileId = gi->profile_id;
    info->placement = (nvmlGpuInstancePlacement_t){gi->start, gi->size};
    fk_state_unlock();
    return fk_leave(NVML_SUCCESS);
}

/* ---------------------------------------------------------------- compute instances */

/* Compute placements inside a GPU instance of `g` compute slices: aligned starts k*c with k*c+c <= g
 * (a 7-slice instance offers 1c at 0..6, 2c at 0,2,4, 3c at 0,4, 4c at 0). */
static unsigned fk_ci_placements(unsigned g, unsigned c, unsigned *starts, unsigned max) {
    unsigned n = 0;
    for (unsigned s = 0; c && s + c <= g && n < max; s += c) starts[n++] = s;
    return n;
}

typedef struct {
    struct nvmlGpuInstance_st *h;
    fk_gi *gi;
    const fk_gi_profile *gip;
    const fk_ci_profile *cip;
} fk_ci_ctx;

/* Resolve GPU instance + compute-instance profile id and load state. */
static nvmlReturn_t fk_ci_call(nvmlGpuInstance_t gpuInstance, unsigned profileId, int exclusive, fk_ci_ctx *x) {
    nvmlReturn_t rc = fk_gi_call(gpuInstance, exclusive, &x->h, &x->gi);
    if (rc) return rc;
    x->gip = fk_gi_profile_by_id(fk_gpus[x->h->gpu].board, x->gi->profile_id);
    x->cip = x->gip ? fk_ci_profile_by_id(x->gip, profileId) : NULL;
    if (!x->cip) {
        fk_state_unlock();
        return profileId >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_NOT_SUPPORTED;
    }
    return NVML_SUCCESS;
}

typedef struct {
    unsigned id, slices, count, sms, ce, dec, enc, jpg, ofa;
    const char *name;
} fk_cip_info;

static nvmlReturn_t fk_cip_lookup(nvmlGpuInstance_t gpuInstance, unsigned profile, unsigned engProfile, fk_cip_info *out) {
    struct nvmlGpuInstance_st *h;
    fk_gi *gi;
    if (engProfile >= NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT || profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t rc = fk_gi_call(gpuInstance, 0, &h, &gi);
    if (rc) return rc;
    const fk_gi_profile *gp = fk_gi_profile_by_id(fk_gpus[h->gpu].board, gi->profile_id);
    fk_state_unlock();
    const fk_ci_profile *cp = gp ? fk_ci_profile_by_enum(gp, profile) : NULL;
    if (!cp) return NVML_ERROR_NOT_SUPPORTED;
    /* Engines other than SMs are shared by all compute instances of a GPU instance. */
    *out = (fk_cip_info){cp->id, cp->slice_count, cp->slice_count ? gp->slice_count / cp->slice_count : 0,
                         cp->multiprocessors, gp->copy_engines, gp->decoders, gp->encoders, gp->jpeg_engines,
                         gp->ofa_engines, cp->name};
    return NVML_SUCCESS;
}

FK_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                                                    unsigned int engProfile, nvmlComputeInstanceProfileInfo_t *info) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    fk_cip_info p;
    if (!info) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    if ((rc = fk_cip_lookup(gpuInstance, profile, engProfile, &p))) return fk_leave(rc);
    *info = (nvmlComputeInstanceProfileInfo_t){p.id, p.slices, p.count, p.sms, p.ce, p.dec, p.enc, p.jpg, p.ofa};
    return fk_leave(NVML_SUCCESS);
}

FK_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                                                     unsigned int engProfile, nvmlComputeInstanceProfileInfo_v2_t *info) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    fk_cip_info p;
    if (!info) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    if (info->version != nvmlComputeInstanceProfileInfo_v2 && info->version != nvmlComputeInstanceProfileInfo_v3)
        return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    if ((rc = fk_cip_lookup(gpuInstance, profile, engProfile, &p))) return fk_leave(rc);
    unsigned version = info->version;
    /* v2 and v3 share their layout up to `name`; v3 adds `capabilities` after it. */
    *info = (nvmlComputeInstanceProfileInfo_v2_t){version, p.id, p.slices, p.count, p.sms, p.ce, p.dec, p.enc, p.jpg, p.ofa, {0}};
    snprintf(info->name, sizeof info->name, "%s", p.name);
    if (version == nvmlComputeInstanceProfileInfo_v3) ((nvmlComputeInstanceProfileInfo_v3_t *)info)->capabilities = 0;
    return fk_leave(NVML_SUCCESS);
}

static nvmlReturn_t fk_ci_fits(const fk_ci_ctx *x, unsigned start) {
    const fk_mig_gpu *m = &fk_mig[x->h->gpu];
    unsigned same = 0;
    for (unsigned i = 0; i < m->n_ci; i++) {
        const fk_ci *c = &m->ci[i];
        if (c->gi != x->h->gi) continue;
        same += c->profile_id == x->cip->id;
        if (fk_overlap(start, x->cip->slice_count, c->start, c->size)) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    }
    if (m->n_ci >= FK_MAX_CI_PER_GPU || same >= x->gip->slice_count / x->cip->slice_count) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    return NVML_SUCCESS;
}

FK_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(nvmlGpuInstance_t gpuInstance, unsigned int profileId, unsigned int *count) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    fk_ci_ctx x;
    if (!count) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    if ((rc = fk_ci_call(gpuInstance, profileId, 0, &x))) return fk_leave(rc);
    unsigned starts[FK_MAX_CI * 2], n = fk_ci_placements(x.gip->slice_count, x.cip->slice_count, starts, FK_MAX_CI * 2), free_n = 0;
    fk_mig_gpu saved = fk_mig[x.h->gpu];
    for (unsigned k = 0; k < n; k++) {
        if (fk_ci_fits(&x, starts[k]) == NVML_SUCCESS) {
            fk_mig_gpu *m = &fk_mig[x.h->gpu];
            m->ci[m->n_ci++] = (fk_ci){.gi = x.h->gi, .id = FK_MAX_CI, .profile_id = x.cip->id, .start = starts[k], .size = x.cip->slice_count};
            free_n++;
        }
    }
    fk_mig[x.h->gpu] = saved;
    fk_state_unlock();
    *count = free_n;
    return fk_leave(NVML_SUCCESS);
}

FK_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstancePossiblePlacements(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                                           nvmlComputeInstancePlacement_t *placements, unsigned int *count) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    fk_ci_ctx x;
    if (!count) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    if ((rc = fk_ci_call(gpuInstance, profileId, 0, &x))) return fk_leave(rc);
    fk_state_unlock();
    unsigned starts[FK_MAX_CI * 2], n = fk_ci_placements(x.gip->slice_count, x.cip->slice_count, starts, FK_MAX_CI * 2);
    if (placements) {
        if (*count < n) {
            *count = n;
            return fk_leave(NVML_ERROR_INSUFFICIENT_SIZE);
        }
        for (unsigned k = 0; k < n; k++) placements[k] = (nvmlComputeInstancePlacement_t){starts[k], x.cip->slice_count};
    }
    *count = n;
    return fk_leave(NVML_SUCCESS);
}

/* Create under the exclusive lock; without a placement the lowest free compute slice is used. */
static nvmlReturn_t fk_create_ci(nvmlGpuInstance_t gpuInstance, unsigned profileId, const nvmlComputeInstancePlacement_t *placement,
                                 nvmlComputeInstance_t *out) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    fk_ci_ctx x;
    if (!out) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    if ((rc = fk_ci_call(gpuInstance, profileId, 1, &x))) return fk_leave(rc);
    unsigned starts[FK_MAX_CI * 2], n = fk_ci_placements(x.gip->slice_count, x.cip->slice_count, starts, FK_MAX_CI * 2);
    int start = -1;
    if (placement) {
        for (unsigned k = 0; k < n; k++)
            if (starts[k] == placement->start && placement->size == x.cip->slice_count) start = (int)starts[k];
        rc = start < 0 ? NVML_ERROR_INVALID_ARGUMENT : fk_ci_fits(&x, (unsigned)start);
    } else {
        rc = NVML_ERROR_INSUFFICIENT_RESOURCES;
        for (unsigned k = 0; k < n && rc; k++)
            if (fk_ci_fits(&x, starts[k]) == NVML_SUCCESS) { start = (int)starts[k]; rc = NVML_SUCCESS; }
    }
    unsigned id = 0;
    while (rc == NVML_SUCCESS && id < FK_MAX_CI && fk_find_ci(x.h->gpu, x.h->gi, id)) id++;
    if (rc == NVML_SUCCESS && id >= FK_MAX_CI) rc = NVML_ERROR_INSUFFICIENT_RESOURCES;
    if (rc == NVML_SUCCESS) {
        fk_mig_gpu *m = &fk_mig[x.h->gpu];
        fk_ci *c = &m->ci[m->n_ci++];
        *c = (fk_ci){.gi = x.h->gi, .id = id, .profile_id = x.cip->id, .start = (unsigned)start, .size = x.cip->slice_count};
        fk_new_mig_uuid(c->uuid);
        rc = fk_state_store();
        if (rc == NVML_SUCCESS) *out = fk_ci_handle(x.h->gpu, x.h->gi, id);
    }
    fk_state_unlock();
    return fk_leave(rc);
}

FK_EXPORT nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gpuInstance, unsigned int profileId, nvmlComputeInstance_t *computeInstance) {
    return fk_create_ci(gpuInstance, profileId, NULL, computeInstance);
}

FK_EXPORT nvmlReturn_t nvmlGpuInstanceCreateComputeInstanceWithPlacement(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                                         const nvmlComputeInstancePlacement_t *placement,
                                                                         nvmlComputeInstance_t *computeInstance) {
    if (!placement) {
        nvmlReturn_t rc = fk_enter();
        return rc ? rc : fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    }
    return fk_create_ci(gpuInstance, profileId, placement, computeInstance);
}

/* Resolve a compute-instance handle against freshly loaded state. */
static nvmlReturn_t fk_ci_handle_call(nvmlComputeInstance_t computeInstance, int exclusive, struct nvmlComputeInstance_st **h, fk_ci **ci) {
    *h = fk_ci_of(computeInstance);
    if (!*h) return NVML_ERROR_INVALID_ARGUMENT;
    if (fk_gpu_lost((*h)->gpu)) return NVML_ERROR_GPU_IS_LOST;
    nvmlReturn_t rc = fk_state_load(exclusive);
    if (rc) return rc;
    *ci = fk_find_ci((*h)->gpu, (*h)->gi, (*h)->ci);
    if (!*ci) {
        fk_state_unlock();
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    return NVML_SUCCESS;
}

FK_EXPORT nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    struct nvmlComputeInstance_st *h;
    fk_ci *ci;
    if ((rc = fk_ci_handle_call(computeInstance, 1, &h, &ci))) return fk_leave(rc);
    fk_mig_gpu *m = &fk_mig[h->gpu];
    *ci = m->ci[--m->n_ci];
    rc = fk_state_store();
    fk_state_unlock();
    return fk_leave(rc);
}

FK_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                          nvmlComputeInstance_t *computeInstances, unsigned int *count) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    fk_ci_ctx x;
    if (!computeInstances || !count) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    if ((rc = fk_ci_call(gpuInstance, profileId, 0, &x))) return fk_leave(rc);
    int view = fk_view_of_gpu(x.h->gpu);
    unsigned n = 0, max = x.gip->slice_count / x.cip->slice_count;
    for (unsigned id = 0; id < FK_MAX_CI; id++) {
        const fk_ci *c = fk_find_ci(x.h->gpu, x.h->gi, id);
        if (c && c->profile_id == profileId && n < max && (view < 0 || fk_view_shows((unsigned)view, x.h->gi, id)))
            computeInstances[n++] = fk_ci_handle(x.h->gpu, x.h->gi, id);
    }
    fk_state_unlock();
    *count = n;
    return fk_leave(NVML_SUCCESS);
}

FK_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpuInstance, unsigned int id, nvmlComputeInstance_t *computeInstance) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    struct nvmlGpuInstance_st *h;
    fk_gi *gi;
    if (!computeInstance || id >= FK_MAX_CI) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    if ((rc = fk_gi_call(gpuInstance, 0, &h, &gi))) return fk_leave(rc);
    int view = fk_view_of_gpu(h->gpu);
    rc = fk_find_ci(h->gpu, h->gi, id) && (view < 0 || fk_view_shows((unsigned)view, h->gi, id)) ? NVML_SUCCESS : NVML_ERROR_NOT_FOUND;
    if (rc == NVML_SUCCESS) *computeInstance = fk_ci_handle(h->gpu, h->gi, id);
    fk_state_unlock();
    return fk_leave(rc);
}

/* `device` is the MIG device handle of this compute instance (what the DRA driver reads its MIG
 * UUID from); `gpuInstance` is the parent GPU instance. */
static nvmlReturn_t fk_ci_info(nvmlComputeInstance_t computeInstance, nvmlComputeInstanceInfo_t *info) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    struct nvmlComputeInstance_st *h;
    fk_ci *ci;
    if (!info) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    if ((rc = fk_ci_handle_call(computeInstance, 0, &h, &ci))) return fk_leave(rc);
    info->device = fk_mig_handle(h->gpu, h->gi, h->ci);
    info->gpuInstance = fk_gi_handle(h->gpu, h->gi);
    info->id = ci->id;
    info->profileId = ci->profile_id;
    info->placement = (nvmlComputeInstancePlacement_t){ci->start, ci->size};
    fk_state_unlock();
    return fk_leave(NVML_SUCCESS);
}

FK_EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance, nvmlComputeInstanceInfo_t *info) {
    return fk_ci_info(computeInstance, info);
}

FK_EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t computeInstance, nvmlComputeInstanceInfo_t *info) {
    return fk_ci_info(computeInstance, info);
}
