/*
 * topo — hwloc topology discovery, NUMA-aware core placement, thread binding, `deltad info`.
 *
 * What it is not: a scheduler. It decides once, at start-up, which cores each CPU device owns;
 * the thread pools (tpool.c) then pin one thread per unit and never move.
 *
 * Invariants:
 * - t->allowed is the PUs this process may run on: the topology's allowed cpuset (cgroups) AND
 *   the process affinity at creation (taskset). It is never empty.
 * - Units are listed core by core in hwloc's logical order, so a contiguous run of units shares
 *   caches; sets from topo_split are disjoint and every one is non-empty.
 * - A "group" is the allowed units of one NUMA node with cores; cores that belong to no node
 *   (rare) form one last group with numa = -1. Every allowed core is in exactly one group.
 *
 * Threads: creation and destruction on one thread; after that the topology is only read, which
 * hwloc allows from many threads at once. The one-time binding warning uses an atomic flag.
 */
#include "topo.h" // defines: topo_t, topo_coreset, topo_plan, topo_gpu

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <hwloc.h>

#include "engine/util.h" // defines: xmalloc, xcalloc, dd_errf, LOG_W, DD_* codes

struct topo {
    hwloc_topology_t h;
    hwloc_bitmap_t allowed; /* PUs this process may use; owned */
    hwloc_obj_type_t core;  /* HWLOC_OBJ_CORE, or HWLOC_OBJ_PU when hwloc reports no cores */
    int fake;               /* synthetic / XML topology: never bind */
    int n_gpus;
    topo_gpu *gpus;            /* [n_gpus]; owned */
    hwloc_bitmap_t *gpu_local; /* [n_gpus] allowed PUs near each GPU (may be empty); owned */
};

/* The allowed units of one NUMA node (or of the node-less cores), in core order. It is the
 * indivisible block of placement when there are fewer devices than nodes, and the pool that is
 * cut into contiguous runs when there are more. */
typedef struct group {
    int numa; /* OS index of the node, -1 for the node-less cores */
    int n;    /* units in pu */
    int *pu;  /* [n] PU OS indexes; owned by the group array, see groups_free */
} group;

/* PCI vendor id of NVIDIA; every CUDA device carries it. */
#define NVIDIA_VENDOR 0x10de

static const char *plural(int n, const char *one, const char *many)
{
    return n == 1 ? one : many;
}

/* ================================================================================================
 * Discovery
 * ============================================================================================== */

/* Intersect the cgroup-allowed PUs with the process affinity (taskset); fake topologies keep
 * every PU. hwloc already drops PUs a cgroup forbids, but knows nothing of sched_setaffinity
 * masks, so ask for the process binding too. It is the union over the process's threads, which
 * at start-up (before any binding) is the mask the process was launched with.
 * Returns 0 or DD_EUNSUPPORTED when nothing is left. */
static int compute_allowed(topo_t *t)
{
    t->allowed = hwloc_bitmap_dup(hwloc_topology_get_allowed_cpuset(t->h));
    hwloc_bitmap_and(t->allowed, t->allowed, hwloc_topology_get_topology_cpuset(t->h));
    if (!t->fake) {
        hwloc_bitmap_t bound = hwloc_bitmap_alloc();
        if (hwloc_get_cpubind(t->h, bound, HWLOC_CPUBIND_PROCESS) == 0 &&
            !hwloc_bitmap_iszero(bound))
            hwloc_bitmap_and(t->allowed, t->allowed, bound);
        hwloc_bitmap_free(bound);
    }
    return hwloc_bitmap_iszero(t->allowed) ? DD_EUNSUPPORTED : 0;
}

/* Fill g->name and g->cuda_index from the OS devices hwloc attached under the PCI device.
 * hwloc's CUDA/NVML plugins (absent from most distribution builds) add "cudaN" / "nvmlN" OS
 * devices with a GPUModel; without them the PCI ids are all there is. */
