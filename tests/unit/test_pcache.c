/*
 * test_pcache — the prompt cache's RAM and disk tiers (engine/sched/pcache.c) on their own: the
 * writer thread (a queued entry outlives the RAM tier's copy; destroy waits for the writes;
 * a failed write is counted and the entry still served from RAM), cache_disk_max (the least
 * recently used file by mtime goes first; a read counts as a use) and the stale temporary files
 * deleted at start-up. Each test works in its own temporary directory.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/sched/pcache.h" // defines: pcache_*
#include "test.h"                // defines: TEST, RUN, CHECK*, TEST_MAIN_END

static const struct pcache_geom GEOM = {
    .model_id = 42, .state_floats = 16, .h_floats = 8, .kv_floats = 32};

/* A temporary directory for one test (removed by rm_dir). */
static void mk_dir(char *out, size_t cap)
{
    snprintf(out, cap, "/tmp/deltad-test-pcache-XXXXXX");
    if (!mkdtemp(out))
        out[0] = '\0';
}

static void rm_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char path[1024];
    while (d && (de = readdir(d)))
        if (de->d_name[0] != '.') {
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
            unlink(path);
        }
    if (d)
        closedir(d);
    rmdir(dir);
}

/* Files in dir whose name ends with suffix. */
static int count_files(const char *dir, const char *suffix)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;
    while (d && (de = readdir(d))) {
        size_t a = strlen(de->d_name), b = strlen(suffix);
        n += a > b && strcmp(de->d_name + a - b, suffix) == 0;
    }
    if (d)
        closedir(d);
    return n;
}

static pcache_t *open_cache(const char *dir, int64_t ram_max, int64_t disk_max)
{
    struct pcache_params p = {.geom = GEOM, .ram_max = ram_max, .dir = dir, .disk_max = disk_max};
    pcache_t *pc = NULL;
    char err[256];
    if (pcache_create(&p, &pc, err, sizeof err) != 0)
        printf("  pcache_create: %s\n", err);
    return pc;
}

/* Prompt `which`: pos tokens of its own. */
static void prompt_of(int which, int32_t *tok, int64_t pos)
{
    for (int64_t i = 0; i < pos; i++)
        tok[i] = (int32_t)(1000 * which + i);
}

/* A filled entry for prompt `which` (every float derived from it). */
static struct pcache_entry *entry_of(pcache_t *pc, int which, int64_t pos)
{
    struct pcache_entry *e = pcache_entry_new(pc, pos);
    if (!e)
        return NULL;
    prompt_of(which, e->tokens, pos);
    e->hash = pcache_hash(e->tokens, pos);
    for (uint64_t i = 0; i < GEOM.state_floats; i++)
        e->state[i] = (float)(which * 7 + (int)i);
    for (uint64_t i = 0; i < GEOM.h_floats; i++)
        e->h[i] = (float)(which * 5 + (int)i);
    for (uint64_t i = 0; i < (uint64_t)pos * GEOM.kv_floats; i++)
        e->kv[i] = (float)(which + (int)(i % 1000)) * 0.5f;
    return e;
}

/* Is prompt `which` of pos tokens found in tier, with its content intact? */
static bool found(pcache_t *pc, int which, int64_t pos, enum pcache_tier tier)
{
    int32_t tok[256];
    uint64_t ph[257];
    prompt_of(which, tok, pos);
    ph[0] = PCACHE_HASH0;
    for (int64_t i = 0; i < pos; i++)
        ph[i + 1] = pcache_hash_step(ph[i], tok[i]);
    struct pcache_hit hit;
    if (!pcache_find(pc, tok, ph, pos, &hit) || hit.pos != pos || hit.tier != tier)
        return false;
    const struct pcache_entry *e = pcache_load(pc, &hit, tok);
    return e && e->state[3] == (float)(which * 7 + 3) && e->h[2] == (float)(which * 5 + 2) &&
           e->kv[(size_t)pos * GEOM.kv_floats - 1] ==
               (float)(which + (int)(((size_t)pos * GEOM.kv_floats - 1) % 1000)) * 0.5f;
}

