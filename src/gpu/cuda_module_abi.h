/* The C interface between libhetero (which never links CUDA) and the CUDA backend module
 * libhetero-cuda.so, which libhetero loads with dlopen when present. Plain C so that the
 * two sides can be built by different compilers; bump the ABI version on any change. */
#ifndef HETERO_GPU_CUDA_MODULE_ABI_H_
#define HETERO_GPU_CUDA_MODULE_ABI_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HETERO_CUDA_MODULE_ABI_VERSION 1

/* Outcome of a probe. */
enum {
  HETERO_CUDA_PROBE_OK = 0,        /* at least one device */
  HETERO_CUDA_PROBE_NO_DEVICE = 1, /* no driver, stub driver, or no GPU: run CPU only */
  HETERO_CUDA_PROBE_ERROR = 2      /* a driver or runtime error; see message */
};

typedef struct hetero_cuda_device_desc {
  char name[256];
  int32_t compute_capability_major;
  int32_t compute_capability_minor;
  uint64_t total_memory_bytes;
  int32_t multiprocessor_count;
} hetero_cuda_device_desc;

typedef struct hetero_cuda_probe_result {
  int32_t status;         /* HETERO_CUDA_PROBE_* */
  int32_t cuda_error;     /* the cudaError_t behind a non-OK status, else 0 */
  int32_t driver_version; /* cudaDriverGetVersion, 0 without a driver */
  int32_t runtime_version;
  int32_t device_count;   /* devices found (may exceed the descriptors filled) */
  char message[512];      /* human-readable summary or reason */
} hetero_cuda_probe_result;

typedef int32_t (*hetero_cuda_module_abi_version_fn)(void);
typedef void (*hetero_cuda_module_probe_fn)(hetero_cuda_probe_result* result,
                                            hetero_cuda_device_desc* devices,
                                            int32_t max_devices);

#define HETERO_CUDA_MODULE_ABI_VERSION_SYMBOL "hetero_cuda_module_abi_version"
#define HETERO_CUDA_MODULE_PROBE_SYMBOL "hetero_cuda_module_probe"

#ifdef __cplusplus
}
#endif

#endif /* HETERO_GPU_CUDA_MODULE_ABI_H_ */
