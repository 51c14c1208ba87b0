/* cmd_chat.c — `qwisp chat`: talk to the local model in the terminal.
 *
 * Interactive (stdin is a terminal, no prompt argument): a multi-turn loop;
 * the whole history is rendered with the model's chat template each turn and
 * only the tokens past the common prefix with what the KV cache already
 * holds are evaluated, so a turn costs its new tokens, not the history.
 * Ctrl-C stops the reply being generated (the partial reply stays in the
 * history) and never quits.  Lines are read with libedit (line editing,
 * arrow-key history for the session) on a terminal, plainly otherwise.  A
 * line starting with '/' is a command, never sent to the model: /help,
 * /reset (clears the history), /exit or /quit (EOF, Ctrl-D, too); "//text"
 * sends "/text".  The banner (stderr) names the model.  When the history
 * outgrows the context, the oldest turns are dropped (a system message is
 * kept).  Without --seed each session draws a random seed (shown by /help).
 * One-shot: `qwisp chat PROMPT…`, or a prompt piped on stdin (read to EOF):
 * one reply, printed, then exit.  -i keeps the multi-turn loop with a
 * non-terminal stdin (one message per line; no "> " prompts), for scripts.
 * Replies go through the same text assembler as the server (serve/textout.c):
 * end-of-generation tokens are not printed, Qwen3 <think> content is shown
 * dimmed on a terminal and left out otherwise.
 */
#include "cli_common.h"
#include "commands.h"
#include "qwisp/generate.h"
#include "qwisp/model.h"
#include "qwisp/options.h"
#include "serve/textout.h"

#include <editline/readline.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *k_usage =
    "usage: qwisp chat [-m FILE] [options] [PROMPT...]\n"
    "  With PROMPT (or text piped on stdin): one reply, then exit.  Otherwise an\n"
    "  interactive chat (line editing and history on a terminal): Ctrl-C stops a reply,\n"
    "  /help lists the commands, /reset clears the history, /exit or Ctrl-D quits.\n"
    "  -m FILE            model GGUF (default: $QWISP_MODEL or models/default.gguf)\n"
    "  --system TEXT      system message\n"
    "  -n N               max tokens per reply (default: until the context is full)\n"
    "  --temp T           temperature (default 0.7; 0 = greedy)\n"
    "  --top-k K, --top-p P, --min-p P (defaults 20, 0.8, 0)\n"
    "  --seed S           sampling seed (default: random per session)\n"
    "  --threads K        compute threads (default: $QWISP_THREADS or all CPUs)\n"
    "  --ctx N            context length (default: $QWISP_CTX)\n"
    "  -i, --interactive  multi-turn even when stdin is not a terminal (one message per line)\n";

static volatile sig_atomic_t g_interrupted;

static void on_sigint(int sig) {
    (void)sig;
    g_interrupted = 1;
}

typedef struct {
    const char *model, *system;
    long n_gen, threads, n_ctx;
    bool interactive, seed_given;
    qw_sampler_params sp;
    char *prompt; /* one-shot text (owned) */
} chat_args;

typedef struct {
    qw_textout out;
    bool tty, in_reasoning;
} reply_state;

static void print_new(reply_state *st) {
    size_t nr, nc;
    const char *r = qw_textout_take_reasoning(&st->out, &nr);
    if (nr && st->tty) {
        if (!st->in_reasoning) fputs("\033[2m", stdout);
        st->in_reasoning = true;
        fwrite(r, 1, nr, stdout);
    }
    const char *c = qw_textout_take_content(&st->out, &nc);
    if (nc) {
        if (st->in_reasoning) fputs("\033[0m\n", stdout);
        st->in_reasoning = false;
        fwrite(c, 1, nc, stdout);
    }
    fflush(stdout);
}

static bool on_token(void *user, int32_t id) {
    reply_state *st = user;
    bool ended = qw_textout_push(&st->out, id);
    print_new(st);
    return !ended && !g_interrupted;
}

