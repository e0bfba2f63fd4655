/*
 * pcache — the RAM and disk tiers of the prompt cache (contract in pcache.h).
 *
 * RAM: an array of entries; the least recently used (smallest `used`) goes first when the sum
 * of their bytes passes ram_max. Disk: an index (hash, pos, bytes, mtime) of the valid files
 * found at start and written since; a file is read whole and checked (header, geometry,
 * checksum, tokens) only when a request wants it. With disk_max, the oldest mtime goes first.
 *
 * The writer thread: a FIFO of jobs (write an entry, delete a file) under wmu. The engine
 * thread queues them; the writer runs them in order and lists the files it finished in
 * `done`, which the engine thread moves into the index (pcache_poll), so the index is the
 * engine thread's alone and never names a file still being written. An entry in the queue
 * holds a reference (refs), so the RAM tier may drop it meanwhile.
 *
 * File layout (native byte order; the format version changes with it):
 *   struct file_hdr | tokens int32 [pos] | state f32 [state_floats] | h f32 [h_floats] |
 *   kv f32 [pos * kv_floats]
 * with hdr.sum the checksum of everything after the header.
 *
 * Memory: entries are mapped when saved or read (bounded by ram_max, plus the entries waiting
 * in the write queue; a failed allocation just means the prefix is not kept; STYLE rule 12's
 * "no malloc in the step" does not hold for the tiers, whose size is the point). Threads: the
 * engine thread, but pcache_get_stats; the writer as above.
 */
#include "pcache.h" // defines: pcache_*

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/util.h" // defines: xcalloc, xrealloc, xstrdup, LOG_W, LOG_I, dd_errf, DD_EIO

#define FILE_MAGIC "DDPCACHE"
#define FILE_VERSION 1u
#define FILE_EXT ".dpc"

struct file_hdr {
    char magic[8];
    uint32_t version, hdr_bytes;
    struct pcache_geom geom;
    uint64_t hash; /* of the tokens */
    int64_t pos;
    uint64_t sum; /* checksum of the body */
};

struct disk_ent {
    uint64_t hash;
    int64_t pos;
    int64_t bytes; /* of the file */
    int64_t mtime; /* ns since the epoch: its write or last read (the LRU order) */
};

/* A job of the writer thread. */
enum wjob_kind { WJOB_WRITE, WJOB_UNLINK };
struct wjob {
    struct wjob *next;
    enum wjob_kind kind;
    struct pcache_entry *e; /* WRITE: a reference the writer releases */
    uint64_t hash;          /* UNLINK: the file's */
};

struct pcache {
    struct pcache_params p;
    char *dir; /* owned copy, NULL = no disk tier */
    /* RAM tier */
    struct pcache_entry **ram; /* [n_ram] */
    int64_t n_ram, cap_ram;
    size_t ram_bytes;
    uint64_t clock;
    struct pcache_entry *scratch; /* a loaded entry that did not fit the RAM tier */
    /* disk tier: the index (engine thread) */
    struct disk_ent *disk; /* [n_disk] */
    int64_t n_disk, cap_disk;
    int64_t disk_bytes;
    struct disk_ent *applied; /* [cap_applied] pcache_poll's copy of `done` */
    int64_t cap_applied;
    /* the writer thread; everything below up to the counters is guarded by wmu */
    pthread_t writer;
    bool writer_on;
    pthread_mutex_t wmu;
    pthread_cond_t wcv;    /* to the writer: a job or stop */
    pthread_cond_t idlecv; /* from the writer: a job finished */
    struct wjob *q_head, *q_tail;
    int64_t q_writes; /* WRITE jobs queued or running (at most PCACHE_QUEUE_MAX) */
    int64_t q_jobs;   /* all jobs queued or running */
    bool q_stop;
    struct disk_ent *done; /* [n_done] files written, not yet in the index */
    int64_t n_done, cap_done;
    bool warned_write; /* the writer thread's */
    atomic_llong st_ram_bytes, st_ram_entries, st_disk_entries, st_evictions;
    atomic_llong st_writes, st_write_errors, st_reads, st_rejected;
    atomic_llong st_disk_bytes, st_disk_evictions, st_skipped;
};

