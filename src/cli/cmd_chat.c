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
 * Replies go through the same text assembler as the server (text/textout.c):
 * end-of-generation tokens are not printed, <think> content (reasoning) is
 * shown dimmed on a terminal and left out otherwise; a template that opens
 * the think block itself (Qwen3.5) makes the reply start as reasoning.
 * --no-think renders the template with enable_thinking = false.
 * --tools FILE (OpenAI tool definitions, a JSON array) puts tools in the
 * prompt; a reply that ends in tool calls (src/text/tool_calls.c) shows them
 * as "[tool call] name {arguments}" lines instead of their markup, and the
 * next line(s) typed are each call's result (role "tool"), after which the
 * model answers again; one-shot mode prints the calls and exits.
 */
#include "cli_common.h"
#include "commands.h"
#include "qwisp/place.h"
#include "qwisp/generate.h"
#include "qwisp/model.h"
#include "qwisp/options.h"
#include "qwisp/tool_calls.h"
#include "serve/tools.h"
#include "text/textout.h"

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
    "  -i, --interactive  multi-turn even when stdin is not a terminal (one message per line)\n"
    "  --no-think         render the template with enable_thinking = false (Qwen3/3.5: no reasoning)\n"
    "  --tools FILE       tool definitions (OpenAI \"tools\" JSON array); calls are shown and their\n"
    "                     results read from the next lines\n"
    "  --chat-template-file F  chat template to use instead of the GGUF's\n";

static volatile sig_atomic_t g_interrupted;

static void on_sigint(int sig) {
    (void)sig;
    g_interrupted = 1;
}

typedef struct {
    const char *model, *system, *tools_file, *tmpl_file;
    long n_gen, threads, n_ctx;
    bool interactive, seed_given, no_think;
    char *tools_json;     /* --tools, read */
    char *tmpl_owned;     /* --chat-template-file, read */
    const char *tmpl;     /* the template text in use (NULL: none, ChatML) */
    qw_chat_family family;
    qw_sampler_params sp;
    char *prompt; /* one-shot text (owned) */
} chat_args;

typedef struct {
    qw_textout out;
    bool tty, in_reasoning;
    bool tools;  /* hold content back from a "<tool_call>" on */
    size_t sent; /* with tools: content bytes printed */
    const int32_t *script; /* tests: the scripted reply replacing the model's tokens [n_script] */
    size_t n_script, pos;
    int32_t eos;
} reply_state;

static void print_new(reply_state *st) {
    size_t nr, nc;
    const char *r = qw_textout_take_reasoning(&st->out, &nr);
    if (nr && st->tty) {
        if (!st->in_reasoning) fputs("\033[2m", stdout);
        st->in_reasoning = true;
        fwrite(r, 1, nr, stdout);
    }
    const char *c = st->tools ? qw_tool_stream_take(NULL, &st->out.content, &st->sent, &nc)
                              : qw_textout_take_content(&st->out, &nc);
    if (nc) {
        if (st->in_reasoning) fputs("\033[0m\n", stdout);
        st->in_reasoning = false;
        fwrite(c, 1, nc, stdout);
    }
    fflush(stdout);
}

static bool on_token(void *user, int32_t id) {
    reply_state *st = user;
    if (st->script) id = st->pos < st->n_script ? st->script[st->pos++] : st->eos;
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
        else if (!strcmp(argv[i], "--no-think")) a->no_think = true;
        else if (QW_CLI_FLAG("--tools")) { if (r < 0) goto bad; a->tools_file = v; }
        else if (QW_CLI_FLAG("--chat-template-file")) { if (r < 0) goto bad; a->tmpl_file = v; }
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
    qw_chat_msg *msgs; /* role, content, reasoning and tool calls owned */
    size_t n, cap;
} history;

static qw_chat_msg *hist_add(history *h, const char *role, const char *content) {
    if (h->n == h->cap) {
        h->cap = h->cap ? 2 * h->cap : 16;
        h->msgs = qw_xrealloc(h->msgs, h->cap * sizeof *h->msgs);
    }
    h->msgs[h->n] = (qw_chat_msg){.role = qw_xstrdup(role), .content = qw_xstrdup(content)};
    return &h->msgs[h->n++];
}

static void hist_drop(history *h, size_t i) {
    free((char *)h->msgs[i].role);
    free((char *)h->msgs[i].content);
    free((char *)h->msgs[i].reasoning_content);
    for (size_t k = 0; k < h->msgs[i].n_tool_calls; k++) {
        free((char *)h->msgs[i].tool_calls[k].name);
        free((char *)h->msgs[i].tool_calls[k].arguments);
    }
    free((void *)h->msgs[i].tool_calls);
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
    qw_think_mode think; /* of the last rendered prompt */
    int32_t *script;     /* QWISP_TEST_REPLY_FILE's tokens (tests only), or NULL */
    size_t n_script;
} session;

