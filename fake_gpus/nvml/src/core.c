/* Library life cycle, the per-node state directory and its lock, visible devices, error strings
 * and system-level queries of the fake libnvidia-ml.so.1.
 *
 * State directory (FAKE_NVML_STATE_DIR, or fakeNvmlSetStateDir; else, for the copy in a node's driver
 * root, that node's directory; else FK_NODE_STATE_DIR if it exists, where a node keeps its fake GPUs:
 * a kind node, and every container on it, sees it there):
 *   gpus  "fake-nvml-gpus 1" then "gpu <index> <board-key> <minor> <GPU-uuid> <serial> <bus-id>"
 *   mig   "fake-nvml-mig 1" then "mode <gpu> <current> <pending>",
 *         "gi <gpu> <gi-id> <profile-id> <start> <size>",
 *         "ci <gpu> <gi-id> <ci-id> <profile-id> <start> <size> <MIG-uuid>"
 *   settings  "fake-nvml-settings 1" then "compute-mode <gpu> <mode>", "timeslice <gpu> <value>" (settings.c;
 *         absent means every GPU at its defaults)
 *   events  append-only log of injected faults (Xid, ECC, lost, heal), read by health.c
 *   lock  flock()ed shared for reads, exclusive for read-modify-write; mig is replaced by rename.
 *   proc/driver/nvidia/capabilities/...  the instances' nvidia-caps files, rewritten with mig (caps.c).
 *
 * nvmlInit errors (a choice of this fake, also printed as one line on stderr):
 *   no state directory configured or the directory is missing  -> NVML_ERROR_DRIVER_NOT_LOADED
 *   directory without a fake-nvml header, other format version,
 *   or a board key this build of the library does not know    -> NVML_ERROR_LIB_RM_VERSION_MISMATCH
 *   right header but malformed content (corrupt)               -> NVML_ERROR_UNKNOWN
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dlfcn.h>
#include <stdint.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define FK_GPUS_MAGIC "fake-nvml-gpus"
#define FK_MIG_MAGIC "fake-nvml-mig"
#define FK_FORMAT_VERSION 1
/* fake_gpus/nvml/state.py NODE_STATE_DIR names the same place */
#define FK_NODE_STATE_DIR "/var/lib/dra-testbed/nvml"
/* NVIDIA's character-device major, fixed by the kernel module; nvidiactl is its minor 255 */
#define FK_NVIDIA_MAJOR 195
#define FK_NVIDIACTL_MINOR 255

fk_gpu fk_gpus[FK_MAX_GPUS];
unsigned fk_n_gpus;
fk_view fk_views[FK_MAX_GPUS];
unsigned fk_n_views;
fk_mig_gpu fk_mig[FK_MAX_GPUS];

static pthread_mutex_t fk_mutex = PTHREAD_MUTEX_INITIALIZER;
static unsigned fk_refcount;
static int fk_lock_fd = -1;
static char fk_dir[PATH_MAX];
static char fk_dir_override[PATH_MAX];
static int fk_have_override;

static struct nvmlDevice_st fk_gpu_handles[FK_MAX_GPUS];
static struct nvmlDevice_st fk_mig_handles[FK_MAX_GPUS][FK_MAX_GI][FK_MAX_CI];
static struct nvmlGpuInstance_st fk_gi_handles[FK_MAX_GPUS][FK_MAX_GI];
static struct nvmlComputeInstance_st fk_ci_handles[FK_MAX_GPUS][FK_MAX_GI][FK_MAX_CI];

/* ---------------------------------------------------------------- session guard */

nvmlReturn_t fk_enter(void) {
    pthread_mutex_lock(&fk_mutex);
    if (fk_refcount == 0) {
        pthread_mutex_unlock(&fk_mutex);
        return NVML_ERROR_UNINITIALIZED;
    }
    return NVML_SUCCESS;
}

nvmlReturn_t fk_leave(nvmlReturn_t rc) {
    pthread_mutex_unlock(&fk_mutex);
    return rc;
}

/* ---------------------------------------------------------------- handles */

nvmlDevice_t fk_gpu_handle(unsigned view) {
    struct nvmlDevice_st *h = &fk_gpu_handles[view];
    h->is_mig = 0;
    h->view = view;
    h->gpu = fk_views[view].gpu;
    return (nvmlDevice_t){h};
}

