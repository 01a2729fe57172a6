/* The platform header: the first include of every tern .c file. It sets the
 * feature macros once so that every translation unit sees the same libc
 * declarations, and holds the handful of compiler helpers the code uses. */
#ifndef TN_CORE_PLATFORM_H
#define TN_CORE_PLATFORM_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#ifndef _FILE_OFFSET_BITS
#define _FILE_OFFSET_BITS 64
#endif

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TN_ARRAY_SIZE(a)                  (sizeof(a) / sizeof((a)[0]))
#define TN_MIN(a, b)                      ((a) < (b) ? (a) : (b))
#define TN_MAX(a, b)                      ((a) > (b) ? (a) : (b))
#define TN_LIKELY(x)                      __builtin_expect(!!(x), 1)
#define TN_UNLIKELY(x)                    __builtin_expect(!!(x), 0)
#define TN_CONTAINER_OF(ptr, type, field) ((type *)((char *)(ptr)-offsetof(type, field)))
#define TN_PRINTF(f, a)                   __attribute__((format(printf, f, a)))
#define TN_NORETURN                       __attribute__((noreturn))

#define TN_KIB ((uint64_t)1024)
#define TN_MIB (1024 * TN_KIB)
#define TN_GIB (1024 * TN_MIB)

/* Little-endian encoders for on-disk structures. Every on-disk integer in
 * tern is little-endian, written through these so the layout does not
 * depend on the host. The bytes are written out one by one, not in a
 * loop: GCC merges straight-line byte stores (and loads) into one access
 * (a byte swap on a big-endian host) but left the loops as loops, ~7
 * instructions a byte on every record header and WAL frame. */
static inline void tn_put_u16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}
static inline void tn_put_u32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}
static inline void tn_put_u64(unsigned char *p, uint64_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
    p[4] = (unsigned char)(v >> 32);
    p[5] = (unsigned char)(v >> 40);
    p[6] = (unsigned char)(v >> 48);
    p[7] = (unsigned char)(v >> 56);
}
static inline uint16_t tn_get_u16(const unsigned char *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t tn_get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t tn_get_u64(const unsigned char *p)
{
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24 |
           (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 | (uint64_t)p[6] << 48 |
           (uint64_t)p[7] << 56;
}

#endif
