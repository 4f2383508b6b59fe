// Fault injection for tests, through hooks rather than build flags: the production code
// calls these at a few points (a stage's start and end, each chunk of a model file read,
// the choice of the GPU backend), and with no hooks installed each call costs one relaxed
// atomic load. Tests install hooks to cancel a task at a stage boundary, to change a model
// file while it is being read, or to give the engine a "GPU" backend that fails on demand.
// Never installed by the library itself.
#ifndef HETERO_RUNTIME_TEST_HOOKS_H_
#define HETERO_RUNTIME_TEST_HOOKS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "hetero/scheduler.h"
#include "src/runtime/backend.h"

namespace hetero {
class Model;
}

namespace hetero::internal {

struct TestHooks {
  // Before (`begin`) and after each stage of task `task_id` (the agent loop's rounds
  // included). A hook may cancel the session; the task then ends Cancelled at that boundary.
  std::function<void(uint64_t task_id, Stage stage, bool begin)> stage_boundary;
  // After each chunk of a model file is read into memory (`bytes_read` so far of `size`).
  std::function<void(size_t bytes_read, size_t size)> model_file_read;
  // When set, the engine's GPUs are `stand_in_gpus` backends made by this (whatever the
  // machine has), GPU `ordinal` each, with the CPU backend's KV block size so that KV moves
  // between them as is. An error makes that GPU unavailable, with the error as the reason.
  std::function<absl::StatusOr<std::unique_ptr<Backend>>(const Model& model, int kv_block_tokens,
                                                         int kv_capacity_tokens, int max_sequences, int ordinal)>
      gpu_backend;
  int stand_in_gpus = 1;
};

// Installs `hooks` for the whole process (replacing any), or removes them with an empty
// TestHooks. Tests only; install before the code under test runs.
void SetTestHooksForTesting(TestHooks hooks);

// The installed hooks, or null (almost always).
std::shared_ptr<const TestHooks> CurrentTestHooks();

}  // namespace hetero::internal

#endif  // HETERO_RUNTIME_TEST_HOOKS_H_
