/* uthash_wrap: the one place uthash is included. HASH_NONFATAL_OOM makes an
 * allocation failure leave the table unchanged instead of calling exit();
 * after HASH_ADD*, check UTH_ADDED(item, hh) and handle -ENOMEM. */
#ifndef UTHASH_WRAP_H
#define UTHASH_WRAP_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Keys are hashed a word at a time (uthash's default, Jenkins, goes byte
 * by byte: three times slower on the 72-byte mapping key). */
static inline unsigned uth_hash_words(const void *key, size_t len)
{
    const unsigned char *p = key;
    uint64_t x = 0x9e3779b97f4a7c15ull ^ len;
    /* Unrolled: the keys' lengths are constants (8, 64, 72 bytes), so the
     * loop's own counting goes; the value is the same. */
#pragma GCC unroll 9
    for (; len >= 8; p += 8, len -= 8) {
        uint64_t w;
        memcpy(&w, p, sizeof w);
        x = (x ^ w) * 0xbf58476d1ce4e5b9ull;
        x ^= x >> 31;
    }
    if (len) {
        uint64_t w = 0;
        memcpy(&w, p, len);
        x = (x ^ w) * 0xbf58476d1ce4e5b9ull;
        x ^= x >> 31;
    }
    x *= 0x94d049bb133111ebull;
    return (unsigned)(x ^ (x >> 32));
}

#define HASH_FUNCTION(keyptr, keylen, hashv) ((hashv) = uth_hash_words((keyptr), (keylen)))
#define HASH_NONFATAL_OOM 1
#include <uthash.h>
#include <utlist.h>

/* A table starts with 4 buckets, not 32, and doubles as it fills. The
 * process-local tables of an IPC cycle go from empty to one record and back
 * every cycle, and uthash makes (and zeroes) a fresh table each time: 64
 * bytes of buckets instead of 512 take that off every export, open and free.
 * (uthash.h defines them unconditionally: read where HASH_ADD expands.) */
#undef HASH_INITIAL_NUM_BUCKETS
#undef HASH_INITIAL_NUM_BUCKETS_LOG2
#define HASH_INITIAL_NUM_BUCKETS 4U
#define HASH_INITIAL_NUM_BUCKETS_LOG2 2U

/* True when the last HASH_ADD of item through handle hh succeeded. */
#define UTH_ADDED(item, hh) ((item)->hh.tbl != NULL)

#endif
