// Symbol visibility for the hetero shared library. The library is built with
// -fvisibility=hidden; only declarations marked HETERO_EXPORT are part of its ABI.
#ifndef HETERO_EXPORT_H_
#define HETERO_EXPORT_H_

#if defined(_WIN32)
#if defined(HETERO_BUILDING_LIBRARY)
#define HETERO_EXPORT __declspec(dllexport)
#else
#define HETERO_EXPORT __declspec(dllimport)
#endif
#else
#define HETERO_EXPORT __attribute__((visibility("default")))
#endif

#endif  // HETERO_EXPORT_H_
