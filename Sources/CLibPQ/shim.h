#ifndef CLIBPQ_SHIM_H
#define CLIBPQ_SHIM_H
// pkg-config adds -I/usr/include/postgresql; the fallback keeps Debian builds working without it.
#if __has_include(<libpq-fe.h>)
#include <libpq-fe.h>
#else
#include <postgresql/libpq-fe.h>
#endif
#endif