nvmlDevice_t fk_mig_handle(unsigned gpu, unsigned gi, unsigned ci) {
    struct nvmlDevice_st *h = &fk_mig_handles[gpu][gi][ci];
    h->is_mig = 1;
    h->gpu = gpu;
    h->gi = gi;
    h->ci = ci;
    int v = fk_view_of_gpu(gpu);
    h->view = v < 0 ? 0 : (unsigned)v;
    return (nvmlDevice_t){h};
}

nvmlGpuInstance_t fk_gi_handle(unsigned gpu, unsigned gi) {
    struct nvmlGpuInstance_st *h = &fk_gi_handles[gpu][gi];
    h->gpu = gpu;
    h->gi = gi;
    return (nvmlGpuInstance_t){h};
}

nvmlComputeInstance_t fk_ci_handle(unsigned gpu, unsigned gi, unsigned ci) {
    struct nvmlComputeInstance_st *h = &fk_ci_handles[gpu][gi][ci];
    h->gpu = gpu;
    h->gi = gi;
    h->ci = ci;
    return (nvmlComputeInstance_t){h};
}

/* True when p points at an element of a static table (checked by address only). */
static int fk_in_table(const void *p, const void *base, size_t total, size_t elem) {
    uintptr_t a = (uintptr_t)p, b = (uintptr_t)base;
    return a >= b && a < b + total && (a - b) % elem == 0;
}

struct nvmlDevice_st *fk_dev(nvmlDevice_t d) {
    if (fk_in_table(d.handle, fk_gpu_handles, sizeof fk_gpu_handles, sizeof fk_gpu_handles[0])) {
        if (d.handle->view >= fk_n_views || d.handle->is_mig) return NULL;
        return d.handle;
    }
    if (fk_in_table(d.handle, fk_mig_handles, sizeof fk_mig_handles, sizeof fk_mig_handles[0][0][0])) {
        if (!d.handle->is_mig || d.handle->gpu >= fk_n_gpus) return NULL;
        return d.handle;
    }
    return NULL;
}

struct nvmlGpuInstance_st *fk_gi_of(nvmlGpuInstance_t g) {
    if (!fk_in_table(g.handle, fk_gi_handles, sizeof fk_gi_handles, sizeof fk_gi_handles[0][0])) return NULL;
    return g.handle->gpu < fk_n_gpus ? g.handle : NULL;
}

struct nvmlComputeInstance_st *fk_ci_of(nvmlComputeInstance_t c) {
    if (!fk_in_table(c.handle, fk_ci_handles, sizeof fk_ci_handles, sizeof fk_ci_handles[0][0][0])) return NULL;
    return c.handle->gpu < fk_n_gpus ? c.handle : NULL;
}

int fk_view_of_gpu(unsigned gpu) {
    for (unsigned v = 0; v < fk_n_views; v++)
        if (fk_views[v].gpu == gpu) return (int)v;
    return -1;
}

static int fk_view_has(const fk_view *v, unsigned gi, unsigned ci) {
    if (!v->mig_only) return 1;
    for (unsigned i = 0; i < v->n_migs; i++)
        if (v->migs[i].gi == gi && (ci == UINT_MAX || v->migs[i].ci == ci)) return 1;
    return 0;
}

/* Whether the view entry shows GPU instance gi (ci == UINT_MAX) or MIG device (gi, ci). */
int fk_view_shows(unsigned view, unsigned gi, unsigned ci) {
    return fk_view_has(&fk_views[view], gi, ci);
}

/* ---------------------------------------------------------------- catalog lookups */

static const fk_board *fk_board_by_key(const char *key) {
    for (unsigned i = 0; i < fk_n_boards; i++)
        if (strcmp(fk_boards[i].key, key) == 0) return &fk_boards[i];
    return NULL;
}

const fk_gi_profile *fk_gi_profile_by_id(const fk_board *b, unsigned id) {
    for (unsigned i = 0; i < b->n_gi; i++)
        if (b->gi[i].id == id) return &b->gi[i];
    return NULL;
}

const fk_ci_profile *fk_ci_profile_by_id(const fk_gi_profile *p, unsigned id) {
    for (unsigned i = 0; i < p->n_ci; i++)
        if (p->ci[i].id == id) return &p->ci[i];
    return NULL;
}

fk_gi *fk_find_gi(unsigned gpu, unsigned gi) {
    fk_mig_gpu *m = &fk_mig[gpu];
    for (unsigned i = 0; i < m->n_gi; i++)
        if (m->gi[i].id == gi) return &m->gi[i];
    return NULL;
}

fk_ci *fk_find_ci(unsigned gpu, unsigned gi, unsigned ci) {
    fk_mig_gpu *m = &fk_mig[gpu];
    for (unsigned i = 0; i < m->n_ci; i++)
        if (m->ci[i].gi == gi && m->ci[i].id == ci) return &m->ci[i];
    return NULL;
}