/* The file of prompt `which`. */
static void file_of(const char *dir, int which, int64_t pos, char *out, size_t cap)
{
    int32_t tok[256];
    prompt_of(which, tok, pos);
    snprintf(out, cap, "%s/%016llx.dpc", dir, (unsigned long long)pcache_hash(tok, pos));
}

/* Set a file's mtime to `ago` seconds before now. */
static void age_file(const char *path, int ago)
{
    struct timespec t[2];
    clock_gettime(CLOCK_REALTIME, &t[0]);
    t[0].tv_sec -= ago;
    t[1] = t[0];
    utimensat(AT_FDCWD, path, t, 0);
}

TEST(writer_thread_writes_and_flushes)
{
    char dir[64];
    mk_dir(dir, sizeof dir);
    /* no RAM tier to speak of: only the write queue holds the entries until written */
    pcache_t *pc = open_cache(dir, 1, 0);
    CHECK(pc != NULL);
    if (!pc)
        return;
    for (int w = 0; w < 3; w++) {
        struct pcache_entry *e = entry_of(pc, w, 100);
        CHECK(e != NULL);
        if (e)
            pcache_insert(pc, e, true);
    }
    pcache_destroy(pc); /* waits for the writes */
    CHECK_EQ(count_files(dir, ".dpc"), 3);
    CHECK_EQ(count_files(dir, ".tmp"), 0);
    pc = open_cache(dir, 1 << 20, 0);
    struct pcache_stats st;
    pcache_get_stats(pc, &st);
    CHECK_EQ(st.disk_entries, 3);
    for (int w = 0; w < 3; w++)
        CHECK(found(pc, w, 100, PCACHE_DISK));
    pcache_destroy(pc);
    rm_dir(dir);
}

TEST(failed_write_counted_ram_serves)
{
    char dir[64];
    mk_dir(dir, sizeof dir);
    pcache_t *pc = open_cache(dir, 1 << 20, 0);
    CHECK(pc != NULL);
    if (!pc)
        return;
    rmdir(dir); /* writes fail from now on, as on a full disk */
    pcache_insert(pc, entry_of(pc, 1, 50), false);
    pcache_insert(pc, entry_of(pc, 2, 60), false);
    pcache_flush(pc);
    struct pcache_stats st;
    pcache_get_stats(pc, &st);
    CHECK_EQ(st.disk_write_errors, 2);
    CHECK_EQ(st.disk_writes, 0);
    CHECK_EQ(st.disk_entries, 0);
    CHECK(found(pc, 1, 50, PCACHE_RAM));
    CHECK(found(pc, 2, 60, PCACHE_RAM));
    pcache_destroy(pc);
    rm_dir(dir);
}

