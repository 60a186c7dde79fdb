/* Field values (nvmlDeviceGetFieldValues): the one field the fake models is
 * NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, the GPU's pending nvmlDeviceGpuRecoveryAction_t (health.c folds it
 * from the Xid records of <state>/events; a `heal` record is the reset that clears it). A monitor polls it
 * to learn that a GPU which had a fatal Xid was reset.
 *
 * nvml.h: the call answers SUCCESS once it looked at the fields and each entry carries its own status in
 * nvmlReturn, so a field the fake does not model is NOT_SUPPORTED in its entry, not in the call's return.
 * A MIG device handle answers NOT_SUPPORTED in the entry too: the recovery action belongs to the whole GPU
 * (a reset resets all its instances), and a caller asks the parent GPU, as NVIDIA's health monitor
 * registers events on the parent. A lost GPU (and its MIG devices) answers GPU_IS_LOST for the call, as
 * every call on it does in the fake.
 */
#include <sys/time.h>

#include "internal.h"

/* Microseconds since 1970, nvmlFieldValue_t.timestamp's unit. */
static long long fk_now_us(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (long long)tv.tv_sec * 1000000LL + tv.tv_usec;
}

static void fk_fill(const struct nvmlDevice_st *h, nvmlFieldValue_t *v, long long now) {
    v->timestamp = now;
    v->latencyUsec = 0;
    if (v->fieldId != NVML_FI_DEV_GET_GPU_RECOVERY_ACTION || h->is_mig) {
        v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        return;
    }
    v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
    v->value.uiVal = fk_gpu_recovery_action(h->gpu);
    v->nvmlReturn = NVML_SUCCESS;
}

FK_EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    struct nvmlDevice_st *h = fk_dev(device);
    if (!h || !values || valuesCount < 0) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    if (fk_gpu_lost(h->gpu)) return fk_leave(NVML_ERROR_GPU_IS_LOST);
    long long now = fk_now_us();
    for (int i = 0; i < valuesCount; i++) fk_fill(h, &values[i], now);
    return fk_leave(NVML_SUCCESS);
}
