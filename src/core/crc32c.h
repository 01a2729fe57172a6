/* CRC32C (Castagnoli), the checksum on every record, index, WAL frame and
 * checkpoint. Uses the SSE4.2 crc32 instruction when the CPU has it and a
 * slicing-by-8 table otherwise; both produce identical values.
 *
 * Values chain: tn_crc32c(tn_crc32c(0, a), b) == tn_crc32c(0, a || b).
 * Thread safety: any thread (the table is built before main). */
#ifndef TN_CORE_CRC32C_H
#define TN_CORE_CRC32C_H

#include "core/platform.h"

uint32_t tn_crc32c(uint32_t crc, const void *data, size_t len);

/* The CRC of a message whose CRC was crc, after n of its bytes changed
 * from was[n] to now[n] with `after` bytes following them: O(n + log
 * after), without reading the rest of the message. Same as recomputing it
 * whole; a message that did not match its CRC still does not. */
uint32_t tn_crc32c_patch(uint32_t crc, const void *was, const void *now, size_t n, size_t after);

/* The two implementations, exposed for tests and benchmarks. hw returns
 * the same as sw; call it only when tn_crc32c_hw_available(). */
uint32_t tn_crc32c_sw(uint32_t crc, const void *data, size_t len);
uint32_t tn_crc32c_hw(uint32_t crc, const void *data, size_t len);
bool tn_crc32c_hw_available(void);

#endif
