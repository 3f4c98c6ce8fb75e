/* uthash_wrap: the one place uthash is included. HASH_NONFATAL_OOM makes an
 * allocation failure leave the table unchanged instead of calling exit();
 * after HASH_ADD*, check UTH_ADDED(item, hh) and handle -ENOMEM. */
#ifndef UTHASH_WRAP_H
#define UTHASH_WRAP_H

#define HASH_NONFATAL_OOM 1
#include <uthash.h>
#include <utlist.h>

/* True when the last HASH_ADD of item through handle hh succeeded. */
#define UTH_ADDED(item, hh) ((item)->hh.tbl != NULL)

#endif
