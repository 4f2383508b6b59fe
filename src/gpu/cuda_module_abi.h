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

#define HETERO_CUDA_MODULE_ABI_VERSION 9

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

/* ---- The model runtime (ABI 3; 4 added the K formats, 5 mixtures of experts, 6 experts
 * evaluated on the host, 7 expert counts, 8 Q2_K/Q3_K/IQ4_NL/IQ4_XS blocks, 9 no float16
 * copy of a block-format matrix or of the embeddings: the steps of the shared model definition,
 * src/runtime/models/model_definition.h, each present or absent per layer). libhetero prepares every tensor on the host (it owns the
 * GGUF reader and the dequantizers) and the module uploads them once. Sequences and their
 * KV block tables live in libhetero; the module owns the device KV pool, whose blocks have
 * the CPU backend's layout ([layer][k|v][kv head][slot][dim], float32), so a block copied
 * from one device is valid on the other. */

/* Result codes of the model functions; a message is written on failure. */
enum {
  HETERO_CUDA_OK = 0,
  HETERO_CUDA_INVALID_ARGUMENT = 1,
  HETERO_CUDA_OUT_OF_MEMORY = 2,
  HETERO_CUDA_DEVICE_ERROR = 3
};

/* Weight formats the module reads. Quantized blocks are used as stored in GGUF (ggml type
 * ids) and are a matrix's only copy; the module dequantizes them itself where cuBLAS needs
 * float16. */
enum {
  HETERO_CUDA_WEIGHTS_F16 = 1, /* float16 weights (any format libhetero converts) */
  HETERO_CUDA_WEIGHTS_Q4_0 = 2,
  HETERO_CUDA_WEIGHTS_Q4_1 = 3,
  HETERO_CUDA_WEIGHTS_Q5_0 = 6,
  HETERO_CUDA_WEIGHTS_Q5_1 = 7,
  HETERO_CUDA_WEIGHTS_Q8_0 = 8,
  HETERO_CUDA_WEIGHTS_Q2_K = 10, /* 256-element super-blocks: cols a multiple of 256 */
  HETERO_CUDA_WEIGHTS_Q3_K = 11,
  HETERO_CUDA_WEIGHTS_Q4_K = 12,
  HETERO_CUDA_WEIGHTS_Q5_K = 13,
  HETERO_CUDA_WEIGHTS_Q6_K = 14,
  HETERO_CUDA_WEIGHTS_IQ4_NL = 20,
  HETERO_CUDA_WEIGHTS_IQ4_XS = 23 /* 256-element super-blocks */
};

typedef struct hetero_cuda_matrix {
  int32_t format;        /* HETERO_CUDA_WEIGHTS_* */
  int32_t rows;          /* outputs */
  int32_t cols;          /* inputs, a multiple of 32 (of 256 for the K formats) */
  const void* blocks;    /* quantized blocks, rows * row_bytes (NULL for F16) */
  uint64_t blocks_bytes;
  /* rows x cols float16, row-major: an F16 matrix's weights. Ignored for a block format,
   * whose blocks are the only copy (prompts' cuBLAS GEMMs read them dequantized a matrix
   * at a time into device scratch). */
  const uint16_t* f16;
} hetero_cuda_matrix;

/* FFN activations: the gate's activation times up. */
enum {
  HETERO_CUDA_ACTIVATION_SILU = 0,      /* SwiGLU */
  HETERO_CUDA_ACTIVATION_GELU_TANH = 1  /* GeGLU, GELU's tanh form */
};