static void gpu_describe(hwloc_obj_t pci, topo_gpu *g)
{
    const char *model = NULL;
    for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling) {
        if (c->type != HWLOC_OBJ_OS_DEVICE || !c->name)
            continue;
        if (!model)
            model = hwloc_obj_get_info_by_name(c, "GPUModel");
        if (strncmp(c->name, "cuda", 4) == 0 && c->name[4] >= '0' && c->name[4] <= '9')
            g->cuda_index = atoi(c->name + 4);
    }
    if (!model)
        model = hwloc_obj_get_info_by_name(pci, "PCIDevice");
    if (model)
        snprintf(g->name, sizeof g->name, "%s", model);
    else
        snprintf(g->name, sizeof g->name, "NVIDIA [10de:%04x]", pci->attr->pcidev.device_id);
}

static int is_nvidia_gpu(hwloc_obj_t pci)
{
    /* PCI class 0x03xx: display controllers (VGA 0x0300, 3D 0x0302); NVSwitches are 0x0680. */
    return pci->attr->pcidev.vendor_id == NVIDIA_VENDOR &&
           (pci->attr->pcidev.class_id >> 8) == 0x03;
}

/* Record one GPU: bus id, name, nearest NUMA node, nearby allowed PUs. */
static void gpu_add(topo_t *t, hwloc_obj_t pci)
{
    topo_gpu *g = &t->gpus[t->n_gpus];
    const struct hwloc_pcidev_attr_s *a = &pci->attr->pcidev;
    snprintf(g->busid, sizeof g->busid, "%04x:%02x:%02x.%x", (unsigned)a->domain, a->bus, a->dev,
             a->func);
    g->cuda_index = -1;
    gpu_describe(pci, g);
    /* The first non-I/O ancestor (a package, group or the machine) is what hwloc knows of the
     * GPU's locality; a single node in its nodeset is the GPU's NUMA node. */
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t->h, pci);
    g->numa = -1;
    if (anc->nodeset && hwloc_bitmap_weight(anc->nodeset) == 1)
        g->numa = hwloc_bitmap_first(anc->nodeset);
    hwloc_bitmap_t near = hwloc_bitmap_alloc();
    hwloc_bitmap_and(near, anc->cpuset, t->allowed);
    hwloc_bitmap_list_snprintf(g->cpus, sizeof g->cpus, near);
    t->gpu_local[t->n_gpus++] = near;
}

static void discover_gpus(topo_t *t)
{
    int n = 0;
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_pcidev(t->h, o));)
        n += is_nvidia_gpu(o);
    if (n == 0)
        return;
    t->gpus = xcalloc((size_t)n, sizeof *t->gpus);
    t->gpu_local = xcalloc((size_t)n, sizeof *t->gpu_local);
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_pcidev(t->h, o));)
        if (is_nvidia_gpu(o))
            gpu_add(t, o);
}

