/* cmd_template.c — `qwisp template`: prints the exact prompt a chat request
 * renders to, with the model's chat template or a template file.  The
 * request is the body of a /v1/chat/completions call (messages, tools,
 * tool_choice, chat_template_kwargs), read by the server's own parser, so
 * what this prints is what serve would feed the model.  Used by
 * tests/text/t_chat_templates.sh against Jinja, and to see what a template
 * makes of a conversation.
 */
#include "cli_common.h"
#include "commands.h"
#include "serve/openai.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *k_usage =
    "usage: qwisp template [-m FILE | --chat-template-file F] [--info] REQUEST.json\n"
    "  Prints the prompt a /v1/chat/completions request body renders to (no newline added).\n"
    "  -m FILE                  take the template from this GGUF (default: $QWISP_MODEL or models/default.gguf)\n"
    "  --chat-template-file F   take it from a Jinja file instead (no model needed)\n"
    "  --info                   print which renderer the template gets, and its fingerprint, instead\n";

int qw_cmd_template(int argc, char **argv) {
    const char *C = "template", *model = NULL, *tfile = NULL, *req = NULL;
    bool info_only = false;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(k_usage, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--info")) info_only = true;
        else if (QW_CLI_FLAG("-m") || QW_CLI_FLAG("--model")) { if (r < 0) return 2; model = v; }
        else if (QW_CLI_FLAG("--chat-template-file")) { if (r < 0) return 2; tfile = v; }
        else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "qwisp template: unknown option '%s' (see qwisp template --help)\n", argv[i]);
            return 2;
        } else if (!req) req = argv[i];
        else {
            fprintf(stderr, "qwisp template: one request file, got '%s' too\n", argv[i]);
            return 2;
        }
    }
    if (!req && !info_only) {
        fputs(k_usage, stderr);
        return 2;
    }
    qw_error err = {0};
    char *tmpl_owned = NULL;
    const char *tmpl = NULL;
    qw_gguf *g = NULL;
    size_t n;
    if (tfile) {
        tmpl = tmpl_owned = qw_cli_read_file(C, tfile, &n);
        if (!tmpl) return 1;
    } else {
        const char *path = qw_cli_model_path(C, model);
        if (!path) return 2;
        g = qw_gguf_open(path, &err);
        if (!g || qw_chat_template_text(g, &tmpl, &err)) {
            fprintf(stderr, "qwisp template: %s\n", err.msg);
            qw_gguf_close(g);
            return 1;
        }
    }
    int rc = 0;
    if (info_only) {
        qw_chat_template_info info;
        if (qw_chat_template_identify(tmpl, &info, &err)) {
            fprintf(stderr, "qwisp template: %s\n", err.msg);
            rc = 1;
        } else {
            printf("%s %s hash=%016llx%s%s\n", info.name, info.exact ? "exact" : "approximate",
                   tmpl ? (unsigned long long)qw_chat_template_hash(tmpl) : 0ULL, info.exact ? "" : "\nnote: ",
                   info.note);
        }
    } else {
        char *body = qw_cli_read_file(C, req, &n);
        cJSON *root = body ? cJSON_ParseWithLength(body, n) : NULL;
        if (!root) {
            if (body) fprintf(stderr, "qwisp template: %s is not JSON\n", req);
            rc = 1;
        } else {
            qw_chat_template_info info;
            if (!qw_chat_template_identify(tmpl, &info, &err) && !info.exact)
                fprintf(stderr, "qwisp template: note: %s\n", info.note);
            qw_oai_request r = {.kind = QW_OAI_CHAT};
            qw_oai_error e;
            if (qw_oai_parse_chat(root, tmpl, &r, &e)) {
                fprintf(stderr, "qwisp template: %s\n", e.message);
                rc = 1;
            } else {
                fwrite(r.prompt_text, 1, r.prompt_len, stdout);
            }
            qw_oai_request_free(&r);
        }
        cJSON_Delete(root);
        free(body);
    }
    free(tmpl_owned);
    qw_gguf_close(g);
    return rc;
}
