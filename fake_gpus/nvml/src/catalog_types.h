/* Shapes of the board data that build.py generates from fake_gpus.catalog into catalog_data.h.
 * No board fact lives in the C sources: everything below is filled in by the generator. */
#ifndef FAKE_NVML_CATALOG_TYPES_H
#define FAKE_NVML_CATALOG_TYPES_H

#define FK_MAX_PLACEMENTS 16
#define FK_MAX_CI_PROFILES 16

typedef struct {
    unsigned nvml_profile;   /* NVML_COMPUTE_INSTANCE_PROFILE_* enum value */
    unsigned id;             /* profile id reported by NVML */
    const char *name;
    unsigned slice_count;    /* compute slices */
    unsigned multiprocessors;
} fk_ci_profile;

typedef struct {
    unsigned nvml_profile;   /* NVML_GPU_INSTANCE_PROFILE_* enum value */
    unsigned id;             /* profile id, e.g. 19 for 1g.10gb */
    const char *name;
    unsigned slice_count;    /* compute slices */
    unsigned memory_slices;  /* placement size in memory slices */
    unsigned long long memory_mib;
    unsigned multiprocessors, copy_engines, decoders, encoders, jpeg_engines, ofa_engines;
    unsigned max_instances;
    unsigned p2p_supported;
    unsigned n_placements;
    unsigned placements[FK_MAX_PLACEMENTS]; /* start memory slice of each placement */
    unsigned n_ci;
    fk_ci_profile ci[FK_MAX_CI_PROFILES];
    unsigned complete;       /* 0: some catalog fact is unknown; profile info answers NOT_SUPPORTED */
} fk_gi_profile;

typedef struct {
    const char *key;
    const char *product_name;
    unsigned long long memory_mib;
    unsigned pci_device_id, pci_subsystem_id;
    unsigned nvml_architecture, nvml_brand;
    int cc_major, cc_minor;
    const char *driver_version;
    int cuda_driver_version;
    unsigned multiprocessors;
    unsigned memory_slices;
    unsigned n_gi;
    const fk_gi_profile *gi;
} fk_board;

/* NVML's recovery action (nvmlDeviceGpuRecoveryAction_t) pending on a GPU after an Xid, from
 * fake_gpus/catalog/xids.py; an Xid the table lacks takes fk_xid_recovery_unlisted. */
typedef struct {
    unsigned xid;
    unsigned action;
} fk_xid_recovery;

#endif