/* Load the topology prepared in t->h and derive everything else. desc names the source. */
static topo_t *finish_load(topo_t *t, const char *desc, char *err, size_t errcap)
{
    if (hwloc_topology_load(t->h) != 0) {
        dd_errf(err, errcap, "hwloc could not load the %s topology: %s", desc, strerror(errno));
        goto fail;
    }
    if (compute_allowed(t) != 0) {
        dd_errf(err, errcap, "no CPU of the %s topology is allowed for this process", desc);
        goto fail;
    }
    t->core = hwloc_get_nbobjs_by_type(t->h, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
    discover_gpus(t);
    return t;
fail:
    topo_destroy(t);
    return NULL;
}

/* A fresh topo with an initialised hwloc handle that also keeps PCI/OS devices of interest. */
static topo_t *topo_alloc(void)
{
    topo_t *t = xcalloc(1, sizeof *t);
    if (hwloc_topology_init(&t->h) != 0) {
        free(t);
        return NULL;
    }
    hwloc_topology_set_io_types_filter(t->h, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    /* The Linux backend finds PCI devices in sysfs by itself. The libpciaccess plugin would add
     * only names, and leaks ~1 KiB per load (LeakSanitizer fails every test); the OpenCL and GL
     * plugins can load GPU drivers, which is slow and may create device contexts. */
    static const char *const skip[] = {"pci", "opencl", "gl"};
    for (size_t i = 0; i < sizeof skip / sizeof *skip; i++)
        hwloc_topology_set_components(t->h, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, skip[i]);
    return t;
}

topo_t *topo_create(char *err, size_t errcap)
{
    topo_t *t = topo_alloc();
    if (!t) {
        dd_errf(err, errcap, "hwloc_topology_init failed");
        return NULL;
    }
    return finish_load(t, "machine", err, errcap);
}

topo_t *topo_create_fake(const char *desc, char *err, size_t errcap)
{
    topo_t *t = topo_alloc();
    if (!t) {
        dd_errf(err, errcap, "hwloc_topology_init failed");
        return NULL;
    }
    t->fake = 1;
    int rc = desc[0] == '<' ? hwloc_topology_set_xmlbuffer(t->h, desc, (int)strlen(desc) + 1)
                            : hwloc_topology_set_synthetic(t->h, desc);
    if (rc != 0) {
        dd_errf(err, errcap, "invalid hwloc %s topology description \"%.60s\"",
                desc[0] == '<' ? "XML" : "synthetic", desc);
        topo_destroy(t);
        return NULL;
    }
    return finish_load(t, desc[0] == '<' ? "XML" : "synthetic", err, errcap);
}

void topo_destroy(topo_t *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->n_gpus; i++)
        hwloc_bitmap_free(t->gpu_local[i]);
    free(t->gpu_local);
    free(t->gpus);
    hwloc_bitmap_free(t->allowed);
    hwloc_topology_destroy(t->h);
    free(t);
}

/* ================================================================================================
 * Queries
 * ============================================================================================== */

/* Cores (or PUs) whose cpuset lies inside `within`; only those with an allowed PU if asked. */
static int count_cores(const topo_t *t, hwloc_const_cpuset_t within, int allowed_only)
{
    int n = 0;
    for (hwloc_obj_t c = NULL; (c = hwloc_get_next_obj_by_type(t->h, t->core, c));) {
        if (!hwloc_bitmap_isincluded(c->cpuset, within))
            continue;
        n += !allowed_only || hwloc_bitmap_intersects(c->cpuset, t->allowed);
    }
    return n;
}

void topo_get_counts(const topo_t *t, topo_counts *out)
{
    hwloc_const_cpuset_t all = hwloc_topology_get_topology_cpuset(t->h);
    out->packages = hwloc_get_nbobjs_by_type(t->h, HWLOC_OBJ_PACKAGE);
    out->numa_nodes = hwloc_get_nbobjs_by_type(t->h, HWLOC_OBJ_NUMANODE);
    out->pus = hwloc_get_nbobjs_by_type(t->h, HWLOC_OBJ_PU);
    out->cores = count_cores(t, all, 0);
    out->allowed_cores = count_cores(t, all, 1);
    out->allowed_pus = hwloc_bitmap_weight(t->allowed);
}

int topo_gpu_count(const topo_t *t)
{
    return t->n_gpus;
}

const topo_gpu *topo_gpu_get(const topo_t *t, int i)
{
    ASSERT(i >= 0 && i < t->n_gpus);
    return &t->gpus[i];
}

/* Parse "domain:bus:dev.func" (hex) into one comparable number; -1 if malformed. Numbers, not
 * strings, because CUDA prints "0000:3B:00.0" and nvidia-smi "00000000:3B:00.0". */
static int64_t busid_key(const char *s)
{
    unsigned dom, bus, dev, fn;
    if (sscanf(s, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) != 4 || bus > 0xff || dev > 0x1f || fn > 7)
        return -1;
    return ((int64_t)dom << 16) | (bus << 8) | (dev << 3) | fn;
}

int topo_gpu_find(const topo_t *t, const char *busid)
{
    int64_t key = busid_key(busid);
    for (int i = 0; key >= 0 && i < t->n_gpus; i++)
        if (busid_key(t->gpus[i].busid) == key)
            return i;
    return -1;
}

/* ================================================================================================
 * Placement
 *
 * 1. Collect groups: per NUMA node, its allowed units (one PU per core, or every PU), cores in
 *    logical order so that a contiguous run of units shares caches.
 * 2. n_sets <= groups: hand out whole groups, contiguous in node order (sets may differ in size;
 *    a set that spans nodes has numa = -1).
 * 3. n_sets > groups: every group gets one set, each extra set goes to the group with the most
 *    units per set, and each group is cut into that many contiguous runs.
 * ============================================================================================== */

/* Append to g the allowed units of the not-yet-taken cores inside `within`, marking them taken
 * (by logical index). g->pu must have room for every PU of the machine. */
static void collect_units(const topo_t *t, hwloc_const_cpuset_t within, unsigned flags,
                          hwloc_bitmap_t taken, group *g)
{
    hwloc_bitmap_t usable = hwloc_bitmap_alloc();
    for (hwloc_obj_t c = NULL; (c = hwloc_get_next_obj_by_type(t->h, t->core, c));) {
        if (hwloc_bitmap_isset(taken, c->logical_index) ||
            !hwloc_bitmap_isincluded(c->cpuset, within))
            continue;
        hwloc_bitmap_and(usable, c->cpuset, t->allowed);
        if (hwloc_bitmap_iszero(usable))
            continue;
        hwloc_bitmap_set(taken, c->logical_index);
        if (!(flags & TOPO_ALL_PUS)) {
            g->pu[g->n++] = hwloc_bitmap_first(usable);
            continue;
        }
        int pu;
        hwloc_bitmap_foreach_begin(pu, usable)
        {
            g->pu[g->n++] = pu;
        }
        hwloc_bitmap_foreach_end();
    }
    hwloc_bitmap_free(usable);
}

/* Build the groups: one per NUMA node that has allowed cores, then one for node-less cores.
 * Returns the count; *out is transferred (groups_free). */
static int collect_groups(const topo_t *t, unsigned flags, group **out)
{
    int n_nodes = hwloc_get_nbobjs_by_type(t->h, HWLOC_OBJ_NUMANODE);
    int n_pus = hwloc_get_nbobjs_by_type(t->h, HWLOC_OBJ_PU);
    group *gs = xcalloc((size_t)n_nodes + 1, sizeof *gs);
    hwloc_bitmap_t taken = hwloc_bitmap_alloc();
    int n = 0;
    /* i == n_nodes is the pass that sweeps up cores no node claimed. */
    for (int i = 0; i <= n_nodes; i++) {
        hwloc_obj_t node = i < n_nodes ? hwloc_get_obj_by_type(t->h, HWLOC_OBJ_NUMANODE, i) : NULL;
        group *g = &gs[n];
        g->pu = xmalloc((size_t)n_pus * sizeof *g->pu);
        g->numa = node ? (int)node->os_index : -1;
        collect_units(t, node ? node->cpuset : hwloc_topology_get_topology_cpuset(t->h), flags,
                      taken, g);
        if (g->n > 0)
            n++;
        else
            free(g->pu);
    }
    hwloc_bitmap_free(taken);
    *out = gs;
    return n;
}

static void groups_free(group *gs, int n)
{
    for (int i = 0; i < n; i++)
        free(gs[i].pu);
    free(gs);
}

/* Devices per group when there are more devices than groups: one each, then every extra device
 * goes to the group with the most units per device (that still has a unit to spare). */
static void devices_per_group(const group *gs, int n_groups, int n_sets, int *per)
{
    for (int g = 0; g < n_groups; g++)
        per[g] = 1;
    for (int left = n_sets - n_groups; left > 0; left--) {
        int best = -1;
        for (int g = 0; g < n_groups; g++) {
            if (per[g] >= gs[g].n)
                continue;
            /* gs[g].n / per[g] > gs[best].n / per[best], without division. */
            if (best < 0 || (int64_t)gs[g].n * per[best] > (int64_t)gs[best].n * per[g])
                best = g;
        }
        ASSERT(best >= 0); /* n_sets <= total units guarantees a spare unit somewhere */
        per[best]++;
    }
}

/* Copy units [lo, hi) of g onto the end of cs. cs->pu must have room. A set keeps the group's
 * NUMA node while it holds units of that group only. */
static void set_append(topo_coreset *cs, const group *g, int lo, int hi)
{
    memcpy(cs->pu + cs->n, g->pu + lo, (size_t)(hi - lo) * sizeof *cs->pu);
    cs->n += hi - lo;
    cs->numa = cs->n == hi - lo ? g->numa : -1;
}

/* n_sets <= n_groups: set i takes whole groups [i*G/n, (i+1)*G/n). */
static void assign_whole_groups(const group *gs, int n_groups, topo_plan *p)
{
    for (int i = 0; i < p->n_sets; i++) {
        int g0 = (int)((int64_t)i * n_groups / p->n_sets);
        int g1 = (int)((int64_t)(i + 1) * n_groups / p->n_sets);
        for (int g = g0; g < g1; g++)
            set_append(&p->sets[i], &gs[g], 0, gs[g].n);
    }
}

/* n_sets > n_groups: each group's units are split evenly among the sets it was given. */
static void assign_split_groups(const group *gs, int n_groups, topo_plan *p)
{
    int *per = xmalloc((size_t)n_groups * sizeof *per);
    devices_per_group(gs, n_groups, p->n_sets, per);
    int s = 0; /* sets are numbered in node order, so a node's sets are neighbours */
    for (int g = 0; g < n_groups; g++) {
        for (int k = 0; k < per[g]; k++, s++) {
            int lo = (int)((int64_t)k * gs[g].n / per[g]);
            int hi = (int)((int64_t)(k + 1) * gs[g].n / per[g]);
            set_append(&p->sets[s], &gs[g], lo, hi);
        }
    }
    free(per);
}

/* An empty plan of n sets, each with room for every unit. */
static topo_plan *plan_alloc(const topo_t *t, int n, unsigned flags, int room)
{
    topo_plan *p = xcalloc(1, sizeof *p);
    p->n_sets = n;
    p->flags = flags;
    p->sets = xcalloc((size_t)n, sizeof *p->sets);
    for (int i = 0; i < n; i++) {
        p->sets[i].pu = xmalloc((size_t)room * sizeof *p->sets[i].pu);
        p->sets[i].numa = -1;
        p->sets[i].topo = t;
    }
    return p;
}

int topo_split(const topo_t *t, int n_sets, unsigned flags, topo_plan **out, char *err,
               size_t errcap)
{
    group *gs = NULL;
    int n_groups = collect_groups(t, flags, &gs);
    int total = 0, rc = 0;
    for (int g = 0; g < n_groups; g++)
        total += gs[g].n;
    *out = NULL;
    if (n_sets < 1 || n_sets > total) {
        char pus[64];
        hwloc_bitmap_list_snprintf(pus, sizeof pus, t->allowed);
        dd_errf(err, errcap,
                "cannot place %d CPU device(s) on %d allowed %s (PUs %s); HINT: use between 1 "
                "and %d devices, or widen the CPU set (taskset / cgroup cpuset)",
                n_sets, total,
                (flags & TOPO_ALL_PUS) ? plural(total, "PU", "PUs")
                                       : plural(total, "core", "cores"),
                pus, total);
        rc = n_sets < 1 ? DD_EINVAL : DD_ERANGE;
        goto out;
    }
    *out = plan_alloc(t, n_sets, flags, total);
    if (n_sets <= n_groups)
        assign_whole_groups(gs, n_groups, *out);
    else
        assign_split_groups(gs, n_groups, *out);
out:
    groups_free(gs, n_groups);
    return rc;
}

void topo_coreset_deinit(topo_coreset *cs)
{
    free(cs->pu);
    cs->pu = NULL;
    cs->n = 0;
}

void topo_plan_destroy(topo_plan *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->n_sets; i++)
        topo_coreset_deinit(&p->sets[i]);
    free(p->sets);
    free(p);
}

