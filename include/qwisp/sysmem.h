/* sysmem.h — memory probes (memory/sysmem.c): physical RAM and the cgroup
 * limit that binds this process.  Both return bytes, 0 when unknown / none.
 */
#ifndef QWISP_SYSMEM_H
#define QWISP_SYSMEM_H

#include <stdint.h>

uint64_t qw_ram_physical(void);
/* Smallest memory limit of this process's cgroup and its ancestors. */
uint64_t qw_ram_cgroup_limit(void);

#endif