/* ============================================================================================
 * Hashes
 * ========================================================================================== */

uint64_t pcache_hash_step(uint64_t h, int32_t tok)
{
    uint32_t t = (uint32_t)tok;
    for (int i = 0; i < 4; i++) {
        h ^= (t >> (8 * i)) & 0xffu;
        h *= 0x100000001b3ull; /* FNV-1a over the token's four bytes */
    }
    return h;
}

uint64_t pcache_hash(const int32_t *tok, int64_t n)
{
    uint64_t h = PCACHE_HASH0;
    for (int64_t i = 0; i < n; i++)
        h = pcache_hash_step(h, tok[i]);
    return h;
}

/* A checksum of n bytes, 8 at a time (fast enough for files of hundreds of MiB). */
static uint64_t checksum(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (; n >= 8; n -= 8, b += 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        h = (h ^ w) * 0x9e3779b97f4a7c15ull;
        h ^= h >> 29;
    }
    for (; n; n--, b++)
        h = (h ^ *b) * 0x100000001b3ull;
    return h;
}

uint64_t pcache_model_id(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    uint64_t h = checksum(PCACHE_HASH0, &st.st_size, sizeof st.st_size);
    const size_t head = 1 << 20;
    char *buf = xmalloc(head);
    ssize_t got = pread(fd, buf, head, 0);
    h = checksum(h, buf, got > 0 ? (size_t)got : 0);
    for (int i = 1; i <= 64 && st.st_size > (off_t)head; i++) { /* 64 blocks of 4 KiB */
        off_t at = (off_t)((double)(st.st_size - 4096) * i / 64.0);
        got = pread(fd, buf, 4096, at);
        h = checksum(h, buf, got > 0 ? (size_t)got : 0);
    }
    free(buf);
    close(fd);
    return h ? h : 1;
}

/* ============================================================================================
 * Entries and the RAM tier
 * ========================================================================================== */

static size_t entry_bytes(const struct pcache_geom *g, int64_t pos)
{
    return sizeof(struct pcache_entry) + 64 + (size_t)pos * sizeof(int32_t) +
           (g->state_floats + g->h_floats + (size_t)pos * g->kv_floats) * sizeof(float);
}

/* An entry with its arrays carved, their contents undefined. Mapped pages of its own, not
 * malloc: entries come and go in all sizes, and unmapping gives every byte back, so the
 * process's memory follows the RAM tier's count (the load test checks it). NULL when the
 * memory is not there: the prefix is then just not kept. (Huge pages were tried: filling an
 * entry took a fifth of the time on an idle machine, but the first touch of a 2 MiB page
 * stalled up to 100 ms in direct compaction on a loaded one.) */
static struct pcache_entry *entry_alloc(const struct pcache_geom *g, int64_t pos)
{
    const size_t page = 4096, bytes = (entry_bytes(g, pos) + page - 1) / page * page;
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    struct pcache_entry *e = m;
    memset(e, 0, sizeof *e);
    e->pos = pos;
    e->bytes = bytes;
    atomic_init(&e->refs, 1);
    char *p = (char *)(e + 1);
    p += (64 - (uintptr_t)p % 64) % 64;
    e->state = (float *)p;
    e->h = e->state + g->state_floats;
    e->kv = e->h + g->h_floats;
    e->tokens = (int32_t *)(e->kv + (size_t)pos * g->kv_floats);
    return e;
}

/* Drop one reference (any thread); the last unmaps. */
static void entry_release(struct pcache_entry *e)
{
    if (e && atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) == 1)
        munmap(e, e->bytes);
}

static void publish(pcache_t *pc)
{
    atomic_store_explicit(&pc->st_ram_bytes, (long long)pc->ram_bytes, memory_order_relaxed);
    atomic_store_explicit(&pc->st_ram_entries, pc->n_ram, memory_order_relaxed);
    atomic_store_explicit(&pc->st_disk_entries, pc->n_disk, memory_order_relaxed);
    atomic_store_explicit(&pc->st_disk_bytes, pc->disk_bytes, memory_order_relaxed);
}

