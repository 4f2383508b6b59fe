#!/usr/bin/env bash
# Checks the link-level promises: libhetero has no dependency on CUDA, cuBLAS or the
# driver; the CUDA module never links libcuda (so it loads without a driver); each
# library exports only its own prefixed symbols.
#   check_library_linkage.sh LIBHETERO LIBHETERO_C [LIBHETERO_CUDA]
set -euo pipefail
core="$1"
c_library="$2"
module="${3:-}"
fail=0

needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }

echo "libhetero NEEDED: $(needed "$core" | tr '\n' ' ')"
if needed "$core" | grep -Ei 'cuda|cublas|nvidia|libnv'; then
  echo "FAIL: libhetero links CUDA libraries"; fail=1
fi
# Exported (defined, dynamic) symbols: C entry points hetero_*, or C++ in namespace hetero.
bad=$(nm -D --defined-only "$core" | awk '$2 ~ /[TtWwDdBbRrVviu]/ {print $3}' \
      | grep -Ev '^hetero_|^_ZN6hetero|^_ZNK6hetero|^_ZTVN6hetero|^_ZTIN6hetero|^_ZTSN6hetero|^_init$|^_fini$|^_edata$|^_end$|^__bss_start$' || true)
if [ -n "$bad" ]; then
  echo "FAIL: libhetero exports symbols outside hetero:"; echo "$bad" | head -20; fail=1
fi

# libhetero_c: the C ABI only.
bad=$(nm -D --defined-only "$c_library" | awk '{print $3}' \
      | grep -Ev '^hetero_|^_init$|^_fini$|^_edata$|^_end$|^__bss_start$' || true)
if [ -n "$bad" ]; then
  echo "FAIL: libhetero_c exports symbols outside hetero_*:"; echo "$bad" | head -20; fail=1
fi
if needed "$c_library" | grep -Ei 'cuda|cublas|nvidia|libnv'; then
  echo "FAIL: libhetero_c links CUDA libraries"; fail=1
fi

if [ -n "$module" ]; then
  echo "libhetero-cuda NEEDED: $(needed "$module" | tr '\n' ' ')"
  if needed "$module" | grep -E '^libcuda\.so|^libcudart\.so'; then
    echo "FAIL: the CUDA module links libcuda or the shared cudart"; fail=1
  fi
  bad=$(nm -D --defined-only "$module" | awk '{print $3}' \
        | grep -Ev '^hetero_cuda_|^_init$|^_fini$|^_edata$|^_end$|^__bss_start$' || true)
  if [ -n "$bad" ]; then
    echo "FAIL: the CUDA module exports symbols outside hetero_cuda_*:"; echo "$bad" | head -20; fail=1
  fi
fi
[ $fail -eq 0 ] && echo "linkage OK"
exit $fail