typedef struct hetero_cuda_layer {
  const float* attn_norm; /* n_embd */
  const float* ffn_norm;
  const float* q_bias;    /* NULL without attention biases */
  const float* k_bias;
  const float* v_bias;
  /* RMS norms of q and k after the biases, before RoPE (NULL: none): per head (head_dim
   * weights, shared by the heads) or, with qk_norm_per_head 0, over each row's whole q
   * (n_heads * head_dim weights) and whole k (n_kv_heads * head_dim). */
  const float* q_norm;
  const float* k_norm;
  int32_t qk_norm_per_head;
  /* RMS norms of the attention and FFN outputs before they join the residual (NULL: none). */
  const float* post_attn_norm; /* n_embd */
  const float* post_ffn_norm;
  int32_t rope_table;     /* index into the model's RoPE tables */
  int32_t sliding_window; /* > 0: a query sees its last sliding_window positions (itself included) */
  hetero_cuda_matrix q, k, v, o, gate, up, down; /* gate/up/down: rows 0 in a mixture-of-experts layer */
  /* A mixture-of-experts FFN in place of gate/up/down (n_experts 0: none). The router's
   * float32 weights (n_experts x n_embd); each row runs its n_experts_used most probable
   * experts (softmax; the chosen probabilities renormalised to sum 1 where
   * normalize_expert_weights), their outputs summed with those weights. Each kind of expert
   * matrix is stacked, expert e's rows after expert e-1's, as GGUF's 3-D tensors store them:
   * expert_gate/expert_up n_experts * expert_n_ff rows of n_embd, expert_down n_experts *
   * n_embd rows of expert_n_ff.
   * expert_slot (n_experts entries; NULL: every expert, in order) says where each expert's
   * rows are in the stacked matrices, which then hold only the experts with a slot (0 rows
   * when none has one); an expert of slot -1 is evaluated by the model's host_experts. */
  int32_t n_experts, n_experts_used, expert_n_ff, normalize_expert_weights;
  const float* router;
  hetero_cuda_matrix expert_gate, expert_up, expert_down;
  const int32_t* expert_slot;
  /* A shared expert every token also runs, its output times sigmoid(h . shared_gate_input)
   * (NULL: none); shared_n_ff wide. */
  const float* shared_gate_input;
  int32_t shared_n_ff;
  hetero_cuda_matrix shared_gate, shared_up, shared_down;
} hetero_cuda_layer;

/* Routed experts the device does not hold, evaluated by the host for one pass of a layer
 * (ABI 6). Called in stream order from a CUDA host-callback thread, so it must not call
 * CUDA. h: rows x n_embd (the FFN norm's output); choices and weights: rows x
 * n_experts_used, as the device chose them. Writes into out (rows x n_embd) each row's sum
 * of weight x expert(h) over its chosen experts of slot -1 (zeros for a row with none).
 * Returns 0, or nonzero with a message, and the pass then fails with it. */
typedef int32_t (*hetero_cuda_host_experts_fn)(void* context, int32_t layer, int32_t rows, const float* h,
                                               const int32_t* choices, const float* weights, float* out,
                                               char* message, size_t message_size);

typedef struct hetero_cuda_model_desc {
  int32_t n_layers, n_embd, n_heads, n_kv_heads, head_dim, n_ff, n_vocab, context_length;
  int32_t rope_dim;       /* rotated dimensions per head */
  int32_t rope_neox;      /* 1: pairs (i, i + rope_dim / 2); 0: pairs (2i, 2i + 1) */
  int32_t n_rope_tables;  /* distinct RoPE frequency sets (e.g. Gemma 3's local and global layers) */
  const double* rope_inv_freq; /* n_rope_tables x rope_dim / 2 angles per position, scaling folded in */
  float rope_attn_factor; /* multiplies the rotated dimensions of q and k */
  float rms_norm_eps;
  float embedding_scale;  /* multiplies each token's embedding */
  float attention_scale;  /* multiplies q.k */
  float residual_scale;   /* multiplies each block's output before it joins the residual */
  float logit_scale;      /* multiplies the logits */
  int32_t activation;     /* HETERO_CUDA_ACTIVATION_* */
  int32_t kv_block_tokens;
  int32_t kv_blocks;      /* device KV pool size in blocks */
  int32_t max_rows;       /* most tokens in one forward pass */
  int32_t device;         /* CUDA device index */
  hetero_cuda_matrix token_embd; /* n_vocab rows of n_embd, in any format above */
  const float* output_norm;
  /* n_vocab x n_embd; with the same format, shape and data pointer as token_embd (a tied
   * output) the module holds the one copy. */
  hetero_cuda_matrix output;
  const hetero_cuda_layer* layers; /* n_layers */
  hetero_cuda_host_experts_fn host_experts; /* required when an expert_slot has a -1 */
  void* host_experts_context;
} hetero_cuda_model_desc;

/* One forward pass over `n_rows` tokens of one or more sequences. Row r appends tokens[r]
 * at positions[r] to sequence seq_of_row[r]; its keys are positions 0..positions[r] found
 * through block_tables[seq_of_row[r] * table_stride + position / kv_block_tokens]. Logits
 * (n_vocab floats each) are written for rows logit_rows[0..n_logit_rows) into `logits`
 * when it is not NULL, and their greedy choices (the first index of the largest logit)
 * into `greedy_tokens` when that is not NULL; at least one of the two is given. */