/* Drop RAM entry i (order is not kept). */
static void ram_drop(pcache_t *pc, int64_t i)
{
    pc->ram_bytes -= pc->ram[i]->bytes;
    entry_release(pc->ram[i]);
    pc->ram[i] = pc->ram[--pc->n_ram];
}

/* Make room for bytes more in the RAM tier: the least recently used go first. */
static void ram_evict(pcache_t *pc, size_t bytes)
{
    while (pc->n_ram && pc->ram_bytes + bytes > (size_t)pc->p.ram_max) {
        int64_t lru = 0;
        for (int64_t i = 1; i < pc->n_ram; i++)
            if (pc->ram[i]->used < pc->ram[lru]->used)
                lru = i;
        ram_drop(pc, lru);
        atomic_fetch_add_explicit(&pc->st_evictions, 1, memory_order_relaxed);
    }
}

/* Keep e in the RAM tier if it fits; else free it. */
static void ram_add(pcache_t *pc, struct pcache_entry *e)
{
    if (e->bytes > (size_t)pc->p.ram_max) {
        entry_release(e);
        return;
    }
    ram_evict(pc, e->bytes);
    if (pc->n_ram == pc->cap_ram) {
        pc->cap_ram = pc->cap_ram ? 2 * pc->cap_ram : 16;
        pc->ram = xrealloc(pc->ram, (size_t)pc->cap_ram * sizeof *pc->ram);
    }
    e->used = ++pc->clock;
    pc->ram[pc->n_ram++] = e;
    pc->ram_bytes += e->bytes;
}

static int64_t ram_find(const pcache_t *pc, uint64_t hash, int64_t pos)
{
    for (int64_t i = 0; i < pc->n_ram; i++)
        if (pc->ram[i]->hash == hash && pc->ram[i]->pos == pos)
            return i;
    return -1;
}

/* ============================================================================================
 * The disk tier
 * ========================================================================================== */

/* Index a file (a newer one of the same name replaces the old one's row). */
static void disk_add(pcache_t *pc, const struct disk_ent *d)
{
    for (int64_t i = 0; i < pc->n_disk; i++)
        if (pc->disk[i].hash == d->hash) {
            pc->disk_bytes += d->bytes - pc->disk[i].bytes;
            pc->disk[i] = *d;
            return;
        }
    if (pc->n_disk == pc->cap_disk) {
        pc->cap_disk = pc->cap_disk ? 2 * pc->cap_disk : 16;
        pc->disk = xrealloc(pc->disk, (size_t)pc->cap_disk * sizeof *pc->disk);
    }
    pc->disk[pc->n_disk++] = *d;
    pc->disk_bytes += d->bytes;
}

/* Forget disk entry i (order is not kept). */
static void disk_forget(pcache_t *pc, int64_t i)
{
    pc->disk_bytes -= pc->disk[i].bytes;
    pc->disk[i] = pc->disk[--pc->n_disk];
}

static void file_name(const pcache_t *pc, uint64_t hash, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%016llx" FILE_EXT, pc->dir, (unsigned long long)hash);
}

static int64_t ns_of(const struct timespec *t)
{
    return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec;
}

/* The bytes of an entry's file. */
static int64_t file_bytes(const struct pcache_geom *g, int64_t pos)
{
    return (int64_t)(sizeof(struct file_hdr) + entry_bytes(g, pos) - sizeof(struct pcache_entry) -
                     64);
}

