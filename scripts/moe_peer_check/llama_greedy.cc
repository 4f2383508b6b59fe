// llama_greedy FILE.gguf PROMPT...: llama.cpp's side of scripts/moe_peer_check.sh. For each
// PROMPT (token ids separated by commas), the logits after the prompt ("all" line) and 16
// greedy tokens with each step's top-2 margin ("tokens" line), as tests/peer/moe_greedy.cc
// prints them.
// Built against a llama.cpp checkout by the script; uses only llama.h.
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "llama.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: llama_greedy FILE.gguf PROMPT...\n");
    return 2;
  }
  std::vector<std::vector<llama_token>> prompts;
  for (int i = 2; i < argc; ++i) {
    std::vector<llama_token> ids;
    std::stringstream list(argv[i]);
    for (std::string id; std::getline(list, id, ',');) ids.push_back(std::atoi(id.c_str()));
    prompts.push_back(ids);
  }
  llama_backend_init();
  llama_model* model = llama_model_load_from_file(argv[1], llama_model_default_params());
  if (model == nullptr) {
    std::fprintf(stderr, "llama.cpp could not load %s\n", argv[1]);
    return 1;
  }
  const int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  for (std::vector<llama_token> prompt : prompts) {
    llama_context_params params = llama_context_default_params();
    params.n_ctx = 256;
    llama_context* ctx = llama_init_from_model(model, params);
    if (ctx == nullptr || llama_decode(ctx, llama_batch_get_one(prompt.data(), static_cast<int32_t>(prompt.size())))) {
      std::fprintf(stderr, "llama.cpp could not decode the prompt\n");
      return 1;
    }
    const float* logits = llama_get_logits_ith(ctx, -1);
    std::printf("all");
    for (int i = 0; i < vocab; ++i) std::printf(" %.7g", logits[i]);
    std::printf("\ntokens");
    for (int step = 0; step < 16; ++step) {
      int best = 0;
      for (int i = 1; i < vocab; ++i) best = logits[i] > logits[best] ? i : best;
      float second = -1e30f;
      for (int i = 0; i < vocab; ++i) second = i != best && logits[i] > second ? logits[i] : second;
      std::printf(" %d(%.4f)", best, logits[best] - second);
      llama_token next = best;
      if (llama_decode(ctx, llama_batch_get_one(&next, 1))) return 1;
      logits = llama_get_logits_ith(ctx, -1);
    }
    std::printf("\n");
    llama_free(ctx);
  }
  llama_model_free(model);
  return 0;
}
