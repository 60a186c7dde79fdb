/* Internal declarations shared by the fake NVML translation units. */
#ifndef FAKE_NVML_INTERNAL_H
#define FAKE_NVML_INTERNAL_H

#include <limits.h>
#include <pthread.h>

/* Every nvml.h prototype keeps default visibility; everything else is hidden (-fvisibility=hidden). */
#pragma GCC visibility push(default)
#include "nvml.h"
#pragma GCC visibility pop

#include "catalog_types.h"

#define FK_EXPORT __attribute__((visibility("default")))

#define FK_MAX_GPUS 64
#define FK_MAX_GI 32          /* GPU instance ids 0..31 per GPU */
#define FK_MAX_CI 8           /* compute instance ids 0..7 per GPU instance */
#define FK_MAX_CI_PER_GPU 64
#define FK_UUID_LEN 64

/* One GPU of the node, as listed in <state>/gpus. */
typedef struct {
    const fk_board *board;
    unsigned minor;
    char uuid[FK_UUID_LEN];
    char serial[32];
    char bus_id[32];
    unsigned domain, bus, device;
} fk_gpu;

typedef struct { unsigned id, profile_id, start, size; } fk_gi;
typedef struct { unsigned gi, id, profile_id, start, size; char uuid[FK_UUID_LEN]; } fk_ci;

/* MIG state of one GPU, as listed in <state>/mig. */
typedef struct {
    unsigned cur, pend;
    unsigned n_gi, n_ci;
    fk_gi gi[FK_MAX_GI];
    fk_ci ci[FK_MAX_CI_PER_GPU];
} fk_mig_gpu;

/* An entry of the visible-device view: a whole GPU, or a GPU narrowed to some of its MIG devices
 * (a container given two MIG devices of one GPU sees that GPU once, with both). */
typedef struct { unsigned gi, ci; } fk_mig_ref;
typedef struct { unsigned gpu; int mig_only; unsigned n_migs; fk_mig_ref migs[FK_MAX_CI_PER_GPU]; } fk_view;

/* Handle objects live in static tables so that a handle stays valid (and comparable) for the
 * whole process and can be checked by address without dereferencing caller garbage. */
struct nvmlDevice_st { int is_mig; unsigned view; unsigned gpu, gi, ci; };
struct nvmlGpuInstance_st { unsigned gpu, gi; };
struct nvmlComputeInstance_st { unsigned gpu, gi, ci; };

extern fk_gpu fk_gpus[FK_MAX_GPUS];
extern unsigned fk_n_gpus;
extern fk_view fk_views[FK_MAX_GPUS];
extern unsigned fk_n_views;
extern fk_mig_gpu fk_mig[FK_MAX_GPUS];

/* Board table generated from the catalog (catalog_data.c). */
extern const fk_board fk_boards[];
extern const unsigned fk_n_boards;

/* Session guard: takes the process mutex; returns UNINITIALIZED (mutex released) if not initialized. */
nvmlReturn_t fk_enter(void);
nvmlReturn_t fk_leave(nvmlReturn_t rc);

/* Shared state file access: read under a shared (or exclusive, for a later write) flock. */
nvmlReturn_t fk_state_load(int exclusive);
nvmlReturn_t fk_state_store(void);
void fk_state_unlock(void);
void fk_new_mig_uuid(char out[FK_UUID_LEN]);
void fk_state_path(char *out, const char *name); /* <state dir>/<name> */

/* nvidia-caps capability files of the MIG state under <state>/proc/driver (caps.c). */
void fk_caps_sync(const char *state_dir);
unsigned fk_caps_minor(unsigned gpu_minor, unsigned gi, int ci);

/* Handle helpers. */
nvmlDevice_t fk_gpu_handle(unsigned view);
nvmlDevice_t fk_mig_handle(unsigned gpu, unsigned gi, unsigned ci);
nvmlGpuInstance_t fk_gi_handle(unsigned gpu, unsigned gi);
nvmlComputeInstance_t fk_ci_handle(unsigned gpu, unsigned gi, unsigned ci);
struct nvmlDevice_st *fk_dev(nvmlDevice_t d);
struct nvmlGpuInstance_st *fk_gi_of(nvmlGpuInstance_t g);
struct nvmlComputeInstance_st *fk_ci_of(nvmlComputeInstance_t c);
int fk_view_of_gpu(unsigned gpu);

/* Lookups in the loaded MIG state. */
fk_gi *fk_find_gi(unsigned gpu, unsigned gi);
fk_ci *fk_find_ci(unsigned gpu, unsigned gi, unsigned ci);
const fk_gi_profile *fk_gi_profile_by_id(const fk_board *b, unsigned id);
const fk_ci_profile *fk_ci_profile_by_id(const fk_gi_profile *p, unsigned id);
int fk_view_shows(unsigned view, unsigned gi, unsigned ci);

/* GPU health folded from <state>/events (health.c): lost GPUs answer NVML_ERROR_GPU_IS_LOST. */
void fk_health_open(void);
int fk_gpu_lost(unsigned gpu);
int fk_any_gpu_lost(void);
unsigned fk_gpu_recovery_action(unsigned gpu); /* nvmlDeviceGpuRecoveryAction_t pending on the GPU */

void fk_copy_str(char *dst, const char *src, unsigned length, nvmlReturn_t *rc);

#endif
