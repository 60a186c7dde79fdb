/* The nvidia-caps capability files of the node's MIG state, kept in step by the library itself.
 *
 * A real driver shows every GPU and compute instance as a file under /proc/driver/nvidia/capabilities
 * (gpu<minor>/mig/gi<G>/access, gpu<minor>/mig/gi<G>/ci<C>/access) naming the nvidia-caps minor of its
 * device node; NVIDIA's DRA driver reads them to put /dev/nvidia-caps/nvidia-cap<minor> into a CDI spec.
 * The fake writes the same tree under <state>/proc/driver/nvidia/capabilities whenever it stores MIG
 * state, so every NVML user that creates or destroys an instance leaves the files right; a process
 * sees them at /proc/driver once that directory is bind-mounted there (fake_gpus/machine).
 *
 * Minors follow nvidia-modprobe's fixed table (/proc/driver/nvidia-caps/mig-minors): config 1,
 * monitor 2, then per GPU minor 15 GPU instances of 1 + 8 compute instances each.
 * fake_gpus/nvml/capabilities.py writes the same tree from Python; the suites compare the two.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

#define FK_CAPS_DIR "proc/driver/nvidia/capabilities"
#define FK_CAPS_GI_PER_GPU 15
#define FK_CAPS_CI_PER_GI 8

unsigned fk_caps_minor(unsigned gpu_minor, unsigned gi, int ci) {
    unsigned base = 3 + gpu_minor * FK_CAPS_GI_PER_GPU * (1 + FK_CAPS_CI_PER_GI) + gi * (1 + FK_CAPS_CI_PER_GI);
    return ci < 0 ? base : base + 1 + (unsigned)ci;
}

static void fk_mkdirs(const char *path) {
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        mkdir(buf, 0755);
        *p = '/';
    }
    mkdir(buf, 0755);
}

/* Write the capability file `path` naming `minor`, atomically (readers never see half a file). */
static void fk_write_caps_file(const char *path, unsigned minor) {
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    fprintf(f, "DeviceFileMinor: %u\nDeviceFileMode: 292\nDeviceFileModify: 1\n", minor);
    if (fclose(f) != 0 || rename(tmp, path) != 0) unlink(tmp);
}

/* "<dir>/access" of a GPU or compute instance. */
static void fk_write_access(const char *dir, unsigned minor) {
    char path[PATH_MAX];
    fk_mkdirs(dir);
    snprintf(path, sizeof path, "%s/access", dir);
    fk_write_caps_file(path, minor);
}

/* Remove "<dir>/access" and, for a GPU instance, its ci* directories; then the directory. */
static void fk_remove_instance_dir(const char *dir) {
    char path[PATH_MAX];
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strncmp(e->d_name, "ci", 2) != 0) continue;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            fk_remove_instance_dir(path);
        }
        closedir(d);
    }
    snprintf(path, sizeof path, "%s/access", dir);
    unlink(path);
    rmdir(dir);
}

/* "gi12" -> 12; -1 for anything else. */
static int fk_instance_number(const char *name, const char *prefix) {
    size_t n = strlen(prefix);
    if (strncmp(name, prefix, n) != 0 || name[n] == '\0' || strspn(name + n, "0123456789") != strlen(name + n)) return -1;
    return atoi(name + n);
}

/* Drop files of instances that no longer exist under one GPU's mig directory. */
static void fk_prune(unsigned g, const char *mig_dir) {
    char gi_dir[PATH_MAX], ci_dir[PATH_MAX];
    DIR *d = opendir(mig_dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int gi = fk_instance_number(e->d_name, "gi");
        if (gi < 0) continue;
        snprintf(gi_dir, sizeof gi_dir, "%s/%s", mig_dir, e->d_name);
        if (!fk_find_gi(g, (unsigned)gi)) {
            fk_remove_instance_dir(gi_dir);
            continue;
        }
        DIR *c = opendir(gi_dir);
        if (!c) continue;
        struct dirent *ce;
        while ((ce = readdir(c)) != NULL) {
            int ci = fk_instance_number(ce->d_name, "ci");
            if (ci < 0 || fk_find_ci(g, (unsigned)gi, (unsigned)ci)) continue;
            snprintf(ci_dir, sizeof ci_dir, "%s/%s", gi_dir, ce->d_name);
            fk_remove_instance_dir(ci_dir);
        }
        closedir(c);
    }
    closedir(d);
}

/* Bring <state>/proc/driver/nvidia/capabilities in line with fk_mig; the caller holds LOCK_EX. */
void fk_caps_sync(const char *state_dir) {
    char base[PATH_MAX], dir[PATH_MAX + 64];
    snprintf(base, sizeof base, "%s/" FK_CAPS_DIR, state_dir);
    snprintf(dir, sizeof dir, "%s/mig", base);
    fk_mkdirs(dir);
    snprintf(dir, sizeof dir, "%s/mig/config", base);
    fk_write_caps_file(dir, 1);
    snprintf(dir, sizeof dir, "%s/mig/monitor", base);
    fk_write_caps_file(dir, 2);
    for (unsigned g = 0; g < fk_n_gpus; g++) {
        char mig_dir[PATH_MAX];
        unsigned minor = fk_gpus[g].minor;
        snprintf(mig_dir, sizeof mig_dir, "%s/gpu%u/mig", base, minor);
        fk_mkdirs(mig_dir);
        fk_prune(g, mig_dir);
        const fk_mig_gpu *m = &fk_mig[g];
        for (unsigned i = 0; i < m->n_gi; i++) {
            snprintf(dir, sizeof dir, "%s/gi%u", mig_dir, m->gi[i].id);
            fk_write_access(dir, fk_caps_minor(minor, m->gi[i].id, -1));
        }
        for (unsigned i = 0; i < m->n_ci; i++) {
            snprintf(dir, sizeof dir, "%s/gi%u/ci%u", mig_dir, m->ci[i].gi, m->ci[i].id);
            fk_write_access(dir, fk_caps_minor(minor, m->ci[i].gi, (int)m->ci[i].id));
        }
    }
}
