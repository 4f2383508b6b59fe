// The C header compiles as C++ and links against libhetero_c.
#include "hetero.h"

#include <cstdio>

int main() {
  if (hetero_abi_version() != HETERO_ABI_VERSION) return 1;
  hetero_run_options options;
  hetero_run_options_default(&options);
  std::printf("hetero %s from C++, max_tokens default %d\n", hetero_version_string(), options.max_tokens);
  return options.struct_size == sizeof(hetero_run_options) ? 0 : 1;
}