/* Does hdr describe a file this cache may read? why: the reason when not. */
static bool hdr_ok(const pcache_t *pc, const struct file_hdr *h, size_t file_size, const char **why)
{
    const struct pcache_geom *g = &pc->p.geom;
    if (memcmp(h->magic, FILE_MAGIC, 8) != 0 || h->hdr_bytes != sizeof *h) {
        *why = "not a prompt-cache file of this format";
        return false;
    }
    if (h->version != FILE_VERSION) {
        *why = "another format version";
        return false;
    }
    if (memcmp(&h->geom, g, sizeof *g) != 0) {
        *why = "written for another model or device split";
        return false;
    }
    if (h->pos < 1 || h->pos > (1 << 26) || (int64_t)file_size != file_bytes(g, h->pos)) {
        *why = "truncated or damaged";
        return false;
    }
    return true;
}

/* A temporary file of a write that never finished: "<name>.dpc.<pid>.tmp" of this process's
 * id (an earlier daemon with the same id, as in a container) or of a process that is gone. A
 * live daemon's files are left alone: several may share a directory. */
static bool stale_tmp(const char *name)
{
    const char *dot = strstr(name, FILE_EXT ".");
    size_t n = strlen(name);
    if (!dot || n < 4 || strcmp(name + n - 4, ".tmp") != 0)
        return false;
    char *end;
    long pid = strtol(dot + strlen(FILE_EXT) + 1, &end, 10);
    if (end != name + n - 4 || pid <= 0)
        return false;
    return pid == (long)getpid() || (kill((pid_t)pid, 0) != 0 && errno == ESRCH);
}

/* Index the valid files of the directory (one warning per file that is not) and delete the
 * stale temporary files. */
static void disk_scan(pcache_t *pc)
{
    DIR *d = opendir(pc->dir);
    if (!d)
        return;
    struct dirent *de;
    int64_t n_tmp = 0;
    while ((de = readdir(d))) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", pc->dir, de->d_name);
        if (stale_tmp(de->d_name)) {
            n_tmp += unlink(path) == 0;
            continue;
        }
        size_t n = strlen(de->d_name);
        if (n <= strlen(FILE_EXT) || strcmp(de->d_name + n - strlen(FILE_EXT), FILE_EXT) != 0)
            continue;
        struct file_hdr h;
        struct stat st;
        const char *why = "unreadable";
        FILE *f = fopen(path, "rb");
        bool ok = f && fstat(fileno(f), &st) == 0 && fread(&h, sizeof h, 1, f) == 1 &&
                  hdr_ok(pc, &h, (size_t)st.st_size, &why);
        if (f)
            fclose(f);
        if (ok)
            disk_add(pc,
                     &(struct disk_ent){h.hash, h.pos, (int64_t)st.st_size, ns_of(&st.st_mtim)});
        else
            LOG_W("prompt cache: ignoring %s: %s", path, why);
    }
    closedir(d);
    if (n_tmp)
        LOG_I("prompt cache: deleted %lld unfinished temporary file%s in %s", (long long)n_tmp,
              n_tmp == 1 ? "" : "s", pc->dir);
}

/* Write e to its file (temporary name, then rename). Writer thread. Returns whether the file
 * is whole, with its index row in d. */