int topo_coreset_init_gpu(const topo_t *t, int i, unsigned flags, topo_coreset *out)
{
    if (i < 0 || i >= t->n_gpus)
        return DD_ERANGE;
    /* Collect into a group sized for the whole machine, then hand its array over to out. */
    int n_pus = hwloc_get_nbobjs_by_type(t->h, HWLOC_OBJ_PU);
    group g = {.numa = t->gpus[i].numa, .pu = xmalloc((size_t)n_pus * sizeof(int))};
    hwloc_bitmap_t taken = hwloc_bitmap_alloc();
    collect_units(t, t->gpu_local[i], flags, taken, &g);
    if (g.n == 0) { /* locality unknown or entirely disallowed: use every allowed unit */
        g.numa = -1;
        collect_units(t, hwloc_topology_get_topology_cpuset(t->h), flags, taken, &g);
    }
    hwloc_bitmap_free(taken);
    *out = (topo_coreset){.n = g.n, .pu = g.pu, .numa = g.numa, .topo = t};
    return 0;
}

/* ================================================================================================
 * Binding
 * ============================================================================================== */

/* Process-wide: the binding refusal is the same for every thread, so say it once. */
static atomic_flag bind_warned = ATOMIC_FLAG_INIT;

/* Bind the calling thread to `set`; on refusal warn once per process and report. Containers
 * (seccomp, restricted cpusets) and some VMs refuse; the pools still work, only slower. */
