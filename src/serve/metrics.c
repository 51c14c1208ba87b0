/* metrics.c — /metrics in the Prometheus text format (version 0.0.4).
 *
 * Families (all prefixed qwisp_): requests_total{endpoint,code},
 * client_disconnects_total, request_timeouts_total, stop_strings_total, open_connections,
 * requests_in_flight, queue_depth, requests_running, jobs_total{result},
 * prompt_tokens_total, generated_tokens_total, prefill_seconds_total,
 * decode_seconds_total, prefill_tokens_per_second / decode_tokens_per_second
 * (the last finished request), footprint_bytes, rss_bytes, uptime_seconds;
 * pool_* and expert_* are the counter lists of pool.h (QW_POOL_STATS) and
 * experts.h (QW_EXPERTS_STATS), one family per row, written by group() —
 * e.g. pool_{active,cache,peak,cache_limit}_bytes, pool_{hits,misses}_total,
 * expert_cache_{hits,misses}_total, expert_read_bytes_total,
 * expert_cache_hit_ratio.
 * For routers: ready (what /ready answers), kv_cache_usage_ratio with
 * kv_cache_tokens / kv_cache_capacity_tokens, and the vLLM names that the
 * Gateway API Inference Extension's model-server protocol and vLLM-aware
 * routers read: vllm:num_requests_waiting (= queue_depth),
 * vllm:num_requests_running (= requests_running), vllm:kv_cache_usage_perc
 * and its older name vllm:gpu_cache_usage_perc (= kv_cache_usage_ratio, a
 * fraction 0..1 as vLLM's despite "perc").  With the prefix cache on
 * (QWISP_PREFIX_CACHE_MB): prefix_cache_{queried,hit}_tokens_total,
 * prefix_cache_hit_ratio, prefix_cache_{bytes,budget_bytes,entries},
 * prefix_cache_usage_ratio, prefix_cache_evictions_total, and
 * vllm:prefix_cache_{queries,hits}_total (tokens, as vLLM counts them).  Each family is written by one helper, so a name appears
 * once with its HELP/TYPE lines.
 */
#include "metrics.h"
#include "qwisp/backend.h"

#include "qwisp/experts.h"
#include "qwisp/footprint.h"
#include "qwisp/pool.h"

#include <stdio.h>
#include <string.h>

static const char *k_ep_names[QW_EP_COUNT] = {"chat_completions", "completions", "models",
                                              "health", "metrics", "ready", "page", "other"};
static const char *k_class_names[3] = {"2xx", "4xx", "5xx"};

void qw_metrics_init(qw_metrics *m) {
    memset(m, 0, sizeof *m);
    m->start_time = qw_time_s();
}

void qw_metrics_request(qw_metrics *m, qw_endpoint ep, int status) {
    int cls = status >= 500 ? 2 : status >= 400 ? 1 : 0;
    atomic_fetch_add(&m->requests[ep][cls], 1);
}