/* Renders + tokenizes the history, dropping the oldest turns while it does
 * not leave room for a reply.  NULL (message printed) when even the last
 * turn alone does not fit. */
static int32_t *render(session *se, history *h, size_t *n) {
    int32_t n_ctx = qw_ctx_n_ctx(se->c);
    for (;;) {
        qw_error err = {0};
        qw_chat_prompt cp;
        qw_chat_opts o = {.add_generation_prompt = true, .enable_thinking = se->a->no_think ? 0 : -1,
                          .tools_json = se->a->tools_json};
        if (qw_chat_render_opts(se->a->tmpl, h->msgs, h->n, &o, &cp, &err) != 0) {
            fprintf(stderr, "qwisp chat: %s\n", err.msg);
            return NULL;
        }
        /* special tokens only in the template's markup: what the user types is text */
        int32_t *ids = qw_tokenize_segments(se->tok, cp.text, cp.len, cp.segs, cp.n_segs, n);
        /* a template that opened <think> itself: the reply starts as reasoning */
        size_t l = cp.len;
        while (l && (cp.text[l - 1] == '\n' || cp.text[l - 1] == ' ')) l--;
        se->think = l >= 7 && !memcmp(cp.text + l - 7, "<think>", 7) ? QW_THINK_OPEN : QW_THINK_SPLIT;
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

/* The reply's tool calls, when it ends in valid ones: shown, and the
 * assistant message carries them.  Otherwise the held-back text is printed. */
static size_t take_tool_calls(const session *se, reply_state *st, qw_chat_msg *msg) {
    qw_tool_calls tc;
    char why[200];
    const char *text = st->out.content.p ? st->out.content.p : "";
    int rc = qw_tool_calls_parse(se->a->family, text, se->a->tools_json, &tc, why, sizeof why);
    if (rc != 1) {
        if (st->sent < st->out.content.n) fwrite(text + st->sent, 1, st->out.content.n - st->sent, stdout);
        if (rc < 0) fprintf(stderr, "qwisp chat: the reply is not a valid tool call (%s); shown as text\n", why);
        return 0;
    }
    qw_chat_tool_call *calls = qw_xcalloc(tc.n, sizeof *calls);
    for (size_t i = 0; i < tc.n; i++) {
        printf("%s[tool call] %s %s", i || st->sent ? "\n" : "", tc.calls[i].name, tc.calls[i].arguments);
        calls[i] = (qw_chat_tool_call){qw_xstrdup(tc.calls[i].name), qw_xstrdup(tc.calls[i].arguments)};
    }
    free((char *)msg->content);
    msg->content = qw_xstrdup(tc.content);
    msg->tool_calls = calls;
    msg->n_tool_calls = tc.n;
    size_t n = tc.n;
    qw_tool_calls_free(&tc);
    return n;
}

/* One assistant reply to the history; appends it.  The number of tool calls
 * it made (0: an answer), or -1 on error. */
static int reply(session *se, history *h, bool tty) {
    size_t n = 0;
    int32_t *ids = render(se, h, &n);
    if (!ids) return -1;
    int32_t keep = 0;
    while (keep < se->n_kv && (size_t)keep < n && se->kv[keep] == ids[keep]) keep++;
    if ((size_t)keep == n) keep--; /* at least one token to evaluate */
    keep = qw_ctx_truncate(se->c, keep); /* a recurrent model restarts from 0 */
    int32_t room = qw_ctx_n_ctx(se->c) - (int32_t)n;
    reply_state st = {.tty = tty, .tools = se->a->tools_json != NULL, .script = se->script,
                      .n_script = se->n_script, .eos = qw_tokenizer_eos(se->tok)};
    qw_textout_init(&st.out, se->tok, NULL, 0, se->think);
    qw_gen_request rq = {.prompt = ids + keep,
                         .n_prompt = (int32_t)n - keep,
                         .max_tokens = se->a->n_gen > 0 && se->a->n_gen < room ? (int32_t)se->a->n_gen : room,
                         .ignore_eos = se->script != NULL, /* the script, not the model, ends a test reply */
                         .sampler = se->a->sp};
    qw_gen_result res = {0};
    qw_error err = {0};
    g_interrupted = 0;
    int rc = qw_generate(se->c, se->tok, &rq, on_token, &st, &res, &err);
    if (!st.out.ended) qw_textout_flush(&st.out);
    print_new(&st);
    if (st.in_reasoning) fputs("\033[0m", stdout);
    qw_chat_msg am = {0};
    size_t n_calls = st.tools && rc == 0 ? take_tool_calls(se, &st, &am) : 0;
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
        qw_chat_msg *msg = hist_add(h, "assistant", am.content ? am.content : st.out.content.p ? st.out.content.p : "");
        if (st.out.reasoning.n) msg->reasoning_content = qw_xstrdup(st.out.reasoning.p);
        msg->tool_calls = am.tool_calls;
        msg->n_tool_calls = am.n_tool_calls;
        am.tool_calls = NULL;
    } else {
        fprintf(stderr, "qwisp chat: %s\n", err.msg);
        qw_ctx_truncate(se->c, 0);
    }
    free((char *)am.content);
    if (am.tool_calls) { /* not kept (an error): free them */
        for (size_t k = 0; k < am.n_tool_calls; k++) {
            free((char *)am.tool_calls[k].name);
            free((char *)am.tool_calls[k].arguments);
        }
        free((void *)am.tool_calls);
    }
    free(res.tokens);
    qw_textout_free(&st.out);
    return rc == 0 ? (int)n_calls : -1;
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

/* The results of the last reply's n tool calls, one line each, as "tool"
 * messages.  false at EOF (the calls stay unanswered in the history). */
static bool tool_results(history *h, int n, bool tty) {
    const qw_chat_msg *am = &h->msgs[h->n - 1];
    for (int i = 0; i < n; i++) {
        char prompt[96];
        snprintf(prompt, sizeof prompt, "result of %.60s> ", am->tool_calls[i].name);
        char *line = NULL;
        if (tty) line = readline(prompt);
        else {
            size_t cap = 0;
            ssize_t len = getline(&line, &cap, stdin);
            if (len < 0) {
                free(line);
                line = NULL;
            } else
                while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        }
        if (!line) return false;
        hist_add(h, "tool", line);
        am = &h->msgs[h->n - 1 - (size_t)(i + 1)]; /* hist_add may have moved the array */
        free(line);
    }
    return true;
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
            int calls = reply(se, h, tty);
            if (calls < 0) hist_drop(h, h->n - 1);
            while (calls > 0 && tool_results(h, calls, tty)) calls = reply(se, h, tty);
        }
        free(line);
    }
    return 0;
}

