/*
 * cmd_worker — what ranks 1 .. N-1 of an mpirun job run (`mpirun -np N deltad serve|logits|
 * bench|generate ...`, dist.h): the same command line as rank 0, of which a worker needs only
 * the model and its devices (model, devices, threads, bind_threads, mpi_timeout: from the
 * config for serve, from the options for the other subcommands). It loads the model, makes its
 * devices and serves rank 0's device groups (fwd_worker_run) until rank 0 ends the job.
 *
 * Rank 0 runs the command itself (HTTP front end and scheduler for serve); a worker never
 * listens, prints nothing to stdout, and exits 0 when the job ends normally, 1 when it loses
 * rank 0. Thread: the main thread.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cmd.h"                 // defines: cmd_parse, cmd_engine_open, cmd_worker
#include "engine/compute/dist.h" // defines: dist_rank, dist_set_timeout
#include "engine/compute/fwd.h"  // defines: fwd_worker_run
#include "engine/util.h"         // defines: LOG_I, dd_log_level
#include "server/config/cfg.h"   // defines: cfg_load, cfg_mut

/* The worker's options from serve's configuration (strings borrowed from the config). */
static int serve_opts(int argc, char **argv, struct cmd_opts *o)
{
    char err[4096];
    struct cfg *c = cfg_mut();
    int rc = cfg_load(c, argc - 2, argv + 2, stdout, err, sizeof err);
    if (rc) {
        if (rc != 1)
            fprintf(stderr, "deltad: rank %d: error: %s\n", dist_rank(), err);
        return rc == 1 ? 1 : 2;
    }
    memset(o, 0, sizeof *o);
    o->model = c->model;
    o->dev_spec = c->dev_spec;
    o->threads = c->threads;
    o->bind = c->bind_threads;
    dist_set_timeout(c->mpi_timeout);
    dd_log_level = c->log_level;
    return 0;
}

int cmd_worker(int argc, char **argv, int which)
{
    struct cmd_opts o;
    const bool serve = which == 0;
    int rc = serve ? serve_opts(argc, argv, &o) : cmd_parse(argc, argv, 2, which, &o);
    if (rc) {
        if (!serve)
            cmd_opts_free(&o);
        return rc == 1 ? 0 : rc;
    }
    struct cmd_engine e;
    if (cmd_engine_open(&e, &o) == 0) {
        char err[512];
        LOG_I("rank %d (pid %ld) on %s: %d device%s, serving rank 0", dist_rank(), (long)getpid(),
              dist_host(), e.n_dev, e.n_dev > 1 ? "s" : "");
        rc = fwd_worker_run(e.model, e.devs, e.n_dev, err, sizeof err);
        if (rc)
            fprintf(stderr, "deltad: rank %d: %s\n", dist_rank(), err);
        rc = rc ? 1 : 0;
    } else {
        rc = 1;
    }
    cmd_engine_close(&e);
    if (!serve)
        cmd_opts_free(&o);
    return rc;
}