static bool disk_write(pcache_t *pc, const struct pcache_entry *e, struct disk_ent *d)
{
    const struct pcache_geom *g = &pc->p.geom;
    const size_t n_state = (g->state_floats + g->h_floats) * sizeof(float);
    const size_t n_kv = (size_t)e->pos * g->kv_floats * sizeof(float);
    const size_t n_tok = (size_t)e->pos * sizeof(int32_t);
    struct file_hdr h = {
        .version = FILE_VERSION, .hdr_bytes = sizeof h, .geom = *g, .hash = e->hash, .pos = e->pos};
    memcpy(h.magic, FILE_MAGIC, 8);
    h.sum = checksum(checksum(checksum(PCACHE_HASH0, e->tokens, n_tok), e->state, n_state), e->kv,
                     n_kv);
    char path[4096], tmp[4200];
    file_name(pc, e->hash, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    bool ok = f && fwrite(&h, sizeof h, 1, f) == 1 && fwrite(e->tokens, 1, n_tok, f) == n_tok &&
              fwrite(e->state, 1, n_state, f) == n_state && fwrite(e->kv, 1, n_kv, f) == n_kv;
    ok = (f && fclose(f) == 0) && ok;
    struct stat st;
    if (ok && rename(tmp, path) == 0 && stat(path, &st) == 0) {
        *d = (struct disk_ent){e->hash, e->pos, (int64_t)st.st_size, ns_of(&st.st_mtim)};
        atomic_fetch_add_explicit(&pc->st_writes, 1, memory_order_relaxed);
        return true;
    }
    int err = errno;
    unlink(tmp);
    atomic_fetch_add_explicit(&pc->st_write_errors, 1, memory_order_relaxed);
    if (!pc->warned_write) /* one line, not one per entry: a full disk stays full a while */
        LOG_W("prompt cache: cannot write %s: %s (serving goes on; further failures are "
              "counted in /metrics)",
              path, strerror(err));
    pc->warned_write = true;
    return false;
}

/* ============================================================================================
 * The writer thread
 * ========================================================================================== */

/* Run one job (unlocked), then report it: a whole file goes to `done`. */
static void writer_run(pcache_t *pc, struct wjob *j)
{
    struct disk_ent d;
    bool ok = false;
    if (j->kind == WJOB_WRITE) {
        ok = disk_write(pc, j->e, &d);
        entry_release(j->e);
    } else {
        char path[4096];
        file_name(pc, j->hash, path, sizeof path);
        unlink(path);
    }
    pthread_mutex_lock(&pc->wmu);
    if (ok) {
        if (pc->n_done == pc->cap_done) {
            pc->cap_done = pc->cap_done ? 2 * pc->cap_done : 16;
            pc->done = xrealloc(pc->done, (size_t)pc->cap_done * sizeof *pc->done);
        }
        pc->done[pc->n_done++] = d;
    }
    pc->q_writes -= j->kind == WJOB_WRITE;
    pc->q_jobs--;
    pthread_cond_broadcast(&pc->idlecv);
    pthread_mutex_unlock(&pc->wmu);
    free(j);
}

static void *writer_main(void *arg)
{
    pcache_t *pc = arg;
    pthread_setname_np(pthread_self(), "deltad-pcache");
    pthread_mutex_lock(&pc->wmu);
    for (;;) {
        while (!pc->q_head && !pc->q_stop)
            pthread_cond_wait(&pc->wcv, &pc->wmu);
        struct wjob *j = pc->q_head;
        if (!j)
            break; /* stopped, and nothing left */
        pc->q_head = j->next;
        if (!pc->q_head)
            pc->q_tail = NULL;
        pthread_mutex_unlock(&pc->wmu);
        writer_run(pc, j);
        pthread_mutex_lock(&pc->wmu);
    }
    pthread_mutex_unlock(&pc->wmu);
    return NULL;
}

/* Queue a job (engine thread). A write waits for room when wait, else is refused (false; the
 * caller keeps its reference) when PCACHE_QUEUE_MAX writes are waiting. */
static bool enqueue(pcache_t *pc, enum wjob_kind kind, struct pcache_entry *e, uint64_t hash,
                    bool wait)
{
    pthread_mutex_lock(&pc->wmu);
    while (kind == WJOB_WRITE && wait && pc->q_writes >= PCACHE_QUEUE_MAX)
        pthread_cond_wait(&pc->idlecv, &pc->wmu);
    if (kind == WJOB_WRITE && pc->q_writes >= PCACHE_QUEUE_MAX) {
        pthread_mutex_unlock(&pc->wmu);
        return false;
    }
    struct wjob *j = xcalloc(1, sizeof *j);
    *j = (struct wjob){.kind = kind, .e = e, .hash = hash};
    if (pc->q_tail)
        pc->q_tail->next = j;
    else
        pc->q_head = j;
    pc->q_tail = j;
    pc->q_writes += kind == WJOB_WRITE;
    pc->q_jobs++;
    pthread_cond_signal(&pc->wcv);
    pthread_mutex_unlock(&pc->wmu);
    return true;
}

/* Within disk_max: forget the least recently used files and queue their deletion. */
static void disk_limit(pcache_t *pc)
{
    while (pc->p.disk_max > 0 && pc->disk_bytes > pc->p.disk_max && pc->n_disk > 0) {
        int64_t lru = 0;
        for (int64_t i = 1; i < pc->n_disk; i++)
            if (pc->disk[i].mtime < pc->disk[lru].mtime)
                lru = i;
        uint64_t hash = pc->disk[lru].hash;
        disk_forget(pc, lru);
        enqueue(pc, WJOB_UNLINK, NULL, hash, false);
        atomic_fetch_add_explicit(&pc->st_disk_evictions, 1, memory_order_relaxed);
    }
}

/* Read disk entry i whole and check it; NULL (and the entry forgotten) when it is not valid or
 * not prompt[0 .. pos). */
static struct pcache_entry *disk_read(pcache_t *pc, int64_t i, const int32_t *prompt)
{
    const struct pcache_geom *g = &pc->p.geom;
    char path[4096];
    file_name(pc, pc->disk[i].hash, path, sizeof path);
    struct pcache_entry *e = entry_alloc(g, pc->disk[i].pos);
    if (!e)
        return NULL;
    struct file_hdr h;
    struct stat st;
    const char *why = "unreadable";
    FILE *f = fopen(path, "rb");
    bool ok = f && fstat(fileno(f), &st) == 0 && fread(&h, sizeof h, 1, f) == 1 &&
              hdr_ok(pc, &h, (size_t)st.st_size, &why) && h.pos == e->pos;
    const size_t n_state = (g->state_floats + g->h_floats) * sizeof(float);
    const size_t n_kv = ok ? (size_t)e->pos * g->kv_floats * sizeof(float) : 0;
    const size_t n_tok = ok ? (size_t)e->pos * sizeof(int32_t) : 0;
    if (ok) {
        why = "truncated or damaged";
        ok = fread(e->tokens, 1, n_tok, f) == n_tok && fread(e->state, 1, n_state, f) == n_state &&
             fread(e->kv, 1, n_kv, f) == n_kv &&
             checksum(checksum(checksum(PCACHE_HASH0, e->tokens, n_tok), e->state, n_state), e->kv,
                      n_kv) == h.sum;
    }
    const bool same = ok && memcmp(e->tokens, prompt, n_tok) == 0;
    struct timespec now;
    if (same && futimens(fileno(f), NULL) == 0 && clock_gettime(CLOCK_REALTIME, &now) == 0)
        pc->disk[i].mtime = ns_of(&now); /* used: the last to go under disk_max */
    if (f)
        fclose(f);
    if (ok && !same) {
        entry_release(e); /* another prefix with the same hash: a miss, the file stays */
        return NULL;
    }
    if (!ok) {
        LOG_W("prompt cache: ignoring %s: %s", path, why);
        atomic_fetch_add_explicit(&pc->st_rejected, 1, memory_order_relaxed);
        disk_forget(pc, i);
        publish(pc);
        entry_release(e);
        return NULL;
    }
    e->hash = h.hash;
    atomic_fetch_add_explicit(&pc->st_reads, 1, memory_order_relaxed);
    return e;
}

/* ============================================================================================
 * The interface
 * ========================================================================================== */

int pcache_create(const struct pcache_params *p, pcache_t **out, char *err, size_t errlen)
{
    *out = NULL;
    const bool disk = p->dir && p->dir[0];
    if (p->ram_max <= 0 && !disk)
        return 0;
    if (disk && mkdir(p->dir, 0755) != 0 && errno != EEXIST) {
        dd_errf(err, errlen, "cache_dir %s: cannot create it: %s", p->dir, strerror(errno));
        return DD_EIO;
    }
    if (disk && access(p->dir, R_OK | W_OK | X_OK) != 0) {
        dd_errf(err, errlen, "cache_dir %s: %s", p->dir, strerror(errno));
        return DD_EIO;
    }
    pcache_t *pc = xcalloc(1, sizeof *pc);
    pc->p = *p;
    pc->p.dir = NULL;
    pc->dir = disk ? xstrdup(p->dir) : NULL;
    pthread_mutex_init(&pc->wmu, NULL);
    pthread_cond_init(&pc->wcv, NULL);
    pthread_cond_init(&pc->idlecv, NULL);
    if (pc->dir) {
        int rc = pthread_create(&pc->writer, NULL, writer_main, pc);
        if (rc != 0) {
            dd_errf(err, errlen, "cache_dir %s: cannot start the writer thread: %s", p->dir,
                    strerror(rc));
            pcache_destroy(pc);
            return DD_EIO;
        }
        pc->writer_on = true;
        disk_scan(pc);
        disk_limit(pc);
    }
    publish(pc);
    *out = pc;
    return 0;
}

void pcache_destroy(pcache_t *pc)
{
    if (!pc)
        return;
    if (pc->writer_on) {
        pcache_flush(pc);
        pthread_mutex_lock(&pc->wmu);
        pc->q_stop = true;
        pthread_cond_signal(&pc->wcv);
        pthread_mutex_unlock(&pc->wmu);
        pthread_join(pc->writer, NULL);
    }
    while (pc->n_ram)
        ram_drop(pc, pc->n_ram - 1);
    free(pc->ram);
    entry_release(pc->scratch);
    free(pc->disk);
    free(pc->done);
    free(pc->applied);
    free(pc->dir);
    pthread_mutex_destroy(&pc->wmu);
    pthread_cond_destroy(&pc->wcv);
    pthread_cond_destroy(&pc->idlecv);
    free(pc);
}

void pcache_poll(pcache_t *pc)
{
    if (!pc || !pc->writer_on)
        return;
    pthread_mutex_lock(&pc->wmu);
    const int64_t n = pc->n_done;
    if (n > pc->cap_applied) {
        pc->cap_applied = pc->cap_done;
        pc->applied = xrealloc(pc->applied, (size_t)pc->cap_applied * sizeof *pc->applied);
    }
    if (n)
        memcpy(pc->applied, pc->done, (size_t)n * sizeof *pc->done);
    pc->n_done = 0;
    pthread_mutex_unlock(&pc->wmu);
    if (!n)
        return;
    for (int64_t i = 0; i < n; i++)
        disk_add(pc, &pc->applied[i]);
    disk_limit(pc);
    publish(pc);
}

void pcache_flush(pcache_t *pc)
{
    if (!pc || !pc->writer_on)
        return;
    for (;;) { /* applying finished writes may queue deletions (disk_max): wait for those too */
        pthread_mutex_lock(&pc->wmu);
        while (pc->q_jobs > 0)
            pthread_cond_wait(&pc->idlecv, &pc->wmu);
        pthread_mutex_unlock(&pc->wmu);
        pcache_poll(pc);
        pthread_mutex_lock(&pc->wmu);
        const bool idle = pc->q_jobs == 0;
        pthread_mutex_unlock(&pc->wmu);
        if (idle)
            return;
    }
}

bool pcache_find(pcache_t *pc, const int32_t *prompt, const uint64_t *ph, int64_t limit,
                 struct pcache_hit *hit)
{
    pcache_poll(pc);
    hit->pos = 0;
    for (int64_t i = 0; i < pc->n_ram; i++) {
        const struct pcache_entry *e = pc->ram[i];
        if (e->pos > hit->pos && e->pos <= limit && e->hash == ph[e->pos] &&
            memcmp(e->tokens, prompt, (size_t)e->pos * sizeof *prompt) == 0)
            *hit = (struct pcache_hit){.tier = PCACHE_RAM, .pos = e->pos, .idx = i};
    }
    for (int64_t i = 0; i < pc->n_disk; i++) {
        const struct disk_ent *d = &pc->disk[i];
        if (d->pos > hit->pos && d->pos <= limit && d->hash == ph[d->pos])
            *hit = (struct pcache_hit){.tier = PCACHE_DISK, .pos = d->pos, .idx = i};
    }
    return hit->pos > 0;
}

const struct pcache_entry *pcache_load(pcache_t *pc, const struct pcache_hit *hit,
                                       const int32_t *prompt)
{
    if (hit->tier == PCACHE_RAM) {
        ASSERT(hit->idx >= 0 && hit->idx < pc->n_ram);
        pc->ram[hit->idx]->used = ++pc->clock;
        return pc->ram[hit->idx];
    }
    ASSERT(hit->idx >= 0 && hit->idx < pc->n_disk);
    struct pcache_entry *e = disk_read(pc, hit->idx, prompt);
    if (!e)
        return NULL;
    entry_release(pc->scratch);
    pc->scratch = NULL;
    if (e->bytes <= (size_t)pc->p.ram_max && ram_find(pc, e->hash, e->pos) < 0) {
        ram_add(pc, e);
        publish(pc);
    } else {
        pc->scratch = e;
    }
    return e;
}

bool pcache_has_disk(const pcache_t *pc)
{
    return pc && pc->dir;
}

bool pcache_has(pcache_t *pc, uint64_t hash, int64_t pos)
{
    int64_t i = ram_find(pc, hash, pos);
    if (i >= 0) {
        pc->ram[i]->used = ++pc->clock;
        return true;
    }
    for (int64_t k = 0; k < pc->n_disk; k++)
        if (pc->disk[k].hash == hash && pc->disk[k].pos == pos)
            return true;
    return false;
}

struct pcache_entry *pcache_entry_new(pcache_t *pc, int64_t pos)
{
    if (!pc->dir && entry_bytes(&pc->p.geom, pos) > (size_t)pc->p.ram_max)
        return NULL;
    return entry_alloc(&pc->p.geom, pos);
}

void pcache_entry_drop(struct pcache_entry *e)
{
    entry_release(e);
}

void pcache_insert(pcache_t *pc, struct pcache_entry *e, bool wait)
{
    pcache_poll(pc);
    if (pc->dir) {
        atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed); /* the queue's */
        if (file_bytes(&pc->p.geom, e->pos) > pc->p.disk_max && pc->p.disk_max > 0) {
            entry_release(e); /* larger than the whole disk tier */
            atomic_fetch_add_explicit(&pc->st_skipped, 1, memory_order_relaxed);
        } else if (!enqueue(pc, WJOB_WRITE, e, 0, wait)) {
            entry_release(e);
            atomic_fetch_add_explicit(&pc->st_skipped, 1, memory_order_relaxed);
        }
    }
    if (ram_find(pc, e->hash, e->pos) >= 0)
        entry_release(e);
    else
        ram_add(pc, e);
    publish(pc);
}

