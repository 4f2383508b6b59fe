#include "src/runtime/test_hooks.h"

#include <atomic>
#include <mutex>

namespace hetero::internal {
namespace {

std::atomic<bool> g_installed{false};
std::mutex g_mutex;
std::shared_ptr<const TestHooks> g_hooks;  // guarded by g_mutex

}  // namespace

void SetTestHooksForTesting(TestHooks hooks) {
  const bool any = hooks.stage_boundary || hooks.model_file_read || hooks.gpu_backend;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_hooks = any ? std::make_shared<const TestHooks>(std::move(hooks)) : nullptr;
  g_installed.store(any, std::memory_order_release);
}

std::shared_ptr<const TestHooks> CurrentTestHooks() {
  if (!g_installed.load(std::memory_order_acquire)) return nullptr;
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_hooks;
}

}  // namespace hetero::internal
