/* Per-GPU settings a client may change besides MIG: the compute mode (nvmlDeviceGet/SetComputeMode), the
 * persistence mode (nvmlDeviceGet/SetPersistenceMode) and the time slice that `nvidia-smi compute-policy
 * --set-timeslice` sets. Real NVML has no public call for the time slice, so the fake exports
 * fakeNvmlDeviceGet/SetTimeslice, which our nvidia-smi finds by dlsym and real NVML lacks. Kept in <state>/settings under the state lock so that every process of a
 * node sees one value; a missing file or line means the default (compute mode DEFAULT, time slice 0 =
 * the driver's default, persistence mode disabled).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

#define FK_SETTINGS_MAGIC "fake-nvml-settings 1"

enum { FK_COMPUTE_MODE, FK_TIMESLICE, FK_PERSISTENCE, FK_N_SETTINGS };
static const char *const fk_setting_names[FK_N_SETTINGS] = {"compute-mode", "timeslice", "persistence"};
static const unsigned fk_setting_limits[FK_N_SETTINGS] = {NVML_COMPUTEMODE_COUNT, 4, 2}; /* values below these */

typedef struct { unsigned value[FK_N_SETTINGS]; } fk_setting;

static fk_setting fk_settings[FK_MAX_GPUS];

/* Read <state>/settings into fk_settings; the caller holds the state lock. */
static nvmlReturn_t fk_settings_read(void) {
    char path[PATH_MAX], line[256], extra[8];
    memset(fk_settings, 0, sizeof fk_settings);
    fk_state_path(path, "settings");
    FILE *f = fopen(path, "r");
    if (!f) return NVML_SUCCESS;
    nvmlReturn_t rc = NVML_SUCCESS;
    if (!fgets(line, sizeof line, f) || strncmp(line, FK_SETTINGS_MAGIC, strlen(FK_SETTINGS_MAGIC)) != 0) rc = NVML_ERROR_UNKNOWN;
    while (rc == NVML_SUCCESS && fgets(line, sizeof line, f)) {
        unsigned gpu, value;
        char name[32];
        if (line[0] == '\n' || line[0] == '#') continue;
        rc = NVML_ERROR_UNKNOWN;
        if (sscanf(line, "%31s %u %u %7s", name, &gpu, &value, extra) != 3 || gpu >= fk_n_gpus) break;
        for (unsigned k = 0; k < FK_N_SETTINGS; k++)
            if (strcmp(name, fk_setting_names[k]) == 0 && value < fk_setting_limits[k]) {
                fk_settings[gpu].value[k] = value;
                rc = NVML_SUCCESS;
            }
    }
    fclose(f);
    return rc;
}

/* Write fk_settings by rename; the caller holds the state lock exclusively. */
static nvmlReturn_t fk_settings_write(void) {
    char path[PATH_MAX], tmp[PATH_MAX + 32];
    fk_state_path(path, "settings");
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return NVML_ERROR_UNKNOWN;
    fprintf(f, "%s\n", FK_SETTINGS_MAGIC);
    for (unsigned g = 0; g < fk_n_gpus; g++)
        for (unsigned k = 0; k < FK_N_SETTINGS; k++) fprintf(f, "%s %u %u\n", fk_setting_names[k], g, fk_settings[g].value[k]);
    int bad = ferror(f);
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        unlink(tmp);
        return NVML_ERROR_UNKNOWN;
    }
    return NVML_SUCCESS;
}

/* The GPU a handle names: a MIG handle reads its parent's settings, but may not change them. */
static int fk_settings_gpu(nvmlDevice_t device, int for_write) {
    struct nvmlDevice_st *h = fk_dev(device);
    if (!h || (for_write && h->is_mig)) return -1;
    return (int)h->gpu;
}

static nvmlReturn_t fk_get(nvmlDevice_t device, unsigned *out, unsigned which) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    int gpu = fk_settings_gpu(device, 0);
    if (gpu < 0 || !out) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    if (fk_gpu_lost((unsigned)gpu)) return fk_leave(NVML_ERROR_GPU_IS_LOST);
    if ((rc = fk_state_load(0))) return fk_leave(rc);
    rc = fk_settings_read();
    if (rc == NVML_SUCCESS) *out = fk_settings[gpu].value[which];
    fk_state_unlock();
    return fk_leave(rc);
}

static nvmlReturn_t fk_set(nvmlDevice_t device, unsigned value, unsigned which) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    struct nvmlDevice_st *h = fk_dev(device);
    if (h && h->is_mig) return fk_leave(NVML_ERROR_NOT_SUPPORTED); /* per GPU, as on a real board */
    int gpu = fk_settings_gpu(device, 1);
    if (gpu < 0 || value >= fk_setting_limits[which]) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    if (fk_gpu_lost((unsigned)gpu)) return fk_leave(NVML_ERROR_GPU_IS_LOST);
    if ((rc = fk_state_load(1))) return fk_leave(rc);
    rc = fk_settings_read();
    if (rc == NVML_SUCCESS) {
        fk_settings[gpu].value[which] = value;
        rc = fk_settings_write();
    }
    fk_state_unlock();
    return fk_leave(rc);
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *mode) {
    unsigned value = 0;
    nvmlReturn_t rc = mode ? fk_get(device, &value, FK_COMPUTE_MODE) : NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS) *mode = (nvmlComputeMode_t)value;
    return rc;
}

FK_EXPORT nvmlReturn_t nvmlDeviceSetComputeMode(nvmlDevice_t device, nvmlComputeMode_t mode) {
    return fk_set(device, (unsigned)mode, FK_COMPUTE_MODE);
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode) {
    unsigned value = 0;
    nvmlReturn_t rc = mode ? fk_get(device, &value, FK_PERSISTENCE) : NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS) *mode = value ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return rc;
}

FK_EXPORT nvmlReturn_t nvmlDeviceSetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t mode) {
    return fk_set(device, (unsigned)mode, FK_PERSISTENCE);
}

/* 0 default, 1 short, 2 medium, 3 long: the values of `nvidia-smi compute-policy --set-timeslice`. */
FK_EXPORT nvmlReturn_t fakeNvmlDeviceGetTimeslice(nvmlDevice_t device, unsigned int *value) {
    return fk_get(device, value, FK_TIMESLICE);
}

FK_EXPORT nvmlReturn_t fakeNvmlDeviceSetTimeslice(nvmlDevice_t device, unsigned int value) {
    return fk_set(device, value, FK_TIMESLICE);
}
