/* options.h — every knob qwisp has, declared once in one table.
 *
 * Each option has a name (its environment variable), an optional alias kept
 * from the seed's spelling, a type, a default, a range and a help line.  The
 * table is parsed once (qw_options_init) from the environment; the CLI may
 * then override single values (qw_opt_set, source "flag").  Until
 * qw_options_init runs (a library caller may never call it) every option reads
 * as the table's default, never as zero.  `qwisp config`
 * prints the whole table with each value's source.  No other file calls getenv
 * for a knob.
 *
 * Sizes accept suffixes K, M, G (binary) where the type is SIZE; a bad value
 * is an error naming the variable and the text seen.
 */
#ifndef QWISP_OPTIONS_H
#define QWISP_OPTIONS_H

#include "qwisp/base.h"

#include <stdio.h>

/* X(id, env name, alias or NULL, type, default text or NULL, min, max, help) */
#define QW_OPTIONS(X)                                                                             \
    X(LOG, "QWISP_LOG", NULL, ENUM, "warn", 0, 0, "log level on stderr: error|warn|info|debug (base.c also reads it before the table)") \
    X(MODEL, "QWISP_MODEL", NULL, STR, NULL, 0, 0, "model GGUF used when -m is not given")          \
    X(THREADS, "QWISP_THREADS", NULL, INT, "0", 0, 1024, "compute threads; 0 = all CPUs")           \
    X(CTX, "QWISP_CTX", NULL, INT, "4096", 16, 1048576, "context length (KV cache positions) for run/chat") \
    X(SIMD, "QWISP_SIMD", NULL, ENUM, "auto", 0, 0, "kernel ISA: auto|avx512-amx|avx512[-novbmi][-nobf16]|avx2|scalar (lowers only; avx512 = no AMX)") \
    X(AMX_KQUANT, "QWISP_AMX_KQUANT", NULL, INT, "1", 0, 1, "avx512-amx level: 1 = Q4_K and Q6_K prefill on AMX tiles too, their dot and decode row loop then in the K-quant reference order (the scalar level's bits); 0 = their AVX-512 kernels (docs/kernels.md)") \
    X(AMX_Q4_0, "QWISP_AMX_Q4_0", NULL, INT, "1", 0, 1, "avx512-amx level: 1 = Q4_0 prefill on AMX tiles, its dot and decode row loop then in the reference order (the scalar level's bits); 0 = the AVX-512 level's Q4_0 kernels (docs/kernels.md)") \
    X(TUNE, "QWISP_TUNE", NULL, ENUM, "auto", 0, 0, "auto: the calibration cached for this CPU, SIMD level, binary and thread count; with none, a command that runs a model measures it once first (a few seconds) | cached: a cached one only, never measure | off: built-in defaults") \
    X(TUNE_FILE, "QWISP_TUNE_FILE", NULL, STR, NULL, 0, 0, "calibration cache file; unset = $XDG_CACHE_HOME/qwisp/tune-<SIMD level>.txt (or ~/.cache/qwisp/tune-<level>.txt)") \
    X(DECODE_ITEM_BYTES, "QWISP_DECODE_ITEM_BYTES", NULL, SIZE, NULL, 1, 1073741824, "weight bytes per decode work item (16K..64M); unset = calibrated or 256K") \
    X(DECODE_AHEAD_BYTES, "QWISP_DECODE_AHEAD_BYTES", NULL, SIZE, NULL, 1, 1073741824, "decode row loops prefetch this many bytes ahead (1K..1M); unset = calibrated or 8K") \
    X(DECODE_PREFETCH_L2, "QWISP_DECODE_PREFETCH_L2", NULL, INT, NULL, 0, 1, "1: decode row loops prefetch into L2 (more misses in flight), 0: into L1; unset = calibrated or 0") \
    X(DECODE_ROWS, "QWISP_DECODE_ROWS", NULL, INT, NULL, 2, 8, "far-apart rows the AVX-512 Q8_0/Q4_0 decode loops read at once (2, 4 or 8; rounded up); unset = calibrated or 2") \
    X(DECODE_GEMV, "QWISP_DECODE_GEMV", NULL, INT, NULL, 0, 1, "1: one-token Q8_0/Q4_0 matmuls use the multi-row GEMV loop, 0: row dots (same bits); unset = the faster on the first CPU decode tokens (calibrated or 1 before)") \
    X(PREFILL_ROWS, "QWISP_PREFILL_ROWS", NULL, INT, NULL, 4, 512, "rows per prefill work item (rounded up to a multiple of 4); unset = calibrated or 32") \
    X(KV_TYPE, "QWISP_KV_TYPE", NULL, ENUM, "f16", 0, 0, "KV cache element type: f16 (as llama.cpp) | f32 (exact fp32 attention, 2x KV memory)") \
    X(PORT, "QWISP_PORT", NULL, INT, "8080", 1, 65535, "HTTP port for serve") \
    X(API_KEY, "QWISP_API_KEY", NULL, SECRET, NULL, 0, 0, "serve: require Authorization: Bearer KEY (all endpoints but /health)") \
    X(READY_MAX_QUEUE, "QWISP_READY_MAX_QUEUE", NULL, INT, "0", 0, 1000000, "serve: /ready answers 503 while more than this many requests wait; 0 = off") \
    X(PREFIX_CACHE_MB, "QWISP_PREFIX_CACHE_MB", NULL, INT, "0", 0, 16777216, "serve: KV of earlier requests kept for prompts that share their token prefix, in MB (LRU); 0 = off") \
    X(PREFIX_BLOCK, "QWISP_PREFIX_BLOCK", NULL, INT, "256", 16, 65536, "serve: prefix cache block in tokens: eviction unit, and recurrent-state snapshot spacing (qwen35moe)") \
    X(PREFIX_CACHE_DIR, "QWISP_PREFIX_CACHE_DIR", NULL, STR, NULL, 0, 0, "serve: directory the prefix cache is saved to at shutdown and loaded from at start (checksummed files; a bad one is skipped with a log line)") \
    X(LANES, "QWISP_LANES", NULL, INT, "0", 0, 1024, "serve with B lanes (batched); 0 = serialize path") \
    X(PREFILL_CACHE_MB, "QWISP_PREFILL_CACHE_MB", "QWISP_PREFILL_MLX_CACHE_MB", INT, NULL, 0, 16777216, "serialize path pool cache limit in MB; unset/0 = unbounded") \
    X(LANE_CACHE_MB, "QWISP_LANE_CACHE_MB", "QWISP_LANE_MLX_CACHE_MB", INT, "2048", 0, 16777216, "lanes path pool cache limit in MB; 0 = unbounded") \
    X(POOL_FIT, "QWISP_POOL_FIT", NULL, ENUM, "classes", 0, 0, "pool fit rule: classes (8 per power of two) | exact (MLX: within ~2 pages)") \
    X(POOL_DECAY_MS, "QWISP_POOL_DECAY_MS", NULL, INT, "0", 0, 86400000, "pool: return cached buffers unused for longer than this many ms to the OS; 0 = off") \
    X(PREFILL_MEMDBG, "QWISP_PREFILL_MEMDBG", NULL, INT, "0", 0, 2, "1: memory breakdown line every _EVERY prefill chunks; 2: also clear the cache (perturbs!)") \
    X(PREFILL_MEMDBG_EVERY, "QWISP_PREFILL_MEMDBG_EVERY", NULL, INT, "4", 1, 1000000, "chunks between QWISP_PREFILL_MEMDBG lines (the final chunk always reports)") \
    X(PROFILE, "QWISP_PROFILE", NULL, INT, "0", 0, 1, "1: time each CPU forward pass by phase (attention, DeltaNet, MoE routing, expert matmuls, LM head); qwisp bench and run print the shares (docs/bench.md)") \
    X(LANE_MEMDBG, "QWISP_LANE_MEMDBG", NULL, INT, "0", 0, 2, "1|2: memory breakdown at the lanes path's idle points (2 clears the cache)") \
    X(RAW_C, "QWISP_RAW_C", NULL, INT, NULL, 0, 65536, "expert slots per layer (streaming tier); 0 = resident; unset = chosen from RAM") \
    X(DEVICE_RAM, "QWISP_DEVICE_RAM", NULL, STR, NULL, 0, 0, "GB of RAM to assume when choosing the tier (e.g. 16 or 0.5); unset = physical/cgroup") \
    X(SSD_THROTTLE_GBS, "QWISP_SSD_THROTTLE_GBS", NULL, STR, NULL, 0, 0, "cap expert read bandwidth at x GB/s (emulate a slow disk); unset = no cap") \
    X(MLOCK, "QWISP_MLOCK", NULL, INT, "0", 0, 1, "1: mlock the resident tier's weights") \
    X(WEIGHTS_COPY, "QWISP_WEIGHTS_COPY", NULL, INT, "0", 0, 1, "1: the resident tier's weights copied into anonymous memory (2 MB pages) instead of read through the file mapping: faster decode where page-cache reads are slow; the footprint grows by the weights") \
    X(EXPERT_READERS, "QWISP_EXPERT_READERS", NULL, INT, "4", 1, 64, "streaming tier, pread engine: reader threads (expert reads in flight)") \
    X(STREAM_IO, "QWISP_STREAM_IO", NULL, ENUM, "auto", 0, 0, "streaming tier read engine: auto (io_uring, else pread) | uring (fail if unavailable) | pread") \
    X(STREAM_QD, "QWISP_STREAM_QD", NULL, INT, "8", 1, 256, "streaming tier, io_uring engine: expert reads in flight") \
    X(LOOKAHEAD, "QWISP_LOOKAHEAD", NULL, INT, "-1", -1, 256, "streaming tier: prefetch layer l+1's top-N predicted experts while layer l runs; -1 = top-k, 0 = off") \
    X(EXPERT_POLICY, "QWISP_EXPERT_POLICY", NULL, ENUM, "lfu", 0, 0, "streaming tier eviction: lfu (least often needed lately, ties LRU; measured best on trained models' routing) | lru") \
    X(NEAR_LOSSLESS, "QWISP_NEAR_LOSSLESS", NULL, INT, "0", 0, 256, "streaming tier, opt-in (not bit-exact): an uncached chosen expert may be replaced by a cached one within the router's top R, weights renormalised; 0 = off") \
    X(ROUTE_TRACE, "QWISP_ROUTE_TRACE", NULL, STR, NULL, 0, 0, "debug/bench: append every MoE routing decision to this file (one line per layer per chunk: layer, then the chunk's chosen experts)") \
    X(FAULT_READ, "QWISP_FAULT_READ", NULL, INT, "0", 0, 2147483647, "test/debug: fail the N-th expert disk read with EIO (0 = never)") \
    X(BACKEND, "QWISP_BACKEND", NULL, ENUM, "auto", 0, 0, "compute backend: auto (CUDA when a GPU is usable, else CPU) | cpu | cuda (fail when no GPU)") \
    X(CUDA_LIB, "QWISP_CUDA_LIB", NULL, STR, NULL, 0, 0, "path of libqwisp_cuda.so; unset = next to the qwisp binary, then ../lib/qwisp/") \
    X(DEVICE_VRAM, "QWISP_DEVICE_VRAM", NULL, STR, NULL, 0, 0, "CUDA: GB of device memory to use (emulate a smaller GPU, e.g. 8); unset = the free memory") \
    X(DEVICE_SLOTS, "QWISP_DEVICE_SLOTS", NULL, INT, "-1", -1, 65536, "CUDA: expert slots per layer in VRAM (streaming tier); 0 = resident; -1 = chosen from VRAM") \
    X(DEVICE_PIN, "QWISP_DEVICE_PIN", NULL, ENUM, "auto", 0, 0, "CUDA streaming tier: auto (page-lock the mmaped experts for direct DMA where the file is in memory: tmpfs, ramfs, hugetlbfs) | on (page-lock wherever the file is) | off (pageable copies)") \
    X(CHUNK, "QWISP_CHUNK", NULL, INT, "512", 1, 65536, "tokens per prefill chunk: the workspace (and on the GPU the activations the tier reserves) is sized for one; on the CUDA streaming tier every chunk copies its experts once, so a longer chunk copies less") \
    X(DEVICE_STAGE_MB, "QWISP_DEVICE_STAGE_MB", NULL, INT, "64", 0, 65536, "CUDA streaming tier, experts not page-locked: MB of page-locked buffers host threads fill from the mmaped file, so each expert copy is a DMA; 0 = the driver's pageable copies") \
    X(DEVICE_BATCH, "QWISP_DEVICE_BATCH", NULL, INT, "1", 0, 1, "CUDA, lanes path: 1 = the lanes' tokens of a step in one forward pass (every weight read once for all lanes), 0 = the lanes one after another (docs/cuda.md)") \
    X(DEVICE_LANES_GROUP, "QWISP_DEVICE_LANES_GROUP", NULL, INT, NULL, 0, 2, "CUDA, resident tier, lanes steps of 2..8 tokens: how the routed experts get their tokens: 0 = a tile per (token, pick), so an expert several tokens picked is read once for each; 1 = grouped by expert on the device, each expert read once, its tiles on the tensor cores as in prefill; 2 = grouped, on the dp4a kernels; unset = 1 for steps of 8 tokens, 0 below (measured on an H200); the same bits every way") \
    X(DEVICE_PDL, "QWISP_DEVICE_PDL", NULL, INT, "1", 0, 1, "CUDA: 1 = each kernel launched while the one before it finishes (programmatic dependent launch, compute capability 9.0+; it waits for its inputs, so the same bits), 0 = plain launches") \
    X(DEVICE_HOST_EXPERTS, "QWISP_DEVICE_HOST_EXPERTS", NULL, INT, "0", 0, 65536, "CUDA streaming tier, decode and lanes steps (8 tokens or fewer): the last N of each token's top-k picks are computed by the host CPU from the mapped file while the GPU copies and runs the others (those experts get the CPU kernels' bits); 0 = the GPU runs every pick") \
    X(DEVICE_MISSES, "QWISP_DEVICE_MISSES", NULL, ENUM, "copy", 0, 0, "CUDA streaming tier, decode and lanes steps (8 tokens or fewer): what happens to a pick whose expert is not in VRAM: copy (copied into the expert cache, then run on the GPU) | host (the host CPU computes it from the mapped file while the GPU runs the picks a fixed set of VRAM experts holds, loaded once; nothing copied in decode; those picks get the CPU kernels' bits)") \
    X(DEVICE_FIXED, "QWISP_DEVICE_FIXED", NULL, STR, NULL, 0, 0, "CUDA streaming tier with QWISP_DEVICE_MISSES=host: a routing trace (QWISP_ROUTE_TRACE's file) whose most often chosen experts of each layer make the fixed VRAM set; unset = each layer's first experts") \
    X(DEVICE_MMA, "QWISP_DEVICE_MMA", NULL, ENUM, "auto", 0, 0, "CUDA int8 block matmuls: auto (tensor cores for grouped expert tiles and dense matmuls of more than 8 tokens, dp4a for decode and lanes steps) | always | off (dp4a); same bits every way") \
    X(TEST_REPLY_FILE, "QWISP_TEST_REPLY_FILE", NULL, STR, NULL, 0, 0, "tests only: serve/chat replies are this file's text (the model still runs)")

typedef enum {
#define QW_OPT_ENUM_ID(id, ...) QW_OPT_##id,
    QW_OPTIONS(QW_OPT_ENUM_ID)
#undef QW_OPT_ENUM_ID
        QW_OPT_COUNT
} qw_opt;

/* Parses every option from the environment.  -1 + err on the first bad value. */
int qw_options_init(qw_error *err);
/* Overrides one option from text (e.g. a CLI flag); source is printed by config. */
int qw_opt_set(qw_opt id, const char *text, const char *source, qw_error *err);

/* Back to what qw_options_init gave it: the environment's value, else the
 * default, else unset (`qwisp ab`'s in-process arms switch knobs with it). */
void qw_opt_reset(qw_opt id);

int64_t qw_opt_int(qw_opt id);
const char *qw_opt_str(qw_opt id); /* NULL when unset and no default */
bool qw_opt_is_set(qw_opt id);     /* set by env or flag (not default) */
const char *qw_opt_name(qw_opt id);

/* One line per option: name, value, source, help. */
void qw_options_print(FILE *f);
/* The table (name, alias, default, values, help) as a Markdown table. */
void qw_options_print_markdown(FILE *f);

#endif
