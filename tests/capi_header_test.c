/* Compiles the public C header as C99 and checks the ABI version functions. */
#include "hetero.h"

#include <stdio.h>
#include <string.h>

int main(void) {
  if (hetero_abi_version() != HETERO_ABI_VERSION) {
    fprintf(stderr, "ABI version %u, header says %u\n", hetero_abi_version(), (unsigned)HETERO_ABI_VERSION);
    return 1;
  }
  const char* version = hetero_version_string();
  if (version == NULL || strchr(version, '.') == NULL) {
    fprintf(stderr, "bad version string\n");
    return 1;
  }
  printf("hetero %s, ABI %u\n", version, hetero_abi_version());
  return 0;
}