void pcache_get_stats(const pcache_t *pc, struct pcache_stats *s)
{
    memset(s, 0, sizeof *s);
    if (!pc)
        return;
    pcache_t *m = (pcache_t *)pc; /* atomics: loads only */
    s->ram_bytes = atomic_load_explicit(&m->st_ram_bytes, memory_order_relaxed);
    s->ram_entries = atomic_load_explicit(&m->st_ram_entries, memory_order_relaxed);
    s->disk_entries = atomic_load_explicit(&m->st_disk_entries, memory_order_relaxed);
    s->ram_evictions = atomic_load_explicit(&m->st_evictions, memory_order_relaxed);
    s->disk_writes = atomic_load_explicit(&m->st_writes, memory_order_relaxed);
    s->disk_write_errors = atomic_load_explicit(&m->st_write_errors, memory_order_relaxed);
    s->disk_reads = atomic_load_explicit(&m->st_reads, memory_order_relaxed);
    s->disk_rejected = atomic_load_explicit(&m->st_rejected, memory_order_relaxed);
    s->disk_bytes = atomic_load_explicit(&m->st_disk_bytes, memory_order_relaxed);
    s->disk_evictions = atomic_load_explicit(&m->st_disk_evictions, memory_order_relaxed);
    s->disk_writes_skipped = atomic_load_explicit(&m->st_skipped, memory_order_relaxed);
}