/* ---------------------------------------------------------------- state files */

static void fk_path(char *out, const char *name) {
    snprintf(out, PATH_MAX, "%s/%s", fk_dir, name);
}

void fk_state_path(char *out, const char *name) {
    fk_path(out, name);
}

/* Report why the state directory was refused, one line, then return rc. */
static nvmlReturn_t fk_refuse(nvmlReturn_t rc, const char *file, const char *what) {
    fprintf(stderr, "fake-nvml: %s%s%s: %s\n", fk_dir, file ? "/" : "", file ? file : "", what);
    return rc;
}

static int fk_is_uuid(const char *s, const char *prefix) {
    size_t n = strlen(prefix);
    if (strncmp(s, prefix, n) != 0 || strlen(s) != n + 36) return 0;
    for (size_t i = 0; i < 36; i++) {
        char c = s[n + i];
        int dash = (i == 8 || i == 13 || i == 18 || i == 23);
        if (dash ? c != '-' : !isxdigit((unsigned char)c)) return 0;
    }
    return 1;
}

/* Check the "<magic> <version>" first line: 0 ok, else an nvmlReturn_t. */
static nvmlReturn_t fk_check_header(FILE *f, const char *magic, const char *file) {
    char line[256], m[64];
    int version;
    if (!fgets(line, sizeof line, f) || sscanf(line, "%63s %d", m, &version) != 2 || strcmp(m, magic) != 0)
        return fk_refuse(NVML_ERROR_LIB_RM_VERSION_MISMATCH, file, "not a fake-nvml state file (bad header)");
    if (version != FK_FORMAT_VERSION)
        return fk_refuse(NVML_ERROR_LIB_RM_VERSION_MISMATCH, file, "state format version not supported by this library");
    return NVML_SUCCESS;
}

static nvmlReturn_t fk_load_gpus(void) {
    char path[PATH_MAX], line[512], key[128], uuid[128], serial[64], bus[64];
    fk_path(path, "gpus");
    FILE *f = fopen(path, "r");
    if (!f) return fk_refuse(NVML_ERROR_LIB_RM_VERSION_MISMATCH, "gpus", "missing: not a fake-nvml state directory");
    nvmlReturn_t rc = fk_check_header(f, FK_GPUS_MAGIC, "gpus");
    fk_n_gpus = 0;
    while (rc == NVML_SUCCESS && fgets(line, sizeof line, f)) {
        unsigned index, minor, dom, b, dv, fn;
        char extra[8];
        if (line[0] == '\n' || line[0] == '#') continue;
        if (sscanf(line, "gpu %u %127s %u %127s %63s %63s %7s", &index, key, &minor, uuid, serial, bus, extra) != 6) {
            rc = fk_refuse(NVML_ERROR_UNKNOWN, "gpus", "malformed line (want: gpu INDEX BOARD MINOR UUID SERIAL BUSID)");
            break;
        }
        if (index != fk_n_gpus || index >= FK_MAX_GPUS) {
            rc = fk_refuse(NVML_ERROR_UNKNOWN, "gpus", "GPU indexes must run 0,1,2,... (at most 64 GPUs)");
            break;
        }
        fk_gpu *g = &fk_gpus[index];
        g->board = fk_board_by_key(key);
        if (!g->board) {
            rc = fk_refuse(NVML_ERROR_LIB_RM_VERSION_MISMATCH, "gpus", "board key unknown to this build of the library");
            break;
        }
        if (!fk_is_uuid(uuid, "GPU-") || sscanf(bus, "%8x:%2x:%2x.%1x", &dom, &b, &dv, &fn) != 4 || strlen(bus) != 16) {
            rc = fk_refuse(NVML_ERROR_UNKNOWN, "gpus", "bad UUID (GPU-xxxxxxxx-...) or PCI bus id (00000000:XX:00.0)");
            break;
        }
        g->minor = minor;
        snprintf(g->uuid, sizeof g->uuid, "%s", uuid);
        snprintf(g->serial, sizeof g->serial, "%s", serial);
        snprintf(g->bus_id, sizeof g->bus_id, "%s", bus);
        g->domain = dom;
        g->bus = b;
        g->device = dv;
        fk_n_gpus++;
    }
    fclose(f);
    if (rc == NVML_SUCCESS && fk_n_gpus == 0) rc = fk_refuse(NVML_ERROR_UNKNOWN, "gpus", "lists no GPU");
    return rc;
}

