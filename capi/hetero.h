/* hetero C ABI. Pure C99; every symbol is prefixed hetero_. This header grows with the
 * C ABI issue; what is here is stable. */
#ifndef HETERO_C_H_
#define HETERO_C_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define HETERO_C_API __declspec(dllimport)
#else
#define HETERO_C_API __attribute__((visibility("default")))
#endif

/* Incremented on every incompatible change of this header. */
#define HETERO_ABI_VERSION 1

/* The ABI version the loaded library implements; compare with HETERO_ABI_VERSION.
 * Thread-safe. */
HETERO_C_API uint32_t hetero_abi_version(void);

/* "MAJOR.MINOR.PATCH" of the loaded library; a static string, never freed.
 * Thread-safe. */
HETERO_C_API const char* hetero_version_string(void);

#ifdef __cplusplus
}
#endif

#endif /* HETERO_C_H_ */
