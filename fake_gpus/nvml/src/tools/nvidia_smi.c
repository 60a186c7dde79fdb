/* nvidia-smi for the fake boards, written against the NVML API only (linked to libnvidia-ml.so.1), so it
 * shows what NVML shows, on our fake or on a real driver, the way NVIDIA's nvidia-smi does.
 *
 *   nvidia-smi                      the device table
 *   nvidia-smi --version | -L
 *   nvidia-smi --query-gpu=F,... --format=csv[,noheader][,nounits] [-i ID]
 *   nvidia-smi mig -lgip | -lgipp | -lgi | -lci [-i ID]
 *   nvidia-smi -i ID -c MODE        compute mode (NVIDIA's DRA driver: DEFAULT, EXCLUSIVE_PROCESS)
 *   nvidia-smi -i ID -pm 0|1        persistence mode (NVIDIA's DRA driver, for passthrough)
 *   nvidia-smi compute-policy -i ID --set-timeslice N   (NVIDIA's DRA driver, time-slicing; fake NVML only)
 * ID: index, GPU UUID or PCI bus id. Bad usage: one line on stderr, exit 2 (nvidia-smi's code for it).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "nvml.h"

#define MAX_GPUS 64
#define EXIT_USAGE 2
#define EXIT_NVML 9 /* nvidia-smi's code when NVML does not initialize */
#define EXIT_NO_MIG 6 /* nvidia-smi mig on a node whose GPUs have no MIG ("No MIG-supported devices found.") */

static void usage(const char *what) {
    fprintf(stderr, "nvidia-smi: %s; valid: --version, -L, --query-gpu=FIELDS --format=csv[,noheader][,nounits], "
                    "mig -lgip|-lgipp|-lgi|-lci, -i ID -c MODE, -i ID -pm 0|1, compute-policy -i ID --set-timeslice N\n", what);
    exit(EXIT_USAGE);
}

static int fail(const char *what, nvmlReturn_t rc) {
    fprintf(stderr, "%s: %s\n", what, nvmlErrorString(rc));
    return rc == NVML_ERROR_NOT_SUPPORTED ? 3 : 1;
}

/* The GPUs `id` selects (all when NULL); count returned, or -1 after a message. */
static int select_gpus(const char *id, nvmlDevice_t *out) {
    unsigned n = 0;
    nvmlReturn_t rc = nvmlDeviceGetCount(&n);
    if (rc != NVML_SUCCESS) return fail("Unable to count devices", rc), -1;
    if (!id) {
        for (unsigned i = 0; i < n && i < MAX_GPUS; i++)
            if ((rc = nvmlDeviceGetHandleByIndex(i, &out[i])) != NVML_SUCCESS) return fail("Unable to get a device", rc), -1;
        return (int)(n < MAX_GPUS ? n : MAX_GPUS);
    }
    char *end;
    unsigned long index = strtoul(id, &end, 10);
    if (*id && !*end) rc = index < n ? nvmlDeviceGetHandleByIndex((unsigned)index, out) : NVML_ERROR_INVALID_ARGUMENT;
    else if (!strncmp(id, "GPU-", 4) || !strncmp(id, "MIG-", 4)) rc = nvmlDeviceGetHandleByUUID(id, out);
    else rc = nvmlDeviceGetHandleByPciBusId(id, out);
    if (rc != NVML_SUCCESS) {
        fprintf(stderr, "No devices were found matching the identifier %s; valid: an index below %u, a GPU UUID or a PCI bus id\n", id, n);
        exit(6); /* nvidia-smi: not found */
    }
    return 1;
}

static unsigned index_of(nvmlDevice_t d) {
    unsigned i = 0;
    nvmlDeviceGetIndex(d, &i);
    return i;
}

static const char *bus_id(nvmlDevice_t d) {
    static nvmlPciInfo_t pci;
    return nvmlDeviceGetPciInfo(d, &pci) == NVML_SUCCESS ? pci.busId : "[N/A]";
}

static int mig_enabled(nvmlDevice_t d, int pending) {
    unsigned cur, pend;
    if (nvmlDeviceGetMigMode(d, &cur, &pend) != NVML_SUCCESS) return -1;
    return (int)(pending ? pend : cur);
}