/* Parse <state>/mig into fk_mig; the caller holds the flock. Corruption -> NVML_ERROR_UNKNOWN. */
static nvmlReturn_t fk_parse_mig(int verbose) {
    char path[PATH_MAX], line[512], uuid[128], extra[8];
    fk_path(path, "mig");
    FILE *f = fopen(path, "r");
    if (!f) return verbose ? fk_refuse(NVML_ERROR_UNKNOWN, "mig", "missing") : NVML_ERROR_UNKNOWN;
    memset(fk_mig, 0, sizeof(fk_mig[0]) * fk_n_gpus);
    nvmlReturn_t rc = NVML_SUCCESS;
    if (fgets(line, sizeof line, f) == NULL || strncmp(line, FK_MIG_MAGIC " 1", strlen(FK_MIG_MAGIC) + 2) != 0)
        rc = verbose ? fk_refuse(NVML_ERROR_LIB_RM_VERSION_MISMATCH, "mig", "not a fake-nvml MIG state file (bad header)")
                     : NVML_ERROR_UNKNOWN;
    const char *bad = NULL;
    while (rc == NVML_SUCCESS && !bad && fgets(line, sizeof line, f)) {
        unsigned gpu, a, b, c, d, e, g;
        if (line[0] == '\n' || line[0] == '#') continue;
        if (sscanf(line, "mode %u %u %u %7s", &gpu, &a, &b, extra) == 3) {
            if (gpu >= fk_n_gpus || a > 1 || b > 1) bad = "bad mode line";
            else { fk_mig[gpu].cur = a; fk_mig[gpu].pend = b; }
        } else if (sscanf(line, "gi %u %u %u %u %u %7s", &gpu, &a, &b, &c, &d, extra) == 5) {
            if (gpu >= fk_n_gpus || a >= FK_MAX_GI || fk_mig[gpu].n_gi >= FK_MAX_GI) bad = "bad gi line";
            else if (!fk_gi_profile_by_id(fk_gpus[gpu].board, b)) bad = "gi line names a profile the board lacks";
            else if (fk_find_gi(gpu, a)) bad = "duplicate GPU instance id";
            else fk_mig[gpu].gi[fk_mig[gpu].n_gi++] = (fk_gi){a, b, c, d};
        } else if (sscanf(line, "ci %u %u %u %u %u %u %127s %7s", &gpu, &a, &b, &c, &d, &e, uuid, extra) == 7) {
            (void)g;
            if (gpu >= fk_n_gpus || b >= FK_MAX_CI || fk_mig[gpu].n_ci >= FK_MAX_CI_PER_GPU) bad = "bad ci line";
            else if (!fk_find_gi(gpu, a)) bad = "ci line names a GPU instance that does not exist";
            else if (!fk_is_uuid(uuid, "MIG-")) bad = "bad MIG UUID";
            else if (fk_find_ci(gpu, a, b)) bad = "duplicate compute instance id";
            else {
                fk_ci *ci = &fk_mig[gpu].ci[fk_mig[gpu].n_ci++];
                *ci = (fk_ci){.gi = a, .id = b, .profile_id = c, .start = d, .size = e};
                snprintf(ci->uuid, sizeof ci->uuid, "%s", uuid);
            }
        } else {
            bad = "malformed line";
        }
    }
    fclose(f);
    if (bad) rc = verbose ? fk_refuse(NVML_ERROR_UNKNOWN, "mig", bad) : NVML_ERROR_UNKNOWN;
    return rc;
}

nvmlReturn_t fk_state_load(int exclusive) {
    while (flock(fk_lock_fd, exclusive ? LOCK_EX : LOCK_SH) != 0)
        if (errno != EINTR) return NVML_ERROR_UNKNOWN;
    nvmlReturn_t rc = fk_parse_mig(0);
    if (rc != NVML_SUCCESS) fk_state_unlock();
    return rc;
}

void fk_state_unlock(void) {
    flock(fk_lock_fd, LOCK_UN);
}