TEST(disk_max_drops_least_recently_used)
{
    char dir[64], path[256];
    mk_dir(dir, sizeof dir);
    pcache_t *pc = open_cache(dir, 1, 0);
    CHECK(pc != NULL);
    if (!pc)
        return;
    for (int w = 0; w < 4; w++)
        pcache_insert(pc, entry_of(pc, w, 100), true);
    pcache_flush(pc);
    struct pcache_stats st;
    pcache_get_stats(pc, &st);
    const int64_t one = st.disk_bytes / 4; /* the four files are the same size */
    CHECK_EQ(st.disk_entries, 4);
    pcache_destroy(pc);
    for (int w = 0; w < 4; w++) { /* file w is 400 - 100 w seconds old: 0 the oldest */
        file_of(dir, w, 100, path, sizeof path);
        age_file(path, 400 - 100 * w);
    }
    /* room for two and a quarter: the two oldest go at start-up */
    const int64_t lim = one * 9 / 4;
    pc = open_cache(dir, 1 << 20, lim);
    pcache_flush(pc);
    pcache_get_stats(pc, &st);
    CHECK_EQ(st.disk_entries, 2);
    CHECK_EQ(st.disk_evictions, 2);
    CHECK(st.disk_bytes <= lim);
    CHECK_EQ(count_files(dir, ".dpc"), 2);
    CHECK(!found(pc, 0, 100, PCACHE_DISK) && !found(pc, 1, 100, PCACHE_DISK));
    /* reading file 2 (the older of the two left) makes it the most recently used ... */
    CHECK(found(pc, 2, 100, PCACHE_DISK));
    pcache_destroy(pc);
    pc = open_cache(dir, 1, lim); /* (a fresh RAM tier: a file is read again) */
    /* ... so a new file pushes out file 3 */
    pcache_insert(pc, entry_of(pc, 9, 100), true);
    pcache_flush(pc);
    pcache_get_stats(pc, &st);
    CHECK_EQ(st.disk_entries, 2);
    CHECK_EQ(st.disk_evictions, 1);
    CHECK(found(pc, 2, 100, PCACHE_DISK));
    CHECK(found(pc, 9, 100, PCACHE_DISK));
    CHECK(!found(pc, 3, 100, PCACHE_DISK));
    file_of(dir, 3, 100, path, sizeof path);
    CHECK(access(path, F_OK) != 0);
    /* a file larger than the whole limit (256 positions: 2.5 times one of 100) is not written */
    pcache_insert(pc, entry_of(pc, 10, 256), true);
    pcache_flush(pc);
    pcache_get_stats(pc, &st);
    CHECK_EQ(st.disk_writes_skipped, 1);
    CHECK_EQ(st.disk_entries, 2);
    pcache_destroy(pc);
    rm_dir(dir);
}

/* A process id that no process has now (the highest ids are rarely used). */
static long dead_pid(void)
{
    for (long pid = 4194303; pid > 1000; pid--)
        if (kill((pid_t)pid, 0) != 0 && errno == ESRCH)
            return pid;
    return -1;
}

TEST(stale_temporary_files_deleted)
{
    char dir[64], path[256];
    mk_dir(dir, sizeof dir);
    const long pids[] = {(long)getpid(), dead_pid(), (long)getppid()};
    CHECK(pids[1] > 0);
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/00000000000000%02d.dpc.%ld.tmp", dir, i, pids[i]);
        FILE *f = fopen(path, "wb");
        if (f) {
            fputs("half a file", f);
            fclose(f);
        }
    }
    snprintf(path, sizeof path, "%s/notes.tmp", dir); /* not ours */
    FILE *f = fopen(path, "wb");
    if (f)
        fclose(f);
    pcache_t *pc = open_cache(dir, 1 << 20, 0);
    CHECK(pc != NULL);
    /* this process's id (an earlier daemon's, as in a container) and a dead one's: deleted;
     * a live process's (another daemon sharing the directory) and foreign files: kept */
    snprintf(path, sizeof path, "%s/0000000000000000.dpc.%ld.tmp", dir, pids[0]);
    CHECK(access(path, F_OK) != 0);
    snprintf(path, sizeof path, "%s/0000000000000001.dpc.%ld.tmp", dir, pids[1]);
    CHECK(access(path, F_OK) != 0);
    snprintf(path, sizeof path, "%s/0000000000000002.dpc.%ld.tmp", dir, pids[2]);
    CHECK(access(path, F_OK) == 0);
    snprintf(path, sizeof path, "%s/notes.tmp", dir);
    CHECK(access(path, F_OK) == 0);
    pcache_destroy(pc);
    rm_dir(dir);
}

int main(void)
{
    RUN(writer_thread_writes_and_flushes);
    RUN(failed_write_counted_ram_serves);
    RUN(disk_max_drops_least_recently_used);
    RUN(stale_temporary_files_deleted);
    TEST_MAIN_END("test_pcache");
}
