/* A stand-in for libnvidia-ml.so.1 in tests: two GPUs, GPU 0 with a total-energy counter
 * (millijoules), GPU 1 with power only (milliwatts). Tests set the readings through the
 * fake_nvml_* functions. */
#include <stddef.h>

static unsigned long long energy_mj = 1000;
static unsigned int power_mw = 50000;
static int initialized = 0;
static int fail_init = 0;

void fake_nvml_set_energy_mj(unsigned long long mj) { energy_mj = mj; }
void fake_nvml_set_power_mw(unsigned int mw) { power_mw = mw; }
void fake_nvml_fail_init(int fail) { fail_init = fail; }
int fake_nvml_initialized(void) { return initialized; }

int nvmlInit_v2(void) {
  if (fail_init) return 9; /* NVML_ERROR_DRIVER_NOT_LOADED */
  ++initialized;
  return 0;
}
int nvmlShutdown(void) {
  --initialized;
  return 0;
}
const char* nvmlErrorString(int r) { return r == 9 ? "Driver Not Loaded" : r == 3 ? "Not Supported" : "Unknown Error"; }
int nvmlDeviceGetCount_v2(unsigned int* count) {
  *count = 2;
  return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  if (index > 1) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
  *device = (void*)(size_t)(index + 1);
  return 0;
}
int nvmlDeviceGetTotalEnergyConsumption(void* device, unsigned long long* mj) {
  if ((size_t)device != 1) return 3; /* GPU 1: not supported */
  *mj = energy_mj;
  return 0;
}
int nvmlDeviceGetPowerUsage(void* device, unsigned int* mw) {
  (void)device;
  *mw = power_mw;
  return 0;
}