/* Write fk_mig to a temporary file and rename it over <state>/mig; caller holds LOCK_EX. */
nvmlReturn_t fk_state_store(void) {
    char path[PATH_MAX], tmp[PATH_MAX + 32];
    fk_path(path, "mig");
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return NVML_ERROR_UNKNOWN;
    fprintf(f, "%s %d\n", FK_MIG_MAGIC, FK_FORMAT_VERSION);
    for (unsigned g = 0; g < fk_n_gpus; g++) {
        const fk_mig_gpu *m = &fk_mig[g];
        fprintf(f, "mode %u %u %u\n", g, m->cur, m->pend);
        for (unsigned i = 0; i < m->n_gi; i++)
            fprintf(f, "gi %u %u %u %u %u\n", g, m->gi[i].id, m->gi[i].profile_id, m->gi[i].start, m->gi[i].size);
        for (unsigned i = 0; i < m->n_ci; i++)
            fprintf(f, "ci %u %u %u %u %u %u %s\n", g, m->ci[i].gi, m->ci[i].id, m->ci[i].profile_id,
                    m->ci[i].start, m->ci[i].size, m->ci[i].uuid);
    }
    int bad = ferror(f);
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        unlink(tmp);
        return NVML_ERROR_UNKNOWN;
    }
    fk_caps_sync(fk_dir); /* every NVML user that changes instances leaves their capability files right */
    return NVML_SUCCESS;
}

void fk_new_mig_uuid(char out[FK_UUID_LEN]) {
    unsigned char r[16];
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    ssize_t got = fd >= 0 ? read(fd, r, sizeof r) : -1;
    if (fd >= 0) close(fd);
    if (got != (ssize_t)sizeof r) {
        static unsigned long counter;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        unsigned long long x = (unsigned long long)ts.tv_nsec ^ ((unsigned long long)getpid() << 32) ^ ++counter;
        for (int i = 0; i < 16; i++) { x = x * 6364136223846793005ULL + 1442695040888963407ULL; r[i] = (unsigned char)(x >> 56); }
    }
    r[6] = (unsigned char)((r[6] & 0x0f) | 0x40); /* RFC 4122 version 4 */
    r[8] = (unsigned char)((r[8] & 0x3f) | 0x80);
    snprintf(out, FK_UUID_LEN, "MIG-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12], r[13], r[14], r[15]);
}

/* ---------------------------------------------------------------- visible devices */

/* Add `pick` to views[0..*n): a GPU already there absorbs it (whole wins; MIG devices add up). */
static void fk_view_merge(fk_view *views, unsigned *n, const fk_view *pick) {
    for (unsigned j = 0; j < *n; j++) {
        fk_view *v = &views[j];
        if (v->gpu != pick->gpu) continue;
        if (!pick->mig_only) {
            v->mig_only = 0;
            v->n_migs = 0;
        } else if (v->mig_only) {
            for (unsigned k = 0; k < pick->n_migs; k++)
                if (!fk_view_has(v, pick->migs[k].gi, pick->migs[k].ci) && v->n_migs < FK_MAX_CI_PER_GPU)
                    v->migs[v->n_migs++] = pick->migs[k];
        }
        return;
    }
    if (*n < FK_MAX_GPUS) views[(*n)++] = *pick;
}

/* Narrow fk_views by one NVIDIA_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES value, as a container
 * runtime (or CUDA) would: "all", "none", "void", or a comma list of indexes, GPU and MIG UUIDs.
 * Indexes refer to the view as narrowed so far; unknown entries are dropped. */
static void fk_apply_visible(const char *spec, int empty_is_none) {
    if (!spec) return;
    while (isspace((unsigned char)*spec)) spec++;
    if (*spec == '\0') {
        if (empty_is_none) fk_n_views = 0;
        return;
    }
    if (strcasecmp(spec, "all") == 0) return;
    if (strcasecmp(spec, "none") == 0 || strcasecmp(spec, "void") == 0) {
        fk_n_views = 0;
        return;
    }
    /* static: a view is ~0.5 KiB and callers' threads may have small stacks; fk_mutex is held */
    static fk_view old[FK_MAX_GPUS], out[FK_MAX_GPUS];
    unsigned n_old = fk_n_views, n_out = 0;
    memcpy(old, fk_views, sizeof(fk_view) * n_old);
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", spec);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (isspace((unsigned char)*tok)) tok++;
        for (char *e = tok + strlen(tok); e > tok && isspace((unsigned char)e[-1]);) *--e = '\0';
        if (*tok && strspn(tok, "0123456789") == strlen(tok)) {
            unsigned long i = strtoul(tok, NULL, 10);
            if (i < n_old) fk_view_merge(out, &n_out, &old[i]);
        } else if (strncasecmp(tok, "GPU-", 4) == 0) {
            for (unsigned i = 0; i < n_old; i++)
                if (!old[i].mig_only && strcasecmp(fk_gpus[old[i].gpu].uuid, tok) == 0) {
                    fk_view_merge(out, &n_out, &old[i]);
                    break;
                }
        } else if (strncasecmp(tok, "MIG-", 4) == 0) {
            for (unsigned i = 0; i < n_old; i++) {
                const fk_mig_gpu *m = &fk_mig[old[i].gpu];
                unsigned c = 0;
                while (c < m->n_ci && (strcasecmp(m->ci[c].uuid, tok) != 0 || !fk_view_has(&old[i], m->ci[c].gi, m->ci[c].id))) c++;
                if (c == m->n_ci) continue;
                fk_view pick = {.gpu = old[i].gpu, .mig_only = 1, .n_migs = 1, .migs = {{m->ci[c].gi, m->ci[c].id}}};
                fk_view_merge(out, &n_out, &pick);
                break;
            }
        }
    }
    memcpy(fk_views, out, sizeof(fk_view) * n_out);
    fk_n_views = n_out;
}

