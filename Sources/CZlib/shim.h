#ifndef CZLIB_SHIM_H
#define CZLIB_SHIM_H
#include <zlib.h>
// inflateInit2 is a macro; wrap it so Swift can call it.
static inline int shim_inflateInit2(z_streamp strm, int windowBits) { return inflateInit2(strm, windowBits); }
static inline int shim_deflateInit2(z_streamp strm, int level, int windowBits) {
    return deflateInit2(strm, level, Z_DEFLATED, windowBits, 8, Z_DEFAULT_STRATEGY);
}
#endif