static void addf(qw_strbuf *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void addf(qw_strbuf *o, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0) qw_strbuf_add(o, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

static void family(qw_strbuf *o, const char *name, const char *type, const char *help) {
    addf(o, "# HELP qwisp_%s %s\n# TYPE qwisp_%s %s\n", name, help, name, type);
}

static void one(qw_strbuf *o, const char *name, const char *type, const char *help, double v) {
    family(o, name, type, help);
    addf(o, "qwisp_%s %.17g\n", name, v);
}

/* A family under a name of another project (vLLM's), written as-is. */
static void foreign(qw_strbuf *o, const char *name, const char *type, const char *help, double v) {
    addf(o, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

/* Every row of a counter list (stats.h) as its own family. */
static void group(qw_strbuf *o, const qw_stat_group *g, const void *s) {
    for (int i = 0; i < g->n; i++) {
        const qw_stat *r = &g->rows[i];
        addf(o, "# HELP qwisp_%s %s%s\n# TYPE qwisp_%s %s\n", r->prom, g->help_prefix, r->help, r->prom,
             qw_stat_prom_type(r));
        addf(o, "qwisp_%s %.17g\n", r->prom, qw_stat_prom_value(r, s));
    }
}

void qw_metrics_render(qw_metrics *m, qw_sched *sched, const char *path_name, bool ready, qw_strbuf *o) {
    family(o, "requests_total", "counter", "HTTP requests answered, by endpoint and status class");
    for (int e = 0; e < QW_EP_COUNT; e++)
        for (int c = 0; c < 3; c++)
            addf(o, "qwisp_requests_total{endpoint=\"%s\",code=\"%s\"} %llu\n", k_ep_names[e], k_class_names[c],
                 (unsigned long long)atomic_load(&m->requests[e][c]));
    one(o, "client_disconnects_total", "counter", "clients that went away before their response ended (generation cancelled)",
        (double)atomic_load(&m->disconnects));
    one(o, "request_timeouts_total", "counter", "connections closed with 408: headers or body slower than their deadline",
        (double)atomic_load(&m->request_timeouts));
    one(o, "stop_strings_total", "counter", "generations ended by a stop string", (double)atomic_load(&m->stop_strings));
    one(o, "open_connections", "gauge", "open HTTP connections", atomic_load(&m->open_conns));
    one(o, "requests_in_flight", "gauge", "generation requests admitted whose response has not ended",
        atomic_load(&m->in_flight));

    one(o, "ready", "gauge", "1 when /ready answers 200 (model loaded, not draining, queue within QWISP_READY_MAX_QUEUE)",
        ready);
    if (sched) {
    qw_sched_stats st;
    qw_sched_get_stats(sched, &st);
    family(o, "execution_path_info", "gauge", "the execution path serving requests");
    addf(o, "qwisp_execution_path_info{path=\"%s\"} 1\n", path_name);
    one(o, "queue_depth", "gauge", "requests waiting for the execution path", st.queued);
    one(o, "requests_running", "gauge", "requests being generated now", st.running);
    family(o, "jobs_total", "counter", "generation jobs finished, by result");
    addf(o, "qwisp_jobs_total{result=\"completed\"} %llu\n", (unsigned long long)st.completed);
    addf(o, "qwisp_jobs_total{result=\"cancelled\"} %llu\n", (unsigned long long)st.cancelled);
    addf(o, "qwisp_jobs_total{result=\"failed\"} %llu\n", (unsigned long long)st.failed);
    one(o, "jobs_cancelled_in_prompt_total", "counter",
        "cancelled jobs whose prefill was cut short (the client left during the prompt)", (double)st.cancelled_in_prompt);
    one(o, "prompt_tokens_total", "counter", "prompt tokens prefilled", (double)st.prompt_tokens);
    one(o, "generated_tokens_total", "counter", "tokens generated", (double)st.gen_tokens);
    one(o, "prefill_seconds_total", "counter", "time in prompt forward passes", st.prefill_s);
    one(o, "decode_seconds_total", "counter", "time in decode forward passes", st.decode_s);
    one(o, "prefill_tokens_per_second", "gauge", "prefill speed of the last finished request", st.last_prefill_tok_s);
    one(o, "decode_tokens_per_second", "gauge", "decode speed of the last finished request", st.last_decode_tok_s);
    double kv = st.kv_capacity_tokens > 0 ? (double)st.kv_used_tokens / (double)st.kv_capacity_tokens : 0;
    one(o, "kv_cache_tokens", "gauge", "KV cache positions held by running requests", (double)st.kv_used_tokens);
    one(o, "kv_cache_capacity_tokens", "gauge", "KV cache positions the execution path can hold (ctx x sequences)",
        (double)st.kv_capacity_tokens);
    one(o, "kv_cache_usage_ratio", "gauge", "kv_cache_tokens / kv_cache_capacity_tokens (0..1)", kv);
    foreign(o, "vllm:num_requests_waiting", "gauge", "vLLM name: requests waiting (= qwisp_queue_depth)", st.queued);
    foreign(o, "vllm:num_requests_running", "gauge", "vLLM name: requests running (= qwisp_requests_running)", st.running);
    foreign(o, "vllm:kv_cache_usage_perc", "gauge", "vLLM name: KV cache usage, 0..1 (= qwisp_kv_cache_usage_ratio)", kv);
    foreign(o, "vllm:gpu_cache_usage_perc", "gauge", "vLLM's older name of vllm:kv_cache_usage_perc (same value)", kv);
    if (st.prefix_reuse) {
        double q = (double)st.prefix_queried_tokens, h = (double)st.prefix_hit_tokens;
        one(o, "prefix_cache_queried_tokens_total", "counter", "prompt tokens of started requests (prefix reuse on)", q);
        one(o, "prefix_cache_hit_tokens_total", "counter", "prompt tokens whose KV was reused, not prefilled", h);
        one(o, "prefix_cache_hit_ratio", "gauge", "prefix_cache_hit_tokens_total / prefix_cache_queried_tokens_total", q > 0 ? h / q : 0);
        one(o, "prefix_cache_bytes", "gauge", "KV bytes the prefix cache's entries hold (pool buffers)", (double)st.prefix_bytes);
        one(o, "prefix_cache_budget_bytes", "gauge", "QWISP_PREFIX_CACHE_MB in bytes", (double)st.prefix_budget_bytes);
        one(o, "prefix_cache_usage_ratio", "gauge", "prefix_cache_bytes / prefix_cache_budget_bytes",
            st.prefix_budget_bytes ? (double)st.prefix_bytes / (double)st.prefix_budget_bytes : 0);
        one(o, "prefix_cache_entries", "gauge", "sequences kept for reuse", st.prefix_entries);
        one(o, "prefix_cache_evictions_total", "counter", "entries dropped to stay within the budget", (double)st.prefix_evictions);
        one(o, "prefix_cache_block_evictions_total", "counter", "tail blocks (QWISP_PREFIX_BLOCK tokens) cut from entries to stay within the budget",
            (double)st.prefix_block_evictions);
        one(o, "prefix_cache_shared_tokens_total", "counter", "prompt tokens reused from another conversation's entry (its prefix copied)",
            (double)st.prefix_shared_tokens);
        one(o, "prefix_cache_snapshots", "gauge", "recurrent-state snapshots held at block boundaries (qwen35moe)", st.prefix_snapshots);
        foreign(o, "vllm:prefix_cache_queries_total", "counter", "vLLM name: prompt tokens looked up (= qwisp_prefix_cache_queried_tokens_total)", q);
        foreign(o, "vllm:prefix_cache_hits_total", "counter", "vLLM name: prompt tokens reused (= qwisp_prefix_cache_hit_tokens_total)", h);
    }
    }

    qw_pool_stats ps = qw_pool_get_stats();
    group(o, &qw_pool_stat_group, &ps);
    qw_experts_stats xs = qw_experts_get_stats();
    group(o, &qw_experts_stat_group, &xs);
    qw_device_stats ds;
    if (qw_backend_active_stats(&ds)) group(o, &qw_device_stat_group, &ds); /* CUDA backend: the device pool */

    qw_footprint fp;
    qw_error err = {0};
    if (qw_footprint_read_fast(0, &fp, &err) == 0) {
        one(o, "footprint_bytes", "gauge", "memory the process owns (anon + shmem + swap; not clean mmaped weights)",
            (double)fp.footprint);
        one(o, "rss_bytes", "gauge", "resident set size (includes clean mmaped weights; misleading alone)", (double)fp.rss);
    }
    one(o, "uptime_seconds", "gauge", "seconds since the server started", qw_time_s() - m->start_time);
}