static void fk_view_all(void) {
    fk_n_views = fk_n_gpus;
    for (unsigned i = 0; i < fk_n_gpus; i++) fk_views[i] = (fk_view){.gpu = i};
}

static int fk_view_order(const void *a, const void *b) {
    const fk_view *x = a, *y = b;
    return x->gpu < y->gpu ? -1 : (x->gpu > y->gpu);
}

/* Each CDI device of the fake driver sets its own FAKE_NVML_VISIBLE_<device>=<uuids>, because a
 * container with several claims gets the environment of all their devices and one shared
 * NVIDIA_VISIBLE_DEVICES would keep only the last. The view is the union of those variables, in
 * device order as device nodes would give it. Returns 0 (view reset to every GPU) when none is set. */
static int fk_apply_device_visibility(void) {
    extern char **environ;
    static const char prefix[] = "FAKE_NVML_VISIBLE_";
    static fk_view acc[FK_MAX_GPUS];
    unsigned n_acc = 0;
    int seen = 0;
    for (char **e = environ; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        if (strncmp(*e, prefix, sizeof prefix - 1) != 0 || !eq) continue;
        seen = 1;
        fk_view_all();
        fk_apply_visible(eq + 1, 1);
        for (unsigned i = 0; i < fk_n_views; i++) fk_view_merge(acc, &n_acc, &fk_views[i]);
    }
    fk_view_all();
    if (!seen) return 0;
    qsort(acc, n_acc, sizeof acc[0], fk_view_order);
    memcpy(fk_views, acc, sizeof acc[0] * n_acc);
    fk_n_views = n_acc;
    return 1;
}

/* Whether `path` is the character device major:minor (any major when major < 0). */
static int fk_is_chardev(const char *path, long major, unsigned minor) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISCHR(st.st_mode) && (major < 0 || major(st.st_rdev) == (unsigned)major) &&
           minor(st.st_rdev) == minor;
}

/* A process that has /dev/nvidiactl lives where the driver's device nodes are (a container given GPUs
 * through CDI, a node): NVML there shows what the process can open, as real NVML does. Elsewhere (a
 * plain process on the host) there are no device nodes and the environment narrows the view. */
static int fk_device_nodes_present(void) {
    return fk_is_chardev("/dev/nvidiactl", FK_NVIDIA_MAJOR, FK_NVIDIACTL_MINOR);
}

/* The nvidia-caps major from the node's /proc/devices view (<state>/proc/devices); -1 if it lists none. */
static long fk_caps_major(void) {
    char path[PATH_MAX], line[128], name[64];
    long major = -1, m;
    fk_path(path, "proc/devices");
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "Block", 5) == 0) break;
        if (sscanf(line, "%ld %63s", &m, name) == 2 && strcmp(name, "nvidia-caps") == 0) major = m;
    }
    fclose(f);
    return major;
}

/* Narrow fk_views to the device nodes present: a GPU whose /dev/nvidia<minor> exists; on a GPU in MIG
 * mode only the MIG devices whose GPU-instance and compute-instance access nodes
 * (/dev/nvidia-caps/nvidia-cap<minor>, minors as in caps.c) both exist, unless the process holds the
 * node-wide mig/config or mig/monitor capability (nvidia-cap1, nvidia-cap2), as a MIG manager does. */