/* The template (GGUF's or --chat-template-file's), said once when it is not
 * rendered exactly; --tools read and checked.  0, or -1 (message printed). */
static int chat_template(chat_args *a, const qw_model *m) {
    qw_error err = {0};
    size_t n;
    if (a->tmpl_file) {
        a->tmpl = a->tmpl_owned = qw_cli_read_file("chat", a->tmpl_file, &n);
        if (!a->tmpl) return -1;
    } else if (qw_chat_template_text(m->gguf, &a->tmpl, &err)) {
        fprintf(stderr, "qwisp chat: %s\n", err.msg);
        return -1;
    }
    qw_chat_template_info info;
    if (qw_chat_template_identify(a->tmpl, &info, &err)) {
        fprintf(stderr, "qwisp chat: %s\n", err.msg);
        return -1;
    }
    if (!info.exact) fprintf(stderr, "qwisp chat: note: %s\n", info.note);
    a->family = info.family;
    if (a->tools_file) {
        a->tools_json = qw_cli_read_file("chat", a->tools_file, &n);
        if (!a->tools_json) return -1;
        cJSON *t = cJSON_Parse(a->tools_json);
        bool ok = cJSON_IsArray(t);
        cJSON_Delete(t);
        if (!ok) {
            fprintf(stderr, "qwisp chat: %s: tools must be a JSON array of OpenAI tool definitions\n", a->tools_file);
            return -1;
        }
        if (!info.tools) {
            fprintf(stderr, "qwisp chat: --tools: the chat template (%s) has no tool syntax qwisp renders\n", info.name);
            return -1;
        }
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
    qw_ctx *c = tok ? qw_ctx_new_placed(m, (int32_t)n_ctx, qw_cli_threads(a.threads), &err) : NULL;
    if (!c) {
        fprintf(stderr, "qwisp chat: %s\n", err.msg);
        qw_tokenizer_free(tok);
        qw_model_free(m);
        free(a.prompt);
        return 1;
    }
    if (chat_template(&a, m)) {
        qw_ctx_free(c);
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
    /* tests only (tests/serve/t_chat.sh): every reply is this file's text, the
     * model still runs; said on stderr */
    const char *script = qw_opt_str(QW_OPT_TEST_REPLY_FILE);
    if (script && *script) {
        size_t n;
        char *text = qw_cli_read_file("chat", script, &n);
        if (text) se.script = qw_tokenize(tok, text, n, true, &se.n_script);
        free(text);
        fprintf(stderr, "qwisp chat: TEST MODE: every reply is the %zu tokens of %s\n", se.n_script, script);
    }
    history h = {0};
    if (a.system) hist_add(&h, "system", a.system);
    int rc = 0;
    if (a.prompt) {
        if (!a.prompt[0]) {
            fprintf(stderr, "qwisp chat: the prompt is empty\n");
            rc = 2;
        } else {
            hist_add(&h, "user", a.prompt);
            rc = reply(&se, &h, isatty(STDOUT_FILENO)) < 0 ? 1 : 0; /* tool calls: shown, then exit */
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
    free(se.script);
    free(a.prompt);
    free(a.tools_json);
    free(a.tmpl_owned);
    qw_ctx_free(c);
    qw_tokenizer_free(tok);
    qw_model_free(m);
    return rc;
}
