/*
 * pcache — the prompt cache's tiers below the slots (issue 36): saved prefixes in host RAM
 * (LRU within ram_max bytes) and, optionally, in files under a directory that outlive the
 * daemon.
 *
 * An entry is a prefix of some prompt, tokens[0 .. pos), with everything a slot needs to go on
 * from it: the KV rows of positions [0, pos) of every attention layer (the MTP layer's too), the
 * GDN conv + SSM state after it and the trunk hidden row of pos - 1 (the MTP input). Entries
 * are found by the hash of their tokens (pcache_hash) and confirmed token by token, so a hash
 * collision is a miss, never a wrong answer.
 *
 * Files: one per entry, named by the hash of its tokens ("<16 hex digits>.dpc"), written to a
 * temporary name and renamed, so a reader sees a whole file or none. Each carries a format
 * version, the model's identity (pcache_model_id) and the state's geometry (which changes with
 * the device split), and a checksum of its body; a file of another model or version, or a
 * damaged one, is ignored with one warning. A failed write costs a warning and the entry, never
 * the request. Files are written by a writer thread of the cache's own, off the engine's path:
 * pcache_insert queues the entry (at most PCACHE_QUEUE_MAX writes waiting; beyond that a write
 * is skipped and counted, the entry stays in RAM), and a file joins the disk index once it is
 * whole. With disk_max set, the files' bytes stay within it: the least recently used (by file
 * mtime; a read touches it) are deleted first. Temporary files a killed daemon left behind
 * are deleted at start-up.
 *
 * Not: a radix tree. Prefixes of one conversation are separate entries, each with all its KV
 * rows; fine for the few boundaries a conversation has, wasteful for very many.
 *
 * Thread safety: one thread (the engine's) calls everything but pcache_get_stats, which any
 * thread may call (relaxed atomics). The writer thread reads queued entries (immutable once
 * inserted; refcounted between the RAM tier and the queue) and hands its results back under
 * the queue's mutex; the engine thread applies them to the disk index at its next call.
 */
#ifndef DELTAD_PCACHE_H
#define DELTAD_PCACHE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What an entry holds, per the model and device split; caches of different geometry never
 * share an entry. */
struct pcache_geom {
    uint64_t model_id;     /* pcache_model_id of the model file */
    uint64_t state_floats; /* GDN conv + SSM state of every device (fwd_ckpt_floats) */
    uint64_t h_floats;     /* the hidden row: n_embd */
    uint64_t kv_floats;    /* K + V floats of one position over every device (fwd_kv_floats) */
};

struct pcache_params {
    struct pcache_geom geom;
    int64_t ram_max;  /* bytes of the RAM tier (0 = none) */
    const char *dir;  /* the disk tier's directory (NULL or "" = none); borrowed for create */
    int64_t disk_max; /* bytes of the disk tier's files (0 = no limit) */
};

/* Writes that may wait for the writer thread; more are skipped (counted). */
#define PCACHE_QUEUE_MAX 8

/* One saved prefix: a single allocation, the arrays carved after the struct. */
struct pcache_entry {
    uint64_t hash; /* pcache_hash of tokens[0 .. pos) */
    int64_t pos;
    int32_t *tokens; /* [pos] */
    float *state;    /* [geom.state_floats] */
    float *h;        /* [geom.h_floats] */
    float *kv;       /* [pos][geom.kv_floats] in fwd_seq_kv_download's layout */
    size_t bytes;    /* of the allocation */
    uint64_t used;   /* LRU clock of its last use */
    atomic_int refs; /* internal: the RAM tier and the write queue */
};

enum pcache_tier { PCACHE_RAM = 1, PCACHE_DISK = 2 };

/* A found prefix: where it is, how long, and a handle for pcache_load. */
struct pcache_hit {
    enum pcache_tier tier;
    int64_t pos;
    int64_t idx; /* internal */
};

/* Counters (monotonic unless noted) for /metrics. */
struct pcache_stats {
    int64_t ram_bytes, ram_entries, disk_entries; /* current */
    int64_t ram_evictions;                        /* entries dropped from RAM by the LRU */
    int64_t disk_writes, disk_write_errors, disk_reads, disk_rejected;
    int64_t disk_bytes;                          /* current: of the indexed files */
    int64_t disk_evictions, disk_writes_skipped; /* files deleted for disk_max; queue full */
};

typedef struct pcache pcache_t;

/* The hash of a token prefix, one token at a time: h(t[0 .. n)) = step(h(t[0 .. n-1)), t[n-1]),
 * h of the empty prefix PCACHE_HASH0. */
#define PCACHE_HASH0 0xcbf29ce484222325ull
uint64_t pcache_hash_step(uint64_t h, int32_t tok);
uint64_t pcache_hash(const int32_t *tok, int64_t n);

/* The identity of a model file: its size and a hash of its first MiB and of blocks spread over
 * the rest (cheap even for a huge file). 0 when the file cannot be read. */
uint64_t pcache_model_id(const char *path);

/* A cache with p's tiers (*out NULL when p asks for none). The disk tier's directory is
 * created when missing; its entries are indexed from the files' headers, its stale temporary
 * files deleted, and its writer thread started. Returns 0, or DD_EIO with the reason in err
 * when the directory cannot be made or read or the thread cannot start. destroy waits for the
 * queued writes (pcache_flush). */
int pcache_create(const struct pcache_params *p, pcache_t **out, char *err, size_t errlen);
void pcache_destroy(pcache_t *pc);

/* The longest entry of prompt[0 .. limit] with pos <= limit in either tier (the RAM tier on a
 * tie); ph [limit + 1] are the prompt's prefix hashes (ph[i] = hash of prompt[0 .. i)).
 * Disk entries are matched by hash only here; pcache_load confirms them. */
bool pcache_find(pcache_t *pc, const int32_t *prompt, const uint64_t *ph, int64_t limit,
                 struct pcache_hit *hit);
/* The entry of a hit, confirmed against prompt: borrowed, valid until the next call that adds
 * an entry. A disk entry is read, checked and kept in the RAM tier (or, when it does not fit
 * there, until the next load). NULL (and the file forgotten) when it does not check out. */
const struct pcache_entry *pcache_load(pcache_t *pc, const struct pcache_hit *hit,
                                       const int32_t *prompt);
/* Does pc have a disk tier (pc may be NULL)? */
bool pcache_has_disk(const pcache_t *pc);
/* Is tokens[0 .. pos) (hash) in some tier? Marks a RAM entry used. */
bool pcache_has(pcache_t *pc, uint64_t hash, int64_t pos);
/* A new entry of pos tokens for the caller to fill (every array), or NULL when the tiers cannot
 * take it (larger than the RAM tier without a disk tier, or out of memory). */
struct pcache_entry *pcache_entry_new(pcache_t *pc, int64_t pos);
/* Free a new entry that is not to be inserted after all (NULL: nothing). */
void pcache_entry_drop(struct pcache_entry *e);
/* Take e (filled, hash set): into the RAM tier, dropping the least recently used entries
 * beyond ram_max, and into the write queue when there is a disk tier. With the queue full,
 * wait waits for room (shutdown); else the write is skipped. Never waits for a write. */
void pcache_insert(pcache_t *pc, struct pcache_entry *e, bool wait);
/* Apply the writer's finished writes to the disk index (cheap; the engine calls it as it
 * loops, so the index and its gauges follow the writes). */
void pcache_poll(pcache_t *pc);
/* Wait until every queued job is done and applied (pcache_poll), deletions included. */
void pcache_flush(pcache_t *pc);

void pcache_get_stats(const pcache_t *pc, struct pcache_stats *s);

#endif