static void fk_apply_device_nodes(void) {
    char path[PATH_MAX];
    long caps = fk_caps_major();
    int every_mig = fk_is_chardev("/dev/nvidia-caps/nvidia-cap1", caps, 1) || fk_is_chardev("/dev/nvidia-caps/nvidia-cap2", caps, 2);
    fk_n_views = 0;
    for (unsigned g = 0; g < fk_n_gpus; g++) {
        snprintf(path, sizeof path, "/dev/nvidia%u", fk_gpus[g].minor);
        if (!fk_is_chardev(path, FK_NVIDIA_MAJOR, fk_gpus[g].minor)) continue;
        fk_view *v = &fk_views[fk_n_views++];
        *v = (fk_view){.gpu = g};
        const fk_mig_gpu *m = &fk_mig[g];
        if (!m->cur || every_mig) continue;
        v->mig_only = 1;
        for (unsigned c = 0; c < m->n_ci; c++) {
            snprintf(path, sizeof path, "/dev/nvidia-caps/nvidia-cap%u", fk_caps_minor(fk_gpus[g].minor, m->ci[c].gi, -1));
            if (!fk_is_chardev(path, caps, fk_caps_minor(fk_gpus[g].minor, m->ci[c].gi, -1))) continue;
            snprintf(path, sizeof path, "/dev/nvidia-caps/nvidia-cap%u", fk_caps_minor(fk_gpus[g].minor, m->ci[c].gi, (int)m->ci[c].id));
            if (!fk_is_chardev(path, caps, fk_caps_minor(fk_gpus[g].minor, m->ci[c].gi, (int)m->ci[c].id))) continue;
            v->migs[v->n_migs++] = (fk_mig_ref){m->ci[c].gi, m->ci[c].id};
        }
    }
}

/* ---------------------------------------------------------------- init / shutdown */

/* The node a driver root's copy of the library belongs to: <state>/driver-root/usr/lib/<triplet>/<this>
 * (fake_gpus.machine.driver_root), so that the driver root's nvidia-smi, run by hand, shows its node as
 * a real one shows its machine. NULL for the library anywhere else (the build cache, a container). */
static const char *fk_own_node_dir(void) {
    static char dir[PATH_MAX];
    Dl_info info;
    char path[PATH_MAX], probe[PATH_MAX + 16];
    if (!dladdr((void *)fk_own_node_dir, &info) || !info.dli_fname || !realpath(info.dli_fname, path)) return NULL;
    for (int up = 0; up < 5; up++) { /* file, <triplet>, lib, usr, driver-root */
        char *slash = strrchr(path, '/');
        if (!slash || slash == path) return NULL;
        if (up == 4 && strcmp(slash + 1, "driver-root") != 0) return NULL;
        *slash = '\0';
    }
    snprintf(probe, sizeof probe, "%s/gpus", path);
    if (access(probe, R_OK) != 0) return NULL;
    snprintf(dir, sizeof dir, "%s", path);
    return dir;
}

static nvmlReturn_t fk_open_session(void) {
    const char *dir = fk_have_override ? fk_dir_override : getenv("FAKE_NVML_STATE_DIR");
    if (!dir || !*dir) dir = fk_own_node_dir();
    fk_dir[0] = '\0';
    struct stat st;
    if ((!dir || !*dir) && stat(FK_NODE_STATE_DIR, &st) == 0 && S_ISDIR(st.st_mode)) dir = FK_NODE_STATE_DIR;
    if (!dir || !*dir) {
        fprintf(stderr, "fake-nvml: FAKE_NVML_STATE_DIR is not set and there is no " FK_NODE_STATE_DIR
                        ": no fake GPUs on this node\n");
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    snprintf(fk_dir, sizeof fk_dir, "%s", dir);
    if (stat(fk_dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return fk_refuse(NVML_ERROR_DRIVER_NOT_LOADED, NULL, "state directory does not exist");
    char path[PATH_MAX];
    fk_path(path, "lock");
    fk_lock_fd = open(path, O_RDWR | O_CLOEXEC);
    if (fk_lock_fd < 0 && errno == EROFS) fk_lock_fd = open(path, O_RDONLY | O_CLOEXEC); /* a read-only view */
    if (fk_lock_fd < 0)
        return fk_refuse(NVML_ERROR_LIB_RM_VERSION_MISMATCH, "lock", "missing: not a fake-nvml state directory");
    nvmlReturn_t rc = NVML_ERROR_UNKNOWN;
    if (flock(fk_lock_fd, LOCK_SH) == 0) {
        rc = fk_load_gpus();
        if (rc == NVML_SUCCESS) rc = fk_parse_mig(1);
        fk_state_unlock();
    }
    if (rc == NVML_SUCCESS) {
        fk_health_open();
        if (fk_device_nodes_present()) {
            fk_apply_device_nodes();
        } else {
            if (!fk_apply_device_visibility())
                fk_apply_visible(getenv("NVIDIA_VISIBLE_DEVICES"), 0);
            fk_apply_visible(getenv("CUDA_VISIBLE_DEVICES"), 1);
        }
    } else {
        close(fk_lock_fd);
        fk_lock_fd = -1;
    }
    return rc;
}

/* Flags are accepted but do not change the outcome: a state directory always lists at least one
 * GPU, and a view narrowed to no device (NVIDIA_VISIBLE_DEVICES=none) initializes with zero
 * devices with or without NVML_INIT_FLAG_NO_GPUS. */
FK_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    pthread_mutex_lock(&fk_mutex);
    nvmlReturn_t rc = NVML_SUCCESS;
    if (fk_refcount == 0) rc = fk_open_session();
    if (rc == NVML_SUCCESS) fk_refcount++;
    pthread_mutex_unlock(&fk_mutex);
    return rc;
}

FK_EXPORT nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
FK_EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

FK_EXPORT nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&fk_mutex);
    nvmlReturn_t rc = NVML_SUCCESS;
    if (fk_refcount == 0) {
        rc = NVML_ERROR_UNINITIALIZED;
    } else if (--fk_refcount == 0) {
        close(fk_lock_fd);
        fk_lock_fd = -1;
        fk_n_views = 0;
        fk_n_gpus = 0;
    }
    pthread_mutex_unlock(&fk_mutex);
    return rc;
}