typedef struct hetero_cuda_forward_args {
  int32_t n_rows;
  const int32_t* tokens;
  const int32_t* positions;
  const int32_t* seq_of_row;
  int32_t n_seqs;
  const int32_t* block_tables;
  int32_t table_stride;
  int32_t n_logit_rows;
  const int32_t* logit_rows;
  float* logits;
  int32_t* greedy_tokens;
} hetero_cuda_forward_args;

typedef struct hetero_cuda_model hetero_cuda_model;

typedef int32_t (*hetero_cuda_model_create_fn)(const hetero_cuda_model_desc* desc, hetero_cuda_model** model,
                                                char* message, size_t message_size);
typedef void (*hetero_cuda_model_destroy_fn)(hetero_cuda_model* model);
typedef int32_t (*hetero_cuda_model_forward_fn)(hetero_cuda_model* model, const hetero_cuda_forward_args* args,
                                                 char* message, size_t message_size);
/* Copies whole KV blocks between the device pool and host memory (to_host: 1 device to
 * host, 0 host to device), `host` holding n_blocks blocks back to back, on the module's
 * copy stream; returns when the copy is complete. May run on another thread while a
 * forward pass runs, provided no pass in flight reads or writes these blocks: the copy
 * then overlaps the pass. Pinned host memory (hetero_cuda_host_alloc) copies at full speed. */
typedef int32_t (*hetero_cuda_model_copy_kv_fn)(hetero_cuda_model* model, int32_t to_host, const int32_t* blocks,
                                                 int32_t n_blocks, float* host, char* message, size_t message_size);
/* How often each routed expert of mixture-of-experts layer `layer` was chosen since the
 * model was created (every row of every pass, the experts left to the host included; ABI
 * 7): n_experts counts into `counts`. May run on another thread while a pass runs; the
 * counts then lag by that pass. INVALID_ARGUMENT for a layer without experts or another
 * count. */
typedef int32_t (*hetero_cuda_model_expert_counts_fn)(hetero_cuda_model* model, int32_t layer, uint64_t* counts,
                                                      int32_t n_experts, char* message, size_t message_size);
/* Device memory the model holds (weights + KV pool + scratch), bytes. */
typedef uint64_t (*hetero_cuda_model_device_bytes_fn)(const hetero_cuda_model* model);

/* Page-locked host memory (cudaHostAlloc), for the transfer layer's pool. */
typedef int32_t (*hetero_cuda_host_alloc_fn)(uint64_t bytes, void** out, char* message, size_t message_size);
typedef void (*hetero_cuda_host_free_fn)(void* p);
/* Host<->device bandwidth over `bytes` copied `repetitions` times each way from pinned (or,
 * with pinned = 0, pageable) host memory, GB/s; also a plain cudaMemcpyAsync loop baseline. */
typedef int32_t (*hetero_cuda_measure_bandwidth_fn)(int32_t device, uint64_t bytes, int32_t repetitions,
                                                     int32_t pinned, double* host_to_device_gb_s,
                                                     double* device_to_host_gb_s, char* message,
                                                     size_t message_size);

#define HETERO_CUDA_MODEL_CREATE_SYMBOL "hetero_cuda_model_create"
#define HETERO_CUDA_MODEL_DESTROY_SYMBOL "hetero_cuda_model_destroy"
#define HETERO_CUDA_MODEL_FORWARD_SYMBOL "hetero_cuda_model_forward"
#define HETERO_CUDA_MODEL_COPY_KV_SYMBOL "hetero_cuda_model_copy_kv"
#define HETERO_CUDA_MODEL_DEVICE_BYTES_SYMBOL "hetero_cuda_model_device_bytes"
#define HETERO_CUDA_MODEL_EXPERT_COUNTS_SYMBOL "hetero_cuda_model_expert_counts"
#define HETERO_CUDA_HOST_ALLOC_SYMBOL "hetero_cuda_host_alloc"
#define HETERO_CUDA_HOST_FREE_SYMBOL "hetero_cuda_host_free"
#define HETERO_CUDA_MEASURE_BANDWIDTH_SYMBOL "hetero_cuda_measure_bandwidth"

#ifdef __cplusplus
}
#endif

#endif /* HETERO_GPU_CUDA_MODULE_ABI_H_ */
