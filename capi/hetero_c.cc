// C ABI entry points. None of them can fail or throw yet; the status/handle machinery
// arrives with the C ABI issue.
#include "hetero.h"

#include "hetero/version.h"

extern "C" {

uint32_t hetero_abi_version(void) { return HETERO_ABI_VERSION; }

const char* hetero_version_string(void) { return hetero::VersionString(); }

}  // extern "C"