/* The one non-NVML export: choose the state directory for the next nvmlInit (NULL: back to
 * FAKE_NVML_STATE_DIR). Lets one process visit many simulated nodes. IN_USE while initialized. */
FK_EXPORT nvmlReturn_t fakeNvmlSetStateDir(const char *dir) {
    pthread_mutex_lock(&fk_mutex);
    nvmlReturn_t rc = NVML_SUCCESS;
    if (fk_refcount > 0) {
        rc = NVML_ERROR_IN_USE;
    } else if (dir == NULL) {
        fk_have_override = 0;
    } else if (strlen(dir) >= sizeof fk_dir_override) {
        rc = NVML_ERROR_INVALID_ARGUMENT;
    } else {
        snprintf(fk_dir_override, sizeof fk_dir_override, "%s", dir);
        fk_have_override = 1;
    }
    pthread_mutex_unlock(&fk_mutex);
    return rc;
}

/* ---------------------------------------------------------------- error strings, system */

FK_EXPORT const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED: return "vGPU ECC not supported";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient resources";
    case NVML_ERROR_FREQ_NOT_SUPPORTED: return "Frequency not supported";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_DEPRECATED: return "Deprecated";
    case NVML_ERROR_NOT_READY: return "Not ready";
    case NVML_ERROR_GPU_NOT_FOUND: return "GPU not found";
    case NVML_ERROR_INVALID_STATE: return "Invalid state";
    case NVML_ERROR_RESET_TYPE_NOT_SUPPORTED: return "Reset type not supported";
    case NVML_ERROR_UNKNOWN: return "Unknown Error";
    default: return "Unknown Error";
    }
}

/* Copy a NUL-terminated string into a caller buffer of `length` bytes. */
void fk_copy_str(char *dst, const char *src, unsigned length, nvmlReturn_t *rc) {
    size_t n = strlen(src);
    if (n + 1 > length) {
        *rc = NVML_ERROR_INSUFFICIENT_SIZE;
        return;
    }
    memcpy(dst, src, n + 1);
    *rc = NVML_SUCCESS;
}

/* The first GPU's board supplies system-wide facts (one driver per node). */
static const fk_board *fk_system_board(void) {
    return fk_n_gpus ? fk_gpus[0].board : &fk_boards[0];
}

FK_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    if (!version) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    fk_copy_str(version, fk_system_board()->driver_version, length, &rc);
    return fk_leave(rc);
}

FK_EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    if (!version) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    /* Real NVML reports "<api major>.<driver version>", e.g. 13.580.95.05. */
    char buf[96];
    snprintf(buf, sizeof buf, "%d.%s", NVML_API_VERSION, fk_system_board()->driver_version);
    fk_copy_str(version, buf, length, &rc);
    return fk_leave(rc);
}

static nvmlReturn_t fk_cuda_version(int *v) {
    nvmlReturn_t rc = fk_enter();
    if (rc) return rc;
    if (!v) return fk_leave(NVML_ERROR_INVALID_ARGUMENT);
    *v = fk_system_board()->cuda_driver_version;
    return fk_leave(NVML_SUCCESS);
}

FK_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion) { return fk_cuda_version(cudaDriverVersion); }
FK_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion) { return fk_cuda_version(cudaDriverVersion); }
