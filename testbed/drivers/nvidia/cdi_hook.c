/* nvidia-cdi-hook for dra-testbed nodes: the subcommands NVIDIA's CDI specs call, done as a container needs them.
 *
 * NVIDIA's DRA driver writes CDI specs whose createContainer hooks run `nvidia-cdi-hook <command> ...`
 * (the NVIDIA Container Toolkit's tool) on the node. The runtime runs a hook in the container's mount
 * namespace before it pivots into the root file system, with the container's OCI state on stdin; the
 * root file system is `root.path` of the bundle's config.json. Written for this project:
 *
 *   create-symlinks --link TARGET::LINK ...  make each LINK (a path inside the container) a symlink to
 *                                            TARGET, as the real hook does (libnvidia-ml.so.1 and .so);
 *   anything else (update-ldcache, enable-cuda-compat, disable-device-node-modification, ...): nothing
 *                                            to do here (the library sits in a default search directory,
 *                                            there is no CUDA, device nodes are never modified); exit 0.
 *
 * Errors go to stderr with exit 1, which fails the container's start as a failing real hook does.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int fail(const char *what, const char *detail) {
    fprintf(stderr, "nvidia-cdi-hook: %s: %s\n", what, detail);
    return 1;
}

/* Read all of `f` into a NUL-terminated buffer (NULL on failure). */
static char *slurp(FILE *f) {
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + len, 1, cap - len - 1, f);
        len += got;
        if (got == 0) break;
        if (len + 1 == cap) {
            char *bigger = realloc(buf, cap *= 2);
            if (!bigger) { free(buf); return NULL; }
            buf = bigger;
        }
    }
    if (buf) buf[len] = '\0';
    return buf;
}

/* The JSON string value after `"key":` at or after `from` (escapes \" \\ \/ only; paths need no more). */
static int json_string(const char *from, const char *key, char *out, size_t size) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\"", key);
    const char *p = strstr(from, pattern);
    if (!p) return -1;
    p += strlen(pattern);
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == ':') p++;
    if (*p++ != '"') return -1;
    size_t n = 0;
    for (; *p && *p != '"'; p++) {
        if (*p == '\\' && p[1]) p++;
        if (n + 1 >= size) return -1;
        out[n++] = *p;
    }
    out[n] = '\0';
    return *p == '"' ? 0 : -1;
}

/* The container's root file system on the node, from the OCI state on stdin and its bundle. */
static int container_root(char *out, size_t size) {
    char bundle[PATH_MAX], path[PATH_MAX + 16], root[PATH_MAX];
    char *state = slurp(stdin);
    if (!state || json_string(state, "bundle", bundle, sizeof bundle) != 0) {
        free(state);
        return fail("container state on stdin", "no \"bundle\"");
    }
    free(state);
    snprintf(path, sizeof path, "%s/config.json", bundle);
    FILE *f = fopen(path, "r");
    if (!f) return fail(path, strerror(errno));
    char *config = slurp(f);
    fclose(f);
    const char *section = config ? strstr(config, "\"root\"") : NULL;
    if (!section || json_string(section, "path", root, sizeof root) != 0) {
        free(config);
        return fail(path, "no root.path");
    }
    free(config);
    if (root[0] == '/') snprintf(out, size, "%s", root);
    else snprintf(out, size, "%s/%s", bundle, root);
    return 0;
}

static void make_parents(char *path) {
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        mkdir(path, 0755);
        *p = '/';
    }
}

static int create_symlinks(int argc, char **argv) {
    char root[PATH_MAX];
    if (container_root(root, sizeof root) != 0) return 1;
    for (int i = 0; i < argc; i++) {
        const char *spec = NULL;
        if (strcmp(argv[i], "--link") == 0 && i + 1 < argc) spec = argv[++i];
        else if (strncmp(argv[i], "--link=", 7) == 0) spec = argv[i] + 7;
        else continue;
        const char *sep = strstr(spec, "::");
        if (!sep || sep == spec || sep[2] != '/') return fail("--link", "want TARGET::/ABSOLUTE/LINK");
        char target[PATH_MAX], link[PATH_MAX * 2];
        snprintf(target, sizeof target, "%.*s", (int)(sep - spec), spec);
        snprintf(link, sizeof link, "%s%s", root, sep + 2);
        struct stat st;
        if (lstat(link, &st) == 0) continue; /* the image has it already: leave it, as the real hook does */
        make_parents(link);
        if (symlink(target, link) != 0) return fail(link, strerror(errno));
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return fail("usage", "nvidia-cdi-hook COMMAND [ARGS...]");
    if (strcmp(argv[1], "create-symlinks") == 0) return create_symlinks(argc - 2, argv + 2);
    return 0;
}