/* MIG devices of GPU `d`, in NVML's order; count returned. */
static unsigned mig_devices(nvmlDevice_t d, nvmlDevice_t *out, unsigned cap) {
    unsigned max = 0, n = 0;
    if (mig_enabled(d, 0) != 1 || nvmlDeviceGetMaxMigDeviceCount(d, &max) != NVML_SUCCESS) return 0;
    for (unsigned j = 0; j < max && n < cap; j++)
        if (nvmlDeviceGetMigDeviceHandleByIndex(d, j, &out[n]) == NVML_SUCCESS) n++;
    return n;
}

static int list_gpus(void) {
    nvmlDevice_t gpus[MAX_GPUS], migs[64];
    int n = select_gpus(NULL, gpus);
    for (int i = 0; i < n; i++) {
        char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = "", uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = "";
        nvmlDeviceGetName(gpus[i], name, sizeof name);
        nvmlDeviceGetUUID(gpus[i], uuid, sizeof uuid);
        printf("GPU %u: %s (UUID: %s)\n", index_of(gpus[i]), name, uuid);
        unsigned m = mig_devices(gpus[i], migs, 64);
        for (unsigned j = 0; j < m; j++) {
            nvmlDeviceGetName(migs[j], name, sizeof name);
            nvmlDeviceGetUUID(migs[j], uuid, sizeof uuid);
            const char *profile = strstr(name, "MIG ") ? strstr(name, "MIG ") + 4 : name;
            printf("  MIG %-11s Device %2u: (UUID: %s)\n", profile, j, uuid);
        }
    }
    return n < 0;
}

