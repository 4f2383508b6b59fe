#ifndef HETERO_VERSION_H_
#define HETERO_VERSION_H_

#include "hetero/export.h"

#define HETERO_VERSION_MAJOR 0
#define HETERO_VERSION_MINOR 1
#define HETERO_VERSION_PATCH 0

namespace hetero {

// The library version, "MAJOR.MINOR.PATCH".
HETERO_EXPORT const char* VersionString();

}  // namespace hetero

#endif  // HETERO_VERSION_H_