static int parse_args(int argc, char **argv, chat_args *a) {
    const char *C = "chat";
    a->sp = qw_sampler_default_params();
    a->sp.temp = 0.7f;
    a->sp.top_k = 20;
    a->sp.top_p = 0.8f;
    a->n_gen = -1;
    qw_strbuf prompt = {0};
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(k_usage, stdout);
            qw_strbuf_free(&prompt);
            return 1;
        } else if (!strcmp(argv[i], "-i") || !strcmp(argv[i], "--interactive")) a->interactive = true;
        else if (QW_CLI_FLAG("-m") || QW_CLI_FLAG("--model")) { if (r < 0) goto bad; a->model = v; }
        else if (QW_CLI_FLAG("--system")) { if (r < 0) goto bad; a->system = v; }
        else if (QW_CLI_FLAG("-n")) { if (r < 0 || qw_cli_long(C, "-n", v, 1, 1 << 24, &a->n_gen)) goto bad; }
        else if (QW_CLI_FLAG("--threads") || QW_CLI_FLAG("-t")) { if (r < 0 || qw_cli_long(C, "--threads", v, 1, 1024, &a->threads)) goto bad; }
        else if (QW_CLI_FLAG("--ctx") || QW_CLI_FLAG("-c")) { if (r < 0 || qw_cli_long(C, "--ctx", v, 16, 1 << 24, &a->n_ctx)) goto bad; }
        else if ((r = qw_cli_sampler_flag(C, argc, argv, &i, &a->sp)) != 0) {
            if (r < 0) goto bad;
            if (!strcmp(argv[i - 1], "--seed")) a->seed_given = true;
        }
        else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "qwisp chat: unknown option '%s' (see qwisp chat --help)\n", argv[i]);
            goto bad;
        } else {
            if (prompt.n) qw_strbuf_add(&prompt, " ", 1);
            qw_strbuf_add(&prompt, argv[i], strlen(argv[i]));
        }
    }
    a->prompt = prompt.p;
    if (!a->seed_given) a->sp.seed = qw_cli_random_seed();
    return 0;
bad:
    qw_strbuf_free(&prompt);
    return -1;
}

/* All of stdin, without its trailing newlines. */
static char *read_stdin(void) {
    qw_strbuf b = {0};
    char buf[65536];
    size_t n;
    qw_strbuf_add(&b, "", 0);
    while ((n = fread(buf, 1, sizeof buf, stdin)) > 0) qw_strbuf_add(&b, buf, n);
    while (b.n && (b.p[b.n - 1] == '\n' || b.p[b.n - 1] == '\r')) b.p[--b.n] = 0;
    return b.p;
}

typedef struct {
    qw_chat_msg *msgs; /* role and content owned (strdup) */
    size_t n, cap;
} history;

static void hist_add(history *h, const char *role, const char *content) {
    if (h->n == h->cap) {
        h->cap = h->cap ? 2 * h->cap : 16;
        h->msgs = qw_xrealloc(h->msgs, h->cap * sizeof *h->msgs);
    }
    h->msgs[h->n++] = (qw_chat_msg){.role = qw_xstrdup(role), .content = qw_xstrdup(content)};
}

static void hist_drop(history *h, size_t i) {
    free((char *)h->msgs[i].role);
    free((char *)h->msgs[i].content);
    memmove(h->msgs + i, h->msgs + i + 1, (h->n - i - 1) * sizeof *h->msgs);
    h->n--;
}

static void hist_free(history *h) {
    while (h->n) hist_drop(h, h->n - 1);
    free(h->msgs);
}

typedef struct {
    const qw_model *m;
    const qw_tokenizer *tok;
    qw_ctx *c;
    int32_t *kv; /* token ids in the KV cache [n_kv] */
    int32_t n_kv;
    const chat_args *a;
} session;

/* Renders + tokenizes the history, dropping the oldest turns while it does
 * not leave room for a reply.  NULL (message printed) when even the last
 * turn alone does not fit. */
static int32_t *render(session *se, history *h, size_t *n) {
    int32_t n_ctx = qw_ctx_n_ctx(se->c);
    for (;;) {
        qw_error err = {0};
        qw_chat_prompt cp;
        if (qw_chat_render_prompt(se->m->gguf, h->msgs, h->n, true, &cp, &err) != 0) {
            fprintf(stderr, "qwisp chat: %s\n", err.msg);
            return NULL;
        }
        /* special tokens only in the template's markup: what the user types is text */
        int32_t *ids = qw_tokenize_segments(se->tok, cp.text, cp.len, cp.segs, cp.n_segs, n);
        qw_chat_prompt_free(&cp);
        int32_t want = se->a->n_gen > 0 ? (int32_t)se->a->n_gen : 64;
        if ((int64_t)*n + want <= n_ctx || !ids) return ids;
        free(ids);
        size_t first = h->n && !strcmp(h->msgs[0].role, "system") ? 1 : 0;
        if (h->n - first <= 1) {
            fprintf(stderr, "qwisp chat: the message does not fit in the context (%d tokens)\n", n_ctx);
            return NULL;
        }
        hist_drop(h, first); /* the oldest turn goes */
    }
}

