/*
 * main — the deltad binary: dispatch to a subcommand (DESIGN.md section 5).
 *
 * `serve` parses its options from the config table (serve.c, cfg.c); generate, logits, bench
 * and info share the option table of cmd.c, made of the same rows.
 *
 * Under mpirun (dist.h) every rank runs this main with the same arguments: rank 0 runs the
 * command, the other ranks serve its device groups (cmd_worker.c).
 */
#include <stdio.h>
#include <string.h>

#include "cmd.h"                 // defines: cmd_parse, cmd_generate, cmd_worker, ...
#include "engine/compute/dist.h" // defines: dist_init, dist_rank
#include "serve.h"               // defines: serve_main

static void usage(const char *prog)
{
    fprintf(stderr,
            "usage: %s COMMAND [options]\n"
            "commands:\n"
            "  serve    [--config FILE] [--key value ...]               the HTTP daemon\n"
            "  generate -m MODEL -p TEXT [-n N] [--temp T] [--stop S]   one completion to stdout\n"
            "  logits   -m MODEL --tokens 1,2,3 -o OUT.f32 [--mtp]       all-position logits\n"
            "  bench    -m MODEL [-p N] [-n N] [--devices cpu:N]       tokens/s vs roofline\n"
            "  info     [-m MODEL]                                       topology, model, memory\n"
            "run '%s COMMAND --help' for its options\n",
            prog, prog);
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int which;
        int (*fn)(const struct cmd_opts *o);
    } cmds[] = {
        {"generate", CMD_GENERATE, cmd_generate},
        {"logits", CMD_LOGITS, cmd_logits},
        {"bench", CMD_BENCH, cmd_bench},
        {"info", CMD_INFO, cmd_info},
    };
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage(argv[0]);
        return argc < 2 ? 2 : 0;
    }
    char err[512];
    if (dist_init(err, sizeof err)) {
        fprintf(stderr, "deltad: error: %s\n", err);
        return 2;
    }
    if (strcmp(argv[1], "serve") == 0)
        return dist_rank() ? cmd_worker(argc, argv, 0) : serve_main(argc - 2, argv + 2);
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        if (strcmp(argv[1], cmds[i].name) != 0)
            continue;
        if (dist_rank() && cmds[i].which != CMD_INFO)
            return cmd_worker(argc, argv, cmds[i].which);
        struct cmd_opts o;
        int rc = cmd_parse(argc, argv, 2, cmds[i].which, &o);
        if (rc == 0)
            rc = cmds[i].fn(&o);
        cmd_opts_free(&o);
        return rc;
    }
    fprintf(stderr, "error: unknown command '%s'\n", argv[1]);
    usage(argv[0]);
    return 2;
}
