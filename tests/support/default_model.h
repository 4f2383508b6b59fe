// Tests that need the real default model skip, with the reason and the fix, when it is
// absent (`make test` fetches it, so in CI they always run).
#ifndef HETERO_TESTS_SUPPORT_DEFAULT_MODEL_H_
#define HETERO_TESTS_SUPPORT_DEFAULT_MODEL_H_

#include <filesystem>

#include "gtest/gtest.h"
#include "hetero/model.h"

#define HETERO_SKIP_WITHOUT_DEFAULT_MODEL()                                               \
  if (!std::filesystem::exists(::hetero::kDefaultModelPath)) {                            \
    GTEST_SKIP() << "default model not present at " << ::hetero::kDefaultModelPath        \
                 << " (run `bash scripts/setup.sh --model`)";                             \
  }

#endif  // HETERO_TESTS_SUPPORT_DEFAULT_MODEL_H_