static int bind_thread(const topo_t *t, hwloc_const_cpuset_t set)
{
    if (t->fake)
        return DD_EUNSUPPORTED;
    if (hwloc_set_cpubind(t->h, set, HWLOC_CPUBIND_THREAD) == 0)
        return 0;
    int e = errno;
    if (!atomic_flag_test_and_set(&bind_warned)) {
        char buf[128], pus[64];
        hwloc_bitmap_list_snprintf(pus, sizeof pus, set);
        LOG_W("cannot bind a thread to PUs %s (%s); continuing unbound, expect lower and noisier "
              "throughput",
              pus, strerror_r(e, buf, sizeof buf));
    }
    return DD_EUNSUPPORTED;
}

int topo_bind_unit(const topo_coreset *cs, int i)
{
    ASSERT(cs->n > 0 && i >= 0);
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    hwloc_bitmap_only(set, (unsigned)cs->pu[i % cs->n]);
    int rc = bind_thread(cs->topo, set);
    hwloc_bitmap_free(set);
    return rc;
}

/* The PUs of cs as a bitmap; transferred (hwloc_bitmap_free). */
static hwloc_bitmap_t coreset_bitmap(const topo_coreset *cs)
{
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    for (int i = 0; i < cs->n; i++)
        hwloc_bitmap_set(set, (unsigned)cs->pu[i]);
    return set;
}