/* One assistant reply to the history; appends it.  0, or -1 on error. */
static int reply(session *se, history *h, bool tty) {
    size_t n = 0;
    int32_t *ids = render(se, h, &n);
    if (!ids) return -1;
    int32_t keep = 0;
    while (keep < se->n_kv && (size_t)keep < n && se->kv[keep] == ids[keep]) keep++;
    if ((size_t)keep == n) keep--; /* at least one token to evaluate */
    keep = qw_ctx_truncate(se->c, keep); /* a recurrent model restarts from 0 */
    int32_t room = qw_ctx_n_ctx(se->c) - (int32_t)n;
    reply_state st = {.tty = tty};
    qw_textout_init(&st.out, se->tok, NULL, 0, QW_THINK_SPLIT);
    qw_gen_request rq = {.prompt = ids + keep,
                         .n_prompt = (int32_t)n - keep,
                         .max_tokens = se->a->n_gen > 0 && se->a->n_gen < room ? (int32_t)se->a->n_gen : room,
                         .sampler = se->a->sp};
    qw_gen_result res = {0};
    qw_error err = {0};
    g_interrupted = 0;
    int rc = qw_generate(se->c, se->tok, &rq, on_token, &st, &res, &err);
    if (!st.out.ended) qw_textout_flush(&st.out);
    print_new(&st);
    if (st.in_reasoning) fputs("\033[0m", stdout);
    if (g_interrupted && tty) fputs(" [stopped]", stdout);
    fputc('\n', stdout);
    fflush(stdout);
    /* The KV holds the prompt and every generated token but the last. */
    free(se->kv);
    se->n_kv = 0;
    se->kv = ids;
    if (rc == 0) {
        se->kv = qw_xrealloc(ids, (n + (size_t)res.n_tokens + 1) * sizeof(int32_t));
        for (int32_t i = 0; i + 1 < res.n_tokens; i++) se->kv[n + (size_t)i] = res.tokens[i];
        se->n_kv = (int32_t)n + (res.n_tokens > 0 ? res.n_tokens - 1 : 0);
        if (qw_ctx_n_past(se->c) != se->n_kv) se->n_kv = 0; /* be safe: re-evaluate next turn */
        hist_add(h, "assistant", st.out.content.p ? st.out.content.p : "");
    } else {
        fprintf(stderr, "qwisp chat: %s\n", err.msg);
        qw_ctx_truncate(se->c, 0);
    }
    free(res.tokens);
    qw_textout_free(&st.out);
    return rc;
}

static void print_help(const session *se) {
    printf("commands (a line starting with '/'; never sent to the model):\n"
           "  /help          this list\n"
           "  /reset         clear the history (the system message stays)\n"
           "  /exit, /quit   leave (Ctrl-D too)\n"
           "  //text         send \"/text\" as a message\n"
           "Ctrl-C stops a reply.  Sampling: temp %g, top-k %d, top-p %g, seed %llu.\n",
           (double)se->a->sp.temp, se->a->sp.top_k, (double)se->a->sp.top_p,
           (unsigned long long)se->a->sp.seed);
    fflush(stdout);
}

/* One line from the user, without its newline (malloc'd); NULL at EOF.
 * *again is set when a Ctrl-C interrupted the read (not EOF). */
static char *read_line(bool tty, bool *again) {
    *again = false;
    g_interrupted = 0;
    if (tty) {
        char *line = readline("> ");
        if (!line && g_interrupted) *again = true;
        if (line && *line) add_history(line);
        return line;
    }
    char *line = NULL;
    size_t cap = 0;
    errno = 0;
    ssize_t len = getline(&line, &cap, stdin);
    if (len < 0) {
        free(line);
        if (g_interrupted || errno == EINTR) {
            clearerr(stdin);
            *again = true;
        }
        return NULL;
    }
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
    return line;
}

