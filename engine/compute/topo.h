/*
 * topo — the machine as hwloc sees it: packages, NUMA nodes, cores, PUs and where each NVIDIA GPU
 * sits; the division of the allowed cores among CPU devices; thread binding; `deltad info`.
 *
 * Only the cores this process may run on count (the cgroup cpuset and the affinity mask set by
 * taskset are both honoured). A "unit" is what one pool thread runs on: one PU per core by
 * default, every PU with TOPO_ALL_PUS.
 *
 * Threads: topo_create/topo_destroy on one thread; everything else takes a const topo and may be
 * called from any thread concurrently (hwloc allows concurrent readers).
 */
#ifndef DELTAD_TOPO_H
#define DELTAD_TOPO_H

#include <stdio.h>

typedef struct topo topo_t;

/* Split flags. */
enum {
    TOPO_ALL_PUS = 1u << 0, /* one unit per PU (SMT siblings too) instead of one per core */
};

/* Whole-machine counts; "allowed" ones are what this process may run on. */
typedef struct topo_counts {
    int packages, numa_nodes, cores, pus;
    int allowed_cores, allowed_pus;
} topo_counts;

/* The cores of one CPU device: unit i is where pool thread i runs. */
typedef struct topo_coreset {
    int n;    /* number of units (= threads of the device's pool) */
    int *pu;  /* [n] OS index of the PU unit i binds to; owned, see topo_coreset_deinit */
    int numa; /* OS index of the NUMA node holding every unit, or -1 (several / unknown) */
    const topo_t *topo; /* borrowed: the topology the set came from; must outlive the set */
} topo_coreset;

/* A placement: n_sets disjoint core sets, one per CPU device. */
typedef struct topo_plan {
    int n_sets;
    unsigned flags;     /* the split flags it was made with */
    topo_coreset *sets; /* [n_sets]; owned, see topo_plan_destroy */
} topo_plan;

/* One NVIDIA GPU found on the PCI bus. */
typedef struct topo_gpu {
    char busid[16]; /* "dddd:bb:dd.f", lower-case hex */
    char name[64];  /* model name when hwloc knows it, else "NVIDIA [10de:xxxx]" */
    int cuda_index; /* CUDA ordinal when hwloc's CUDA plugin named it ("cudaN"), else -1 */
    int numa;       /* OS index of the nearest NUMA node, or -1 (several / unknown) */
    char cpus[64];  /* allowed PUs near the GPU as a list ("0-15,32-47"); "" if unknown */
} topo_gpu;

/* ---- lifecycle ------------------------------------------------------------------------------- */

/* Discover this machine, I/O devices included. Returns NULL and writes err on failure.
 * Transferred: release with topo_destroy. */
topo_t *topo_create(char *err, size_t errcap);
/* Build a fake topology from an hwloc synthetic description ("pack:2 numa:2 core:4 pu:2") or,
 * when desc starts with '<', from an hwloc XML text. For tests and `deltad info --topo`; all of
 * it counts as allowed, and binding is a no-op returning DD_EUNSUPPORTED. IMPORTANT: trusted
 * input only; hwloc 2.9 crashes on XML that lacks the complete_cpuset/complete_nodeset attributes
 * (write it with lstopo or hwloc_topology_export_xml). */
topo_t *topo_create_fake(const char *desc, char *err, size_t errcap);
void topo_destroy(topo_t *t);

/* ---- queries --------------------------------------------------------------------------------- */

void topo_get_counts(const topo_t *t, topo_counts *out);
int topo_gpu_count(const topo_t *t);
/* Borrowed, valid while t lives; i in [0, topo_gpu_count). */
const topo_gpu *topo_gpu_get(const topo_t *t, int i);
/* Index of the GPU at a PCI bus id as cudaDeviceGetPCIBusId or nvidia-smi print it (any case,
 * 4- or 8-digit domain), or -1. */
int topo_gpu_find(const topo_t *t, const char *busid);

/* ---- placement ------------------------------------------------------------------------------- */

/* Divide the allowed units into n_sets disjoint, non-empty sets, NUMA-aware: with n_sets <= the
 * number of NUMA nodes each set gets whole nodes; otherwise every node gets at least one set and
 * a node's cores are split evenly (sizes may differ by one) among its sets. Fails with
 * DD_ERANGE and a message in err when n_sets exceeds the allowed units.
 * On success *out is transferred: release with topo_plan_destroy. */
int topo_split(const topo_t *t, int n_sets, unsigned flags, topo_plan **out, char *err,
               size_t errcap);
void topo_plan_destroy(topo_plan *p);

/* The allowed units near GPU i (all allowed units when its locality is unknown or contains no
 * allowed unit), for binding the GPU's host thread. Returns 0 or DD_ERANGE. out->pu is owned:
 * release with topo_coreset_deinit. */
int topo_coreset_init_gpu(const topo_t *t, int i, unsigned flags, topo_coreset *out);
void topo_coreset_deinit(topo_coreset *cs);

/* ---- binding --------------------------------------------------------------------------------- */

/* Bind the calling thread to unit i of cs (i wraps modulo cs->n). Returns 0, or a negative DD_*
 * code when the OS refused (the first refusal per process is logged as a warning; callers just
 * carry on unbound: containers may forbid binding). */
int topo_bind_unit(const topo_coreset *cs, int i);
/* Bind the calling thread to all units of cs at once (e.g. a device's host thread). Same
 * failure handling as topo_bind_unit. */
int topo_bind_set(const topo_coreset *cs);

/* ---- reporting ------------------------------------------------------------------------------- */

/* Print the machine summary, packages, NUMA nodes, GPUs and, when plan is non-NULL, the
 * placement, for `deltad info`. */
void topo_print(const topo_t *t, const topo_plan *plan, FILE *f);

#endif