int topo_bind_set(const topo_coreset *cs)
{
    ASSERT(cs->n > 0);
    hwloc_bitmap_t set = coreset_bitmap(cs);
    int rc = bind_thread(cs->topo, set);
    hwloc_bitmap_free(set);
    return rc;
}

/* ================================================================================================
 * Reporting
 * ============================================================================================== */

/* Machine line: architecture, host, counts, the allowed PUs. */
static void print_machine(const topo_t *t, FILE *f)
{
    topo_counts c;
    char pus[128];
    topo_get_counts(t, &c);
    hwloc_obj_t root = hwloc_get_root_obj(t->h);
    const char *arch = hwloc_obj_get_info_by_name(root, "Architecture");
    const char *host = hwloc_obj_get_info_by_name(root, "HostName");
    hwloc_bitmap_list_snprintf(pus, sizeof pus, t->allowed);
    fprintf(f, "machine: %s%s%s%s, %d %s, %d NUMA %s, %d %s, %d %s\n", arch ? arch : "",
            arch ? ", " : "", host ? "host " : "", host ? host : (t->fake ? "fake" : "?"),
            c.packages, plural(c.packages, "package", "packages"), c.numa_nodes,
            plural(c.numa_nodes, "node", "nodes"), c.cores, plural(c.cores, "core", "cores"), c.pus,
            plural(c.pus, "PU", "PUs"));
    fprintf(f, "allowed: %d %s, %d %s (%s)\n", c.allowed_cores,
            plural(c.allowed_cores, "core", "cores"), c.allowed_pus,
            plural(c.allowed_pus, "PU", "PUs"), pus);
}

