/* cmd_serve.c — `qwisp serve`: the OpenAI-compatible HTTP server.
 *
 * Parses flags (falling back to the knob table: QWISP_PORT, QWISP_THREADS,
 * QWISP_CTX, QWISP_API_KEY, QWISP_LANES), blocks SIGINT/SIGTERM in every
 * thread before any is created, starts the server, prints the URL, and waits
 * in sigwait; the first signal drains in-flight requests and exits 0.
 * QWISP_API_KEY set but empty is refused (exit 2): the knob table reads an
 * empty variable as unset, which here would silently serve without auth.
 */
#include "cli_common.h"
#include "commands.h"
#include "qwisp/options.h"
#include "qwisp/serve.h"

#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *k_usage =
    "usage: qwisp serve [-m FILE] [--port N] [--host H] [--threads K] [--ctx N] [options]\n"
    "  -m FILE            model GGUF (default: $QWISP_MODEL or models/default.gguf)\n"
    "  --port N           TCP port (default: $QWISP_PORT = 8080; 0 = any free port)\n"
    "  --host H           address to bind (default 127.0.0.1; 0.0.0.0 or :: to widen on purpose)\n"
    "  --threads K        compute threads (default: $QWISP_THREADS or all CPUs)\n"
    "  --ctx N            context per request, prompt + completion (default: $QWISP_CTX)\n"
    "  --max-conns N      open connections before 429 (default 64; /health is always answered)\n"
    "  --max-conns-per-client N  connections one client address may hold (default 16; more are closed)\n"
    "  --header-timeout S request headers must arrive within S seconds (default 10; else 408)\n"
    "  --body-timeout S   the request body within S seconds of its headers (default 60; else 408)\n"
    "  --max-queue N      queued requests before 429 (default 64)\n"
    "  --max-body BYTES   request body limit (default 8388608)\n"
    "  --chat-template-file F  chat template text to use instead of the GGUF's (Jinja; see docs/serve.md)\n"
    "Auth: QWISP_API_KEY=KEY requires 'Authorization: Bearer KEY' on all endpoints but /health\n"
    "(the scheme in any case; QWISP_API_KEY set but empty is refused).\n"
    "Endpoints: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health,\n"
    "GET /metrics.  SIGINT/SIGTERM drain in-flight requests, then exit.  See docs/serve.md.\n";

