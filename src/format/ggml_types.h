/* ggml_types.h — the table of every ggml tensor type a GGUF file can name:
 * its ggml spelling, elements per block and bytes per block.
 *
 * This is deliberately separate from kernels/quant.h (qw_type_*): the format
 * layer must validate and describe files holding types qwisp cannot compute
 * with (q5_0, q4_1, iq2_xxs, tq1_0, …) so that `qwisp info` and the reader work on any
 * GGUF, while quant.h speaks only for the types the kernels implement.
 * Ids that ggml has retired (4, 5, 31–33, 36–38) are unknown here: no GGUF
 * may contain them.
 */
#ifndef QWISP_FORMAT_GGML_TYPES_H
#define QWISP_FORMAT_GGML_TYPES_H

#include <stddef.h>
#include <stdint.h>

typedef struct qw_ggml_type_info {
    const char *name;    /* ggml spelling: "f32", "q8_0", "q4_K", … */
    uint32_t blck_elems; /* elements per block; 1 for plain scalar types */
    uint32_t blck_bytes; /* bytes per block */
} qw_ggml_type_info;

/* Number of type ids the table spans (ids >= this are unknown). */
#define QW_GGML_TYPE_ID_LIMIT 43u

/* Info for a ggml type id, or NULL if the id is unknown or retired. */
const qw_ggml_type_info *qw_ggml_type_info_of(uint32_t type);
/* ggml name, or "unknown". */
const char *qw_ggml_type_name(uint32_t type);
/* Case-insensitive name lookup; -1 if unknown. */
int qw_ggml_type_from_name(const char *name);

/* Byte size of a tensor of `type` with dims ne[0..n_dims): 0 on success and
 * *nbytes set; -1 if the type is unknown, n_dims is not 1..4, a dim is 0,
 * ne[0] is not a multiple of the block size, the element count exceeds
 * INT64_MAX, or the byte size overflows size_t.  `why` (may be NULL) gets a
 * short static reason on failure. */
int qw_ggml_tensor_nbytes(uint32_t type, uint32_t n_dims, const uint64_t *ne, uint64_t *nbytes,
                          const char **why);

#endif
