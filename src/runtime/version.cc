#include "hetero/version.h"

#define HETERO_STRINGIFY_INNER(x) #x
#define HETERO_STRINGIFY(x) HETERO_STRINGIFY_INNER(x)

namespace hetero {

const char* VersionString() {
  return HETERO_STRINGIFY(HETERO_VERSION_MAJOR) "." HETERO_STRINGIFY(
      HETERO_VERSION_MINOR) "." HETERO_STRINGIFY(HETERO_VERSION_PATCH);
}

}  // namespace hetero