static int version(void) {
    char driver[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = "", nvml[NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE] = "";
    int cuda = 0;
    nvmlSystemGetDriverVersion(driver, sizeof driver);
    nvmlSystemGetNVMLVersion(nvml, sizeof nvml);
    nvmlSystemGetCudaDriverVersion(&cuda);
    printf("NVIDIA-SMI version  : %s\nNVML version        : %s\nDRIVER version      : %s\nCUDA Version        : %d.%d\n",
           driver, nvml, driver, cuda / 1000, cuda % 1000 / 10);
    return 0;
}

static const char *compute_mode_name(nvmlComputeMode_t m) {
    static const char *names[] = {"Default", "Exclusive_Thread", "Prohibited", "Exclusive_Process"};
    return m < 4 ? names[m] : "[Unknown]";
}

/* One --query-gpu field of GPU `d` into out (value, then " UNIT" unless nounits); 0 if the field is unknown. */
static int query_field(nvmlDevice_t d, const char *f, int units, char *out, size_t size, const char **unit) {
    nvmlMemory_t mem;
    nvmlPciInfo_t pci;
    char text[256] = "";
    int major = 0, minor = 0;
    *unit = NULL;
    if (!strcmp(f, "index")) snprintf(out, size, "%u", index_of(d));
    else if (!strcmp(f, "count")) { unsigned n = 0; nvmlDeviceGetCount(&n); snprintf(out, size, "%u", n); }
    else if (!strcmp(f, "name") || !strcmp(f, "gpu_name")) { nvmlDeviceGetName(d, text, sizeof text); snprintf(out, size, "%s", text); }
    else if (!strcmp(f, "uuid") || !strcmp(f, "gpu_uuid")) { nvmlDeviceGetUUID(d, text, sizeof text); snprintf(out, size, "%s", text); }
    else if (!strcmp(f, "serial") || !strcmp(f, "gpu_serial")) {
        snprintf(out, size, "%s", nvmlDeviceGetSerial(d, text, sizeof text) == NVML_SUCCESS ? text : "[N/A]");
    } else if (!strcmp(f, "pci.bus_id") || !strcmp(f, "gpu_bus_id")) snprintf(out, size, "%s", bus_id(d));
    else if (!strcmp(f, "pci.device_id") || !strcmp(f, "pci.sub_device_id")) {
        if (nvmlDeviceGetPciInfo(d, &pci) != NVML_SUCCESS) snprintf(out, size, "[N/A]");
        else snprintf(out, size, "0x%08X", f[4] == 'd' ? pci.pciDeviceId : pci.pciSubSystemId);
    } else if (!strncmp(f, "memory.", 7) && (!strcmp(f + 7, "total") || !strcmp(f + 7, "used") || !strcmp(f + 7, "free"))) {
        if (nvmlDeviceGetMemoryInfo(d, &mem) != NVML_SUCCESS) { snprintf(out, size, "[N/A]"); return 1; }
        unsigned long long v = f[7] == 't' ? mem.total : f[7] == 'u' ? mem.used : mem.free;
        snprintf(out, size, "%llu", v >> 20);
        *unit = "MiB";
    } else if (!strcmp(f, "driver_version")) { nvmlSystemGetDriverVersion(text, sizeof text); snprintf(out, size, "%s", text); }
    else if (!strcmp(f, "compute_cap")) {
        if (nvmlDeviceGetCudaComputeCapability(d, &major, &minor) == NVML_SUCCESS) snprintf(out, size, "%d.%d", major, minor);
        else snprintf(out, size, "[N/A]");
    } else if (!strcmp(f, "mig.mode.current") || !strcmp(f, "mig.mode.pending")) {
        int on = mig_enabled(d, f[9] == 'p');
        snprintf(out, size, "%s", on < 0 ? "[N/A]" : on ? "Enabled" : "Disabled");
    } else if (!strcmp(f, "compute_mode")) {
        nvmlComputeMode_t m;
        snprintf(out, size, "%s", nvmlDeviceGetComputeMode(d, &m) == NVML_SUCCESS ? compute_mode_name(m) : "[N/A]");
    } else if (!strcmp(f, "persistence_mode")) {
        nvmlEnableState_t m;
        snprintf(out, size, "%s", nvmlDeviceGetPersistenceMode(d, &m) != NVML_SUCCESS ? "[N/A]" : m ? "Enabled" : "Disabled");
    } else return 0;
    if (*unit && units) strncat(out, " MiB", size - strlen(out) - 1);
    return 1;
}

static int query_gpu(const char *fields, const char *format, const char *id) {
    if (!format) usage("--query-gpu needs --format=csv[,noheader][,nounits]");
    int header = 1, units = 1;
    char *fmt = strdup(format), *save = NULL;
    for (char *tok = strtok_r(fmt, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (!strcmp(tok, "csv")) continue;
        else if (!strcmp(tok, "noheader")) header = 0;
        else if (!strcmp(tok, "nounits")) units = 0;
        else { fprintf(stderr, "\"%s\" is not a valid format option; valid: csv, noheader, nounits\n", tok); exit(EXIT_USAGE); }
    }
    if (strncmp(format, "csv", 3)) usage("--format must start with csv");
    nvmlDevice_t gpus[MAX_GPUS];
    int n = select_gpus(id, gpus);
    if (n < 0) return 1;
    char *list[64];
    int nf = 0;
    char *copy = strdup(fields);
    for (char *tok = strtok_r(copy, ",", &save); tok && nf < 64; tok = strtok_r(NULL, ",", &save)) {
        while (isspace((unsigned char)*tok)) tok++;
        list[nf++] = tok;
    }
    if (!nf) usage("--query-gpu names no field");
    char value[512];
    const char *unit;
    for (int k = 0; k < nf; k++) /* every field is checked before anything is printed */
        if (n > 0 && !query_field(gpus[0], list[k], 1, value, sizeof value, &unit)) {
            fprintf(stderr, "Field \"%s\" is not a valid field to query; valid: index, name, uuid, serial, pci.bus_id, pci.device_id, "
                            "pci.sub_device_id, memory.total, memory.used, memory.free, driver_version, compute_cap, "
                            "mig.mode.current, mig.mode.pending, compute_mode, persistence_mode, count\n", list[k]);
            exit(EXIT_USAGE);
        }
    if (header && n > 0) {
        for (int k = 0; k < nf; k++) {
            query_field(gpus[0], list[k], 1, value, sizeof value, &unit);
            printf("%s%s%s%s", k ? ", " : "", list[k], unit && units ? " [" : "", unit && units ? "MiB]" : "");
        }
        printf("\n");
    }
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < nf; k++) {
            query_field(gpus[i], list[k], units, value, sizeof value, &unit);
            printf("%s%s", k ? ", " : "", value);
        }
        printf("\n");
    }
    return 0;
}