/* Copy s into buf without trailing blanks (hwloc's CPUModel is padded). */
static const char *trimmed(const char *s, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", s ? s : "");
    size_t n = strlen(buf);
    while (n > 0 && buf[n - 1] == ' ')
        buf[--n] = '\0';
    return buf;
}

/* One line per package: CPU model, cores (all / allowed), PUs. */
static void print_packages(const topo_t *t, FILE *f)
{
    for (hwloc_obj_t p = NULL; (p = hwloc_get_next_obj_by_type(t->h, HWLOC_OBJ_PACKAGE, p));) {
        char model[96], pus[128];
        trimmed(hwloc_obj_get_info_by_name(p, "CPUModel"), model, sizeof model);
        hwloc_bitmap_list_snprintf(pus, sizeof pus, p->cpuset);
        fprintf(f, "package %u: %s%s%d cores (%d allowed), PUs %s\n", p->os_index, model,
                model[0] ? ", " : "", count_cores(t, p->cpuset, 0), count_cores(t, p->cpuset, 1),
                pus);
    }
}

/* One line per NUMA node: cores (all / allowed), PUs, local memory. Memory-only nodes (CXL,
 * HBM) show 0 cores. */
static void print_numa(const topo_t *t, FILE *f)
{
    for (hwloc_obj_t n = NULL; (n = hwloc_get_next_obj_by_type(t->h, HWLOC_OBJ_NUMANODE, n));) {
        char pus[128];
        hwloc_bitmap_list_snprintf(pus, sizeof pus, n->cpuset);
        fprintf(f, "numa %u: %d cores (%d allowed), PUs %s, %.1f GiB\n", n->os_index,
                count_cores(t, n->cpuset, 0), count_cores(t, n->cpuset, 1), pus,
                (double)n->attr->numanode.local_memory / (1024.0 * 1024.0 * 1024.0));
    }
}

/* One line per NVIDIA GPU: bus id, name, CUDA ordinal when known, NUMA node, nearby PUs. */
static void print_gpus(const topo_t *t, FILE *f)
{
    if (t->n_gpus == 0)
        fprintf(f, "gpus: none found by hwloc\n");
    for (int i = 0; i < t->n_gpus; i++) {
        const topo_gpu *g = &t->gpus[i];
        fprintf(f, "gpu %d: %s %s", i, g->busid, g->name);
        if (g->cuda_index >= 0)
            fprintf(f, ", cuda%d", g->cuda_index);
        if (g->numa >= 0)
            fprintf(f, ", numa %d", g->numa);
        fprintf(f, ", near PUs %s\n", g->cpus[0] ? g->cpus : "(unknown)");
    }
}

/* The placement: per CPU device, its thread count, NUMA node and PUs. */
static void print_plan(const topo_plan *p, FILE *f)
{
    fprintf(f, "placement: %d CPU %s, one thread per %s\n", p->n_sets,
            plural(p->n_sets, "device", "devices"), (p->flags & TOPO_ALL_PUS) ? "PU" : "core");
    for (int i = 0; i < p->n_sets; i++) {
        const topo_coreset *cs = &p->sets[i];
        char pus[128], numa[16] = "mixed";
        hwloc_bitmap_t set = coreset_bitmap(cs);
        hwloc_bitmap_list_snprintf(pus, sizeof pus, set);
        hwloc_bitmap_free(set);
        if (cs->numa >= 0)
            snprintf(numa, sizeof numa, "%d", cs->numa);
        fprintf(f, "  device %d: %d %s, numa %s, PUs %s\n", i, cs->n,
                plural(cs->n, "thread", "threads"), numa, pus);
    }
}

void topo_print(const topo_t *t, const topo_plan *plan, FILE *f)
{
    print_machine(t, f);
    print_packages(t, f);
    print_numa(t, f);
    print_gpus(t, f);
    if (plan)
        print_plan(plan, f);
}