int qw_cmd_serve(int argc, char **argv) {
    const char *C = "serve", *model = NULL, *host = "127.0.0.1", *tmpl_file = NULL;
    long port = -1, threads = 0, n_ctx = 0, max_conns = 64, max_queue = 64, max_body = 8L << 20;
    long per_client = 16, header_to = 10, body_to = 60;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(k_usage, stdout);
            return 0;
        } else if (QW_CLI_FLAG("-m") || QW_CLI_FLAG("--model")) { if (r < 0) return 2; model = v; }
        else if (QW_CLI_FLAG("--host")) { if (r < 0) return 2; host = v; }
        else if (QW_CLI_FLAG("--port")) { if (r < 0 || qw_cli_long(C, "--port", v, 0, 65535, &port)) return 2; }
        else if (QW_CLI_FLAG("--threads") || QW_CLI_FLAG("-t")) { if (r < 0 || qw_cli_long(C, "--threads", v, 1, 1024, &threads)) return 2; }
        else if (QW_CLI_FLAG("--ctx") || QW_CLI_FLAG("-c")) { if (r < 0 || qw_cli_long(C, "--ctx", v, 16, 1 << 24, &n_ctx)) return 2; }
        else if (QW_CLI_FLAG("--max-conns")) { if (r < 0 || qw_cli_long(C, "--max-conns", v, 1, 100000, &max_conns)) return 2; }
        else if (QW_CLI_FLAG("--max-conns-per-client")) { if (r < 0 || qw_cli_long(C, "--max-conns-per-client", v, 1, 100000, &per_client)) return 2; }
        else if (QW_CLI_FLAG("--header-timeout")) { if (r < 0 || qw_cli_long(C, "--header-timeout", v, 1, 3600, &header_to)) return 2; }
        else if (QW_CLI_FLAG("--body-timeout")) { if (r < 0 || qw_cli_long(C, "--body-timeout", v, 1, 3600, &body_to)) return 2; }
        else if (QW_CLI_FLAG("--max-queue")) { if (r < 0 || qw_cli_long(C, "--max-queue", v, 0, 1000000, &max_queue)) return 2; }
        else if (QW_CLI_FLAG("--chat-template-file")) { if (r < 0) return 2; tmpl_file = v; }
        else if (QW_CLI_FLAG("--max-body")) { if (r < 0 || qw_cli_long(C, "--max-body", v, 1024, 1L << 31, &max_body)) return 2; }
        else {
            fprintf(stderr, "qwisp serve: unknown option '%s' (see qwisp serve --help)\n", argv[i]);
            return 2;
        }
    }
    const char *key_env = getenv("QWISP_API_KEY");
    if (key_env && !key_env[0]) {
        fprintf(stderr, "qwisp serve: QWISP_API_KEY is set but empty, which would serve without auth; "
                        "set a key, or unset QWISP_API_KEY to serve without one on purpose\n");
        return 2;
    }
    const char *path = qw_cli_model_path(C, model);
    if (!path) return 2;

    qw_serve_config cfg = qw_serve_default_config();
    cfg.model_path = path;
    cfg.host = host;
    cfg.port = port >= 0 ? (int)port : (int)qw_opt_int(QW_OPT_PORT);
    cfg.n_threads = qw_cli_threads(threads);
    cfg.n_ctx = (int32_t)(n_ctx ? n_ctx : qw_opt_int(QW_OPT_CTX));
    cfg.max_conns = (int)max_conns;
    cfg.max_conns_per_client = (int)per_client;
    cfg.header_timeout_s = (double)header_to;
    cfg.body_timeout_s = (double)body_to;
    cfg.max_queue = (int)max_queue;
    cfg.max_body = (size_t)max_body;
    cfg.api_key = qw_opt_str(QW_OPT_API_KEY);
    cfg.chat_template_file = tmpl_file;
    /* tests only (tests/serve/t_tools.sh): a scripted reply, since the shipped
     * model writes no tool calls by itself; announced loudly at start */
    const char *test_reply = qw_opt_str(QW_OPT_TEST_REPLY_FILE);
    cfg.test_reply_file = test_reply && *test_reply ? test_reply : NULL;

    /* Large malloc blocks (a request's multi-MB JSON strings, parsed by cJSON)
     * go back to the OS when freed.  glibc's default raises its mmap threshold
     * to the largest block freed so far, after which such blocks come from an
     * arena that keeps them: a server whose clients send 8 MB bodies kept
     * ~8 MB per connection thread's arena for good (issue 21, item 1). */
    mallopt(M_MMAP_THRESHOLD, 1 << 20);

    /* Block the shutdown signals before any thread exists, so only sigwait sees them. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    cfg.lanes = (int)qw_opt_int(QW_OPT_LANES);
    qw_error err = {0};
    qw_server *s = qw_server_start(&cfg, &err);
    if (!s) {
        fprintf(stderr, "qwisp serve: %s\n", err.msg);
        return 1;
    }
    const char *h = strchr(host, ':') ? "[%s]" : "%s";
    char hb[300];
    snprintf(hb, sizeof hb, h, host);
    char pathname[48] = "serialize path";
    if (cfg.lanes > 0) snprintf(pathname, sizeof pathname, "lanes path (B=%d)", cfg.lanes);
    fprintf(stderr, "qwisp serve: model '%s' (%s), %s, ctx %d, %d threads%s\n", qw_server_model_id(s), path,
            pathname, cfg.n_ctx, cfg.n_threads, cfg.api_key ? ", API key required" : "");
    fprintf(stderr, "qwisp serve: listening on http://%s:%d\n", hb, qw_server_port(s));
    int sig = 0;
    sigwait(&set, &sig);
    fprintf(stderr, "qwisp serve: %s received, draining in-flight requests\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    qw_server_shutdown(s);
    fprintf(stderr, "qwisp serve: stopped\n");
    return 0;
}