static int table(void) {
    nvmlDevice_t gpus[MAX_GPUS];
    char driver[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = "";
    int cuda = 0, n = select_gpus(NULL, gpus);
    nvmlSystemGetDriverVersion(driver, sizeof driver);
    nvmlSystemGetCudaDriverVersion(&cuda);
    const char *rule = "+-----------------------------------------+------------------------+------------+";
    printf("+------------------------------------------------------------------------------+\n");
    char title[128];
    snprintf(title, sizeof title, "NVIDIA-SMI %s      Driver Version: %s      CUDA Version: %d.%d", driver, driver, cuda / 1000, cuda % 1000 / 10);
    printf("| %-76s |\n", title);
    printf("%s\n| %-39s | %-22s | %-10s |\n| %-39s | %-22s | %-10s |\n", rule, "GPU  Name", "Bus-Id", "MIG M.", "     Memory-Usage", "", "");
    printf("+=========================================+========================+============+\n");
    for (int i = 0; i < n; i++) {
        char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = "", line[64], usage_text[64];
        nvmlMemory_t mem = {0};
        nvmlDeviceGetName(gpus[i], name, sizeof name);
        nvmlDeviceGetMemoryInfo(gpus[i], &mem);
        int mig = mig_enabled(gpus[i], 0);
        snprintf(line, sizeof line, "%3u  %s", index_of(gpus[i]), name);
        snprintf(usage_text, sizeof usage_text, "     %lluMiB / %lluMiB", mem.used >> 20, mem.total >> 20);
        printf("| %-39.39s | %-22s | %-10s |\n| %-39s | %-22s | %-10s |\n%s\n", line, bus_id(gpus[i]),
               mig < 0 ? "N/A" : mig ? "Enabled" : "Disabled", usage_text, "", "", rule);
    }
    return n < 0;
}

/* GPU instance profiles of `d` that NVML reports (by profile index). */
static unsigned gi_profiles(nvmlDevice_t d, nvmlGpuInstanceProfileInfo_v2_t *out) {
    unsigned n = 0;
    for (unsigned e = 0; e < NVML_GPU_INSTANCE_PROFILE_COUNT; e++) {
        out[n].version = nvmlGpuInstanceProfileInfo_v2; /* v2: the first with the profile's name */
        if (nvmlDeviceGetGpuInstanceProfileInfoV(d, e, &out[n]) == NVML_SUCCESS) n++;
    }
    return n;
}

static const char *profile_name(nvmlDevice_t d, unsigned profile_id) {
    static nvmlGpuInstanceProfileInfo_v2_t p[NVML_GPU_INSTANCE_PROFILE_COUNT];
    static char name[64];
    unsigned n = gi_profiles(d, p);
    for (unsigned k = 0; k < n; k++)
        if (p[k].id == profile_id) {
            snprintf(name, sizeof name, "%s", strncmp(p[k].name, "MIG ", 4) ? p[k].name : p[k].name + 4);
            return name;
        }
    return "?";
}

/* Keep the GPUs that have MIG (GetMigMode answers); the real mig subcommands skip the others. */
static int mig_capable(nvmlDevice_t *gpus, int n) {
    int kept = 0;
    for (int i = 0; i < n; i++) {
        unsigned cur, pend;
        if (nvmlDeviceGetMigMode(gpus[i], &cur, &pend) != NVML_ERROR_NOT_SUPPORTED) gpus[kept++] = gpus[i];
    }
    return kept;
}

static int mig_lgip(nvmlDevice_t *gpus, int n, int placements) {
    nvmlGpuInstanceProfileInfo_v2_t p[NVML_GPU_INSTANCE_PROFILE_COUNT];
    if (!placements) {
        printf("+-----------------------------------------------------------------------------+\n"
               "| GPU instance profiles:                                                      |\n"
               "| GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |\n"
               "|                              Free/Total   GiB              CE    JPEG  OFA  |\n"
               "|=============================================================================|\n");
    }
    for (int i = 0; i < n; i++) {
        unsigned np = gi_profiles(gpus[i], p);
        for (unsigned k = 0; k < np; k++) {
            const char *name = strncmp(p[k].name, "MIG ", 4) ? p[k].name : p[k].name + 4;
            if (placements) {
                nvmlGpuInstancePlacement_t pl[16];
                unsigned count = 16;
                if (nvmlDeviceGetGpuInstancePossiblePlacements_v2(gpus[i], p[k].id, pl, &count) != NVML_SUCCESS) count = 0;
                printf("GPU  %u Profile ID %2u Placements: {", index_of(gpus[i]), p[k].id);
                for (unsigned j = 0; j < count; j++) printf("%s%u", j ? "," : "", pl[j].start);
                printf("}:%u\n", count ? pl[0].size : 0);
                continue;
            }
            unsigned free_count = 0;
            nvmlDeviceGetGpuInstanceRemainingCapacity(gpus[i], p[k].id, &free_count);
            char inst[16];
            snprintf(inst, sizeof inst, "%u/%u", free_count, p[k].instanceCount);
            printf("| %3u  MIG %-12s %3u %10s %10.2f %7s %5u %5u %5u  |\n", index_of(gpus[i]), name, p[k].id, inst,
                   p[k].memorySizeMB / 1024.0, p[k].isP2pSupported ? "Yes" : "No", p[k].multiprocessorCount,
                   p[k].decoderCount, p[k].encoderCount);
            printf("| %55s %5u %5u %5u  |\n", "", p[k].copyEngineCount, p[k].jpegCount, p[k].ofaCount);
        }
        if (!placements) printf("+-----------------------------------------------------------------------------+\n");
    }
    return 0;
}

/* GPU instances of `d`, every profile, into out; count returned. */
static unsigned gpu_instances(nvmlDevice_t d, nvmlGpuInstance_t *out, unsigned cap) {
    nvmlGpuInstanceProfileInfo_v2_t p[NVML_GPU_INSTANCE_PROFILE_COUNT];
    unsigned np = gi_profiles(d, p), n = 0;
    for (unsigned k = 0; k < np && n < cap; k++) {
        unsigned count = 0;
        if (nvmlDeviceGetGpuInstances(d, p[k].id, &out[n], &count) == NVML_SUCCESS) n += count;
    }
    return n;
}

/* `row` for every GPU instance of the GPUs, in NVML's order (profile, then instance). */
static void each_gpu_instance(nvmlDevice_t *gpus, int n, void (*row)(nvmlDevice_t, nvmlGpuInstance_t, const nvmlGpuInstanceInfo_t *)) {
    for (int i = 0; i < n; i++) {
        nvmlGpuInstance_t gis[64];
        unsigned ng = gpu_instances(gpus[i], gis, 64);
        for (unsigned k = 0; k < ng; k++) {
            nvmlGpuInstanceInfo_t info;
            if (nvmlGpuInstanceGetInfo(gis[k], &info) == NVML_SUCCESS) row(gpus[i], gis[k], &info);
        }
    }
}

static void lgi_row(nvmlDevice_t gpu, nvmlGpuInstance_t gi, const nvmlGpuInstanceInfo_t *info) {
    char place[16];
    snprintf(place, sizeof place, "%u:%u", info->placement.start, info->placement.size);
    printf("| %3u  MIG %-14s %7u %9u %13s |\n", index_of(gpu), profile_name(gpu, info->profileId), info->profileId, info->id, place);
}

static int mig_lgi(nvmlDevice_t *gpus, int n) {
    printf("+---------------------------------------------------------+\n"
           "| GPU instances:                                          |\n"
           "| GPU   Name               Profile  Instance   Placement  |\n"
           "|                            ID       ID       Start:Size |\n"
           "|=========================================================|\n");
    each_gpu_instance(gpus, n, lgi_row);
    printf("+---------------------------------------------------------+\n");
    return 0;
}

static void lci_rows(nvmlDevice_t gpu, nvmlGpuInstance_t gi, const nvmlGpuInstanceInfo_t *info) {
    for (unsigned e = 0; e < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; e++) {
        nvmlComputeInstanceProfileInfo_v2_t cp = {.version = nvmlComputeInstanceProfileInfo_v2};
        if (nvmlGpuInstanceGetComputeInstanceProfileInfoV(gi, e, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &cp) != NVML_SUCCESS)
            continue;
        nvmlComputeInstance_t cis[8];
        unsigned nc = 0;
        if (nvmlGpuInstanceGetComputeInstances(gi, cp.id, cis, &nc) != NVML_SUCCESS) continue;
        for (unsigned c = 0; c < nc; c++) {
            nvmlComputeInstanceInfo_t ci;
            if (nvmlComputeInstanceGetInfo(cis[c], &ci) != NVML_SUCCESS) continue;
            char place[16];
            snprintf(place, sizeof place, "%u:%u", ci.placement.start, ci.placement.size);
            printf("| %3u %9u       MIG %-16s %5u %10u %13s |\n", index_of(gpu), info->id,
                   strncmp(cp.name, "MIG ", 4) ? cp.name : cp.name + 4, cp.id, ci.id, place);
        }
    }
}

static int mig_lci(nvmlDevice_t *gpus, int n) {
    printf("+--------------------------------------------------------------------+\n"
           "| Compute instances:                                                 |\n"
           "| GPU     GPU       Name             Profile   Instance   Placement  |\n"
           "|       Instance                       ID        ID       Start:Size |\n"
           "|         ID                                                         |\n"
           "|====================================================================|\n");
    each_gpu_instance(gpus, n, lci_rows);
    printf("+--------------------------------------------------------------------+\n");
    return 0;
}

static int set_compute_mode(nvmlDevice_t *gpus, int n, const char *text) {
    static const char *names[] = {"DEFAULT", "EXCLUSIVE_THREAD", "PROHIBITED", "EXCLUSIVE_PROCESS"};
    int mode = -1;
    for (int k = 0; k < 4; k++)
        if (!strcasecmp(text, names[k]) || (isdigit((unsigned char)text[0]) && !text[1] && text[0] - '0' == k)) mode = k;
    if (mode < 0) usage("-c takes 0|DEFAULT, 1|EXCLUSIVE_THREAD, 2|PROHIBITED or 3|EXCLUSIVE_PROCESS");
    for (int i = 0; i < n; i++) {
        nvmlComputeMode_t now;
        if (nvmlDeviceGetComputeMode(gpus[i], &now) == NVML_SUCCESS && (int)now == mode) {
            printf("Compute mode is already set to %s for GPU %s.\n", names[mode], bus_id(gpus[i]));
            continue;
        }
        nvmlReturn_t rc = nvmlDeviceSetComputeMode(gpus[i], (nvmlComputeMode_t)mode);
        if (rc != NVML_SUCCESS) return fail("Unable to set the compute mode", rc);
        printf("Set compute mode to %s for GPU %s.\n", names[mode], bus_id(gpus[i]));
    }
    printf("All done.\n");
    return 0;
}

static int set_persistence(nvmlDevice_t *gpus, int n, const char *text) {
    if (strcmp(text, "0") && strcmp(text, "1")) usage("-pm takes 0 or 1");
    nvmlEnableState_t want = text[0] == '1' ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    for (int i = 0; i < n; i++) {
        nvmlReturn_t rc = nvmlDeviceSetPersistenceMode(gpus[i], want);
        if (rc != NVML_SUCCESS) return fail("Unable to set persistence mode", rc);
        printf("%s persistence mode for GPU %s.\n", want ? "Enabled" : "Disabled", bus_id(gpus[i]));
    }
    printf("All done.\n");
    return 0;
}

static int set_timeslice(nvmlDevice_t *gpus, int n, const char *text) {
    if (!text || strlen(text) != 1 || text[0] < '0' || text[0] > '3') usage("--set-timeslice takes 0 (default), 1 (short), 2 (medium) or 3 (long)");
    /* no public NVML call sets it: the fake library exports one, a real driver's library does not */
    nvmlReturn_t (*set)(nvmlDevice_t, unsigned) = (nvmlReturn_t (*)(nvmlDevice_t, unsigned))dlsym(RTLD_DEFAULT, "fakeNvmlDeviceSetTimeslice");
    for (int i = 0; i < n; i++) {
        nvmlReturn_t rc = set ? set(gpus[i], (unsigned)(text[0] - '0')) : NVML_ERROR_NOT_SUPPORTED;
        if (rc != NVML_SUCCESS) return fail("Unable to set the timeslice", rc);
        printf("Set timeslice to %s for GPU %s.\n", text, bus_id(gpus[i]));
    }
    printf("All done.\n");
    return 0;
}

int main(int argc, char **argv) {
    const char *id = NULL, *query = NULL, *format = NULL, *compute = NULL, *pm = NULL, *timeslice = NULL, *mig = NULL;
    int list = 0, show_version = 0, policy = 0;
    for (int a = 1; a < argc; a++) {
        const char *arg = argv[a];
        const char *next = a + 1 < argc ? argv[a + 1] : NULL;
        if (!strcmp(arg, "-L") || !strcmp(arg, "--list-gpus")) list = 1;
        else if (!strcmp(arg, "--version")) show_version = 1;
        else if (!strncmp(arg, "--query-gpu=", 12)) query = arg + 12;
        else if (!strncmp(arg, "--format=", 9)) format = arg + 9;
        else if (!strcmp(arg, "mig") && a == 1) mig = "";
        else if (!strcmp(arg, "compute-policy") && a == 1) policy = 1;
        else if (mig && (!strcmp(arg, "-lgip") || !strcmp(arg, "-lgipp") || !strcmp(arg, "-lgi") || !strcmp(arg, "-lci"))) mig = arg;
        else if ((!strcmp(arg, "-i") || !strcmp(arg, "--id")) && next) id = argv[++a];
        else if (!strncmp(arg, "--id=", 5)) id = arg + 5;
        else if ((!strcmp(arg, "-c") || !strcmp(arg, "--compute-mode")) && next && !mig && !policy) compute = argv[++a];
        else if ((!strcmp(arg, "-pm") || !strcmp(arg, "--persistence-mode")) && next && !mig && !policy) pm = argv[++a];
        else if (policy && !strcmp(arg, "--set-timeslice") && next) timeslice = argv[++a];
        else if (policy && !strncmp(arg, "--set-timeslice=", 16)) timeslice = arg + 16;
        else {
            fprintf(stderr, "nvidia-smi: unknown or incomplete option %s\n", arg);
            usage("see above");
        }
    }
    if (mig && !*mig) usage("mig needs -lgip, -lgipp, -lgi or -lci");
    if (policy && !timeslice) usage("compute-policy needs --set-timeslice N");
    if ((compute || pm || timeslice) && !id) usage("-c, -pm and --set-timeslice need -i ID");
    nvmlReturn_t rc = nvmlInit();
    if (rc != NVML_SUCCESS) {
        fprintf(stderr, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver: %s\n", nvmlErrorString(rc));
        return EXIT_NVML;
    }
    int status;
    nvmlDevice_t gpus[MAX_GPUS];
    if (show_version) status = version();
    else if (list) status = list_gpus();
    else if (query) status = query_gpu(query, format, id);
    else if (mig || compute || pm || timeslice) {
        int n = select_gpus(id, gpus);
        if (n < 0) status = 1;
        else if (mig && (n = mig_capable(gpus, n)) == 0) {
            printf("No MIG-supported devices found.\n");  /* what the real tool says on a T4, L4 or L40S, with exit 6 */
            status = EXIT_NO_MIG;
        }
        else if (mig) status = !strcmp(mig, "-lgip") ? mig_lgip(gpus, n, 0) : !strcmp(mig, "-lgipp") ? mig_lgip(gpus, n, 1)
                             : !strcmp(mig, "-lgi") ? mig_lgi(gpus, n) : mig_lci(gpus, n);
        else if (compute) status = set_compute_mode(gpus, n, compute);
        else if (pm) status = set_persistence(gpus, n, pm);
        else status = set_timeslice(gpus, n, timeslice);
    } else status = table();
    nvmlShutdown();
    return status;
}