static int interactive(session *se, history *h, bool tty) {
    if (tty) rl_readline_name = "qwisp"; /* ~/.editrc may hold qwisp: settings */
    for (;;) {
        bool again;
        char *line = read_line(tty, &again);
        if (!line) {
            if (again) {
                fputs("\n(/exit or Ctrl-D to quit)\n", stdout);
                continue;
            }
            if (tty) fputc('\n', stdout);
            break;
        }
        const char *msg = line;
        if (line[0] == '/' && line[1] == '/') msg = line + 1;
        else if (line[0] == '/') {
            bool quit = !strcmp(line, "/exit") || !strcmp(line, "/quit");
            if (!strcmp(line, "/help") || !strcmp(line, "/?")) print_help(se);
            else if (!strcmp(line, "/reset")) {
                size_t first = h->n && !strcmp(h->msgs[0].role, "system") ? 1 : 0;
                while (h->n > first) hist_drop(h, h->n - 1);
                fputs("(history cleared)\n", stdout);
            } else if (!quit) printf("unknown command '%s' (/help lists them; //text sends /text)\n", line);
            fflush(stdout);
            free(line);
            if (quit) break;
            continue;
        }
        if (*msg) {
            hist_add(h, "user", msg);
            if (reply(se, h, tty)) hist_drop(h, h->n - 1);
        }
        free(line);
    }
    return 0;
}

int qw_cmd_chat(int argc, char **argv) {
    chat_args a = {0};
    int pr = parse_args(argc, argv, &a);
    if (pr) return pr > 0 ? 0 : 2;
    bool tty_in = isatty(STDIN_FILENO);
    if (!a.prompt && !tty_in && !a.interactive) a.prompt = read_stdin();
    const char *path = qw_cli_model_path("chat", a.model);
    if (!path) {
        free(a.prompt);
        return 2;
    }
    qw_error err = {0};
    qw_model *m = qw_model_load(path, &err);
    qw_tokenizer *tok = m ? qw_tokenizer_from_gguf(m->gguf, &err) : NULL;
    long n_ctx = a.n_ctx ? a.n_ctx : (long)qw_opt_int(QW_OPT_CTX);
    qw_ctx *c = tok ? qw_ctx_new(m, (int32_t)n_ctx, qw_cli_threads(a.threads), &err) : NULL;
    if (!c) {
        fprintf(stderr, "qwisp chat: %s\n", err.msg);
        qw_tokenizer_free(tok);
        qw_model_free(m);
        free(a.prompt);
        return 1;
    }
    struct sigaction sa = {0};
    sa.sa_handler = on_sigint; /* no SA_RESTART: Ctrl-C interrupts a blocked read */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);

    session se = {.m = m, .tok = tok, .c = c, .a = &a};
    history h = {0};
    if (a.system) hist_add(&h, "system", a.system);
    int rc = 0;
    if (a.prompt) {
        if (!a.prompt[0]) {
            fprintf(stderr, "qwisp chat: the prompt is empty\n");
            rc = 2;
        } else {
            hist_add(&h, "user", a.prompt);
            rc = reply(&se, &h, isatty(STDOUT_FILENO)) ? 1 : 0;
        }
    } else {
        /* The banner names the model, so a wrong QWISP_MODEL shows at once. */
        const char *name = NULL;
        size_t name_len = 0;
        if (qw_gguf_get_str(m->gguf, "general.name", &name, &name_len) != 0 || !name_len) name = "(unnamed)";
        fprintf(stderr, "qwisp chat: model %.*s (%s), %d-token context.  /help for commands, /exit or Ctrl-D quits.\n",
                (int)(name_len ? name_len : strlen(name)), name, path, qw_ctx_n_ctx(c));
        if (m->hp.n_ctx_train > 0 && qw_ctx_n_ctx(c) > m->hp.n_ctx_train)
            fprintf(stderr, "qwisp chat: note: the model was trained on %d tokens; a conversation longer than that "
                            "may degrade (--ctx %d keeps within it)\n", m->hp.n_ctx_train, m->hp.n_ctx_train);
        rc = interactive(&se, &h, tty_in);
    }
    hist_free(&h);
    free(se.kv);
    free(a.prompt);
    qw_ctx_free(c);
    qw_tokenizer_free(tok);
    qw_model_free(m);
    return rc;
}
