/* cmd_convert.c — `qwisp convert HF_DIR -o OUT.gguf [--type T] [--name NAME]`:
 * a Hugging Face Qwen3MoeForCausalLM (-> qwen3moe) or Qwen3_5MoeForCausalLM /
 * Qwen3_5MoeForConditionalGeneration (-> qwen35moe) checkpoint directory to a GGUF that qwisp
 * and llama.cpp load (offline/convert.c does the work).  --type sets the
 * matrices (f32|f16|bf16|q8_0|q4_0|q2_K..q6_K; default: bf16 for a bf16 checkpoint, else
 * f16); norms and the router always stay f32.  Exit 2 on bad flags, 1 when
 * the conversion fails (the message names the file, tensor or key). */
#include "cli/commands.h"
#include "qwisp/convert.h"
#include "qwisp/quant.h"

#include <stdio.h>
#include <string.h>

static const char cv_usage[] =
    "usage: qwisp convert HF_DIR -o OUT.gguf [--type f32|f16|bf16|q8_0|q4_0|q2_K..q6_K] [--name NAME]\n"
    "Converts a Hugging Face Qwen3MoeForCausalLM or Qwen3_5MoeForCausalLM checkpoint (config.json, tokenizer.json,\n"
    "tokenizer_config.json, *.safetensors [+ model.safetensors.index.json]) to GGUF.\n";

int qw_cmd_convert(int argc, char **argv) {
    const char *dir = NULL, *out = NULL, *name = NULL;
    uint32_t type = QW_CONVERT_TYPE_AUTO;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(cv_usage, stdout);
            return 0;
        }
        bool takes = !strcmp(a, "-o") || !strcmp(a, "--output") || !strcmp(a, "--type") || !strcmp(a, "--name");
        if (takes && i + 1 >= argc) {
            fprintf(stderr, "qwisp convert: %s needs a value\n%s", a, cv_usage);
            return 2;
        }
        if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            out = argv[++i];
        } else if (!strcmp(a, "--name")) {
            name = argv[++i];
        } else if (!strcmp(a, "--type")) {
            const char *v = argv[++i];
            int t = qw_type_from_name(v);
            if (t < 0 || !qw_type_supported((uint32_t)t) || t == QW_TYPE_Q8_K) { /* q8_K: activations only */
                fprintf(stderr, "qwisp convert: --type '%s': expected f32, f16, bf16, q8_0, q4_0 or q2_K..q6_K\n", v);
                return 2;
            }
            type = (uint32_t)t;
        } else if (a[0] == '-') {
            fprintf(stderr, "qwisp convert: unknown flag '%s'\n%s", a, cv_usage);
            return 2;
        } else if (!dir) {
            dir = a;
        } else {
            fprintf(stderr, "qwisp convert: unexpected argument '%s'\n%s", a, cv_usage);
            return 2;
        }
    }
    if (!dir || !out) {
        fprintf(stderr, "qwisp convert: %s\n%s", !dir ? "HF_DIR is required" : "-o OUT.gguf is required", cv_usage);
        return 2;
    }
    qw_error err = {0};
    qw_convert_opts o = {.hf_dir = dir, .out_path = out, .type = type, .name = name};
    if (qw_convert_hf(&o, &err) != 0) {
        fprintf(stderr, "qwisp convert: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "qwisp convert: wrote %s\n", out);
    return 0;
}
