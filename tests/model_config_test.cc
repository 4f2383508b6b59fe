// ModelConfig from metadata and the tensor checks, on tiny models the tests write, and
// on the default model when it is present.
#include <cstdlib>
#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hetero/model.h"
#include "src/runtime/model_config.h"
#include "src/runtime/model_impl.h"
#include "src/runtime/models/model_definition.h"
#include "tests/support/default_model.h"
#include "tests/support/status_matchers.h"
#include "tests/support/tiny_model.h"

namespace hetero {
namespace {

using ::hetero::testing::StatusIs;
using ::hetero::testing::TinyModelBuilder;
using ::hetero::testing::TinyModelOptions;
using ::hetero::testing::WriteTempFile;
using ::hetero::testing::WriteTinyModel;
using ::testing::HasSubstr;

absl::StatusOr<std::unique_ptr<Model>> LoadTiny(const TinyModelOptions& options, const std::string& name) {
  return Model::Load(WriteTinyModel(options, name));
}

TEST(ModelConfigTest, TinyLlama) {
  TinyModelOptions o;
  o.n_layers = 3;
  o.n_embd = 48;
  o.n_heads = 6;
  o.n_kv_heads = 2;
  o.n_ff = 80;
  o.n_vocab = 77;
  o.context_length = 512;
  o.rope_freq_base = 500000.0f;
  o.rms_norm_eps = 1e-6f;
  auto model = LoadTiny(o, "tiny_llama.gguf");
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelConfig& c = (*model)->config();
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.name, "tiny-llama");
  EXPECT_EQ(c.n_layers, 3);
  EXPECT_EQ(c.n_embd, 48);
  EXPECT_EQ(c.n_heads, 6);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.head_dim_v, 8);
  EXPECT_EQ(c.rope_dim, 8);
  EXPECT_EQ(c.n_ff, 80);
  EXPECT_EQ(c.n_vocab, 77);
  EXPECT_EQ(c.context_length, 512);
  EXPECT_EQ(c.rope_freq_base, 500000.0f);
  EXPECT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_EQ(c.rope_style, RopeStyle::kNormal);
  EXPECT_EQ(c.rope_scaling, RopeScaling::kNone);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_TRUE((*model)->unused_tensors().empty());
  // 2 + 9 per layer.
  EXPECT_EQ((*model)->tensors().size(), 2u + 9u * 3u);
  uint64_t params = 0;
  for (const TensorSummary& t : (*model)->tensors()) params += t.n_elements;
  EXPECT_EQ((*model)->parameter_count(), params);
  EXPECT_EQ((*model)->gguf_version(), 3u);
}

TEST(ModelConfigTest, TinyQwen2HasBiasesAndNeoxRope) {
  TinyModelOptions o;
  o.architecture = "qwen2";
  o.tied_embeddings = false;
  o.weight_type = TensorType::kF16;
  auto model = LoadTiny(o, "tiny_qwen2.gguf");
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelConfig& c = (*model)->config();
  EXPECT_EQ(c.architecture, "qwen2");
  EXPECT_EQ(c.rope_style, RopeStyle::kNeox);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.tied_embeddings);
}

TEST(ModelConfigTest, MissingTensorIsNamed) {
  TinyModelOptions o;
  o.omit_tensors = {"blk.1.ffn_up.weight"};
  EXPECT_THAT(LoadTiny(o, "missing_tensor.gguf"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tensor 'blk.1.ffn_up.weight' is missing")));
  TinyModelOptions q;
  q.architecture = "qwen2";
  q.omit_tensors = {"blk.0.attn_k.bias"};
  EXPECT_THAT(LoadTiny(q, "missing_bias.gguf"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'blk.0.attn_k.bias' is missing")));
}

TEST(ModelConfigTest, WrongShapeIsNamed) {
  TinyModelOptions o;
  o.shape_overrides["blk.0.attn_k.weight"] = {64, 64};
  EXPECT_THAT(LoadTiny(o, "wrong_shape.gguf"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor 'blk.0.attn_k.weight' has shape [64, 64], expected [64, 32]")));
  TinyModelOptions n;
  n.shape_overrides["output_norm.weight"] = {64, 1};
  EXPECT_THAT(LoadTiny(n, "wrong_norm.gguf"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'output_norm.weight' has shape [64, 1]")));
}

TEST(ModelConfigTest, MissingKeyIsNamed) {
  TinyModelOptions o;
  o.omit_keys = {"block_count"};
  EXPECT_THAT(LoadTiny(o, "missing_key.gguf"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("'llama.block_count' is missing")));
  TinyModelOptions e;
  e.omit_keys = {"attention.layer_norm_rms_epsilon"};
  EXPECT_THAT(LoadTiny(e, "missing_eps.gguf"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("layer_norm_rms_epsilon")));
}

TEST(ModelConfigTest, OptionalKeysHaveDefaults) {
  TinyModelOptions o;
  o.n_kv_heads = o.n_heads;
  o.omit_keys = {"attention.head_count_kv", "rope.freq_base", "vocab_size"};
  auto model = LoadTiny(o, "defaults.gguf");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->config().n_kv_heads, o.n_heads);
  EXPECT_EQ((*model)->config().rope_freq_base, 10000.0f);
  EXPECT_EQ((*model)->config().n_vocab, o.n_vocab);
}

TEST(ModelConfigTest, UnsupportedArchitecture) {
  testing::GgufBuilder b;
  b.AddString("general.architecture", "gemma");
  EXPECT_THAT(Model::Load(WriteTempFile(b.Build(), "gemma.gguf")),
              StatusIs(absl::StatusCode::kUnimplemented,
                       HasSubstr("architecture 'gemma' is not supported (supported: llama, granite, granitemoe, "
                                 "qwen2, qwen3, qwen2moe, qwen3moe, gemma3, phi3, olmoe)")));
  testing::GgufBuilder none;
  EXPECT_THAT(Model::Load(WriteTempFile(none.Build(), "no_arch.gguf")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("general.architecture")));
}

// Each architecture's own tensors and keys are required and named when missing or wrong.
TEST(ModelConfigTest, ArchitectureSpecificTensorsAndKeys) {
  TinyModelOptions qwen3;
  qwen3.architecture = "qwen3";
  qwen3.head_dim = 32;
  auto loaded = LoadTiny(qwen3, "qwen3.gguf");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->config().head_dim, 32);
  EXPECT_THAT((*loaded)->config().features, ::testing::Contains(HasSubstr("queries and keys")));
  qwen3.omit_tensors = {"blk.1.attn_k_norm.weight"};
  EXPECT_THAT(LoadTiny(qwen3, "qwen3_no_norm.gguf"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'blk.1.attn_k_norm.weight' is missing")));

  TinyModelOptions gemma;
  gemma.architecture = "gemma3";
  gemma.n_layers = 6;
  gemma.sliding_window = 16;
  loaded = LoadTiny(gemma, "gemma3.gguf");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->config().sliding_window, 16);
  EXPECT_EQ((*loaded)->config().rope_style, RopeStyle::kNeox);
  gemma.omit_keys = {"attention.sliding_window"};
  EXPECT_THAT(LoadTiny(gemma, "gemma3_no_window.gguf"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("gemma3.attention.sliding_window")));
  gemma.omit_keys = {};
  gemma.float_keys = {{"final_logit_softcapping", 30.0f}};
  EXPECT_THAT(LoadTiny(gemma, "gemma3_softcap.gguf"),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("final_logit_softcapping")));
  gemma.float_keys = {};
  gemma.omit_tensors = {"blk.5.post_ffw_norm.weight"};
  EXPECT_THAT(LoadTiny(gemma, "gemma3_no_post_norm.gguf"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'blk.5.post_ffw_norm.weight' is missing")));

  TinyModelOptions phi;
  phi.architecture = "phi3";
  loaded = LoadTiny(phi, "phi3.gguf");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE((*loaded)->unused_tensors().empty());
  // q|k|v rows: 64 + 2 * 32 with the defaults (4 heads of 16, 2 KV heads).
  phi.shape_overrides = {{"blk.0.attn_qkv.weight", {64, 120}}};
  EXPECT_THAT(LoadTiny(phi, "phi3_bad_qkv.gguf"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor 'blk.0.attn_qkv.weight' has shape [64, 120], expected [64, 128]")));

  TinyModelOptions granite;
  granite.architecture = "granite";
  granite.float_keys = {{"logit_scale", -2.0f}};
  EXPECT_THAT(LoadTiny(granite, "granite_bad_scale.gguf"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'granite.logit_scale' is -2")));
}

TEST(ModelConfigTest, InconsistentHyperparameters) {
  TinyModelOptions heads;
  heads.n_heads = 4;
  heads.n_kv_heads = 3;
  EXPECT_THAT(LoadTiny(heads, "bad_heads.gguf"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a multiple of 3 key/value heads")));
  // The metadata says 100 tokens, the embedding has 99 rows.
  TinyModelOptions v;
  v.shape_overrides["token_embd.weight"] = {64, 99};
  EXPECT_THAT(LoadTiny(v, "bad_vocab.gguf"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("vocab_size is 100 but token_embd.weight has 99")));
  TinyModelOptions layers;
  layers.omit_keys = {"block_count"};
  testing::GgufBuilder huge = TinyModelBuilder(layers);
  huge.AddUint32("llama.block_count", 1u << 24);
  EXPECT_THAT(Model::Load(WriteTempFile(huge.Build(), "huge_layers.gguf")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("block_count is 16777216, which needs at least 100663296 tensors, but the file has 20")));
  TinyModelOptions zero;
  zero.n_layers = 0;
  EXPECT_THAT(LoadTiny(zero, "zero_layers.gguf"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'llama.block_count' is 0")));
}

TEST(ModelConfigTest, UnsupportedWeightTypeIsNamed) {
  TinyModelOptions o;
  o.omit_tensors = {"blk.0.attn_q.weight"};
  // A 64 x 64 MXFP4 matrix: 32-element blocks of 17 bytes.
  testing::GgufBuilder right = TinyModelBuilder(o);
  right.AddTensor("blk.0.attn_q.weight", {64, 64}, TensorType::kMXFP4, std::vector<uint8_t>(64 * 2 * 17, 7));
  EXPECT_THAT(Model::Load(WriteTempFile(right.Build(), "mxfp4.gguf")),
              StatusIs(absl::StatusCode::kUnimplemented,
                       HasSubstr("tensor 'blk.0.attn_q.weight' has weight type MXFP4, which hetero does not support")));
}

// Mixtures of experts: the expert keys and 3-D expert tensors are required and checked;
// what hetero does not run is refused by name.
TEST(ModelConfigTest, MixtureOfExpertsKeysAndTensors) {
  TinyModelOptions qwen;
  qwen.architecture = "qwen2moe";
  qwen.n_experts = 6;
  qwen.n_experts_used = 2;
  qwen.n_ff_expert = 24;
  qwen.n_ff_shared = 40;
  auto loaded = LoadTiny(qwen, "qwen2moe.gguf");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->config().n_experts, 6);
  EXPECT_EQ((*loaded)->config().n_experts_used, 2);
  EXPECT_EQ((*loaded)->config().n_ff_expert, 24);
  EXPECT_TRUE((*loaded)->unused_tensors().empty());
  EXPECT_THAT((*loaded)->config().features,
              ::testing::Contains(HasSubstr("2 of 6 experts per token (FFN 24), weights as routed, and a gated "
                                            "shared expert (FFN 40)")));
  // The shared expert's gate written as a one-row matrix [n_embd, 1] is the same vector.
  TinyModelOptions one_row = qwen;
  one_row.shape_overrides = {{"blk.0.ffn_gate_inp_shexp.weight", {64, 1}}};
  EXPECT_TRUE(LoadTiny(one_row, "qwen2moe_one_row.gguf").ok());
  TinyModelOptions bad = qwen;
  bad.shape_overrides = {{"blk.1.ffn_down_exps.weight", {24, 64, 5}}};
  EXPECT_THAT(LoadTiny(bad, "qwen2moe_bad_experts.gguf"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor 'blk.1.ffn_down_exps.weight' has shape [24, 64, 5], expected [24, 64, 6]")));
  bad = qwen;
  bad.omit_tensors = {"blk.0.ffn_gate_inp.weight"};
  EXPECT_THAT(LoadTiny(bad, "qwen2moe_no_router.gguf"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'blk.0.ffn_gate_inp.weight' is missing")));
  bad = qwen;
  bad.n_experts_used = 7;
  EXPECT_THAT(LoadTiny(bad, "qwen2moe_too_many_used.gguf"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("expert_used_count is 7, more than the 6 experts of qwen2moe.expert_count")));
  bad = qwen;
  bad.omit_keys = {"expert_used_count"};
  EXPECT_THAT(LoadTiny(bad, "qwen2moe_no_used.gguf"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("qwen2moe.expert_used_count")));
  testing::GgufBuilder sigmoid = TinyModelBuilder(qwen);
  sigmoid.AddUint32("qwen2moe.expert_gating_func", 2);
  EXPECT_THAT(Model::Load(WriteTempFile(sigmoid.Build(), "qwen2moe_sigmoid.gguf")),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("expert_gating_func 2 is not supported")));

  // A mixture-of-experts architecture without experts, and experts where none are defined.
  TinyModelOptions olmoe;
  olmoe.architecture = "olmoe";
  EXPECT_THAT(LoadTiny(olmoe, "olmoe_dense.gguf"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("olmoe needs olmoe.expert_count > 0")));
  olmoe.n_experts = 4;
  olmoe.n_experts_used = 2;
  loaded = LoadTiny(olmoe, "olmoe.gguf");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_THAT((*loaded)->config().features, ::testing::Contains(HasSubstr("all of the queries")));
  olmoe.shape_overrides = {{"blk.0.attn_q_norm.weight", {16}}};  // a per-head norm: not OLMoE's
  EXPECT_THAT(LoadTiny(olmoe, "olmoe_head_norm.gguf"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor 'blk.0.attn_q_norm.weight' has shape [16], expected [64]")));
  testing::GgufBuilder phi = TinyModelBuilder([] {
    TinyModelOptions o;
    o.architecture = "phi3";
    return o;
  }());
  phi.AddUint32("phi3.expert_count", 16).AddUint32("phi3.expert_used_count", 2);
  EXPECT_THAT(Model::Load(WriteTempFile(phi.Build(), "phimoe.gguf")),
              StatusIs(absl::StatusCode::kUnimplemented,
                       HasSubstr("mixture-of-experts phi3 models (phi3.expert_count = 16) are not supported")));
  // Mixtral is a llama with experts; its older per-expert tensors (ffn_gate.0.weight, ...)
  // are not read: the merged tensor is named as missing.
  testing::GgufBuilder mixtral = TinyModelBuilder(TinyModelOptions{});
  mixtral.AddUint32("llama.expert_count", 8).AddUint32("llama.expert_used_count", 2);
  EXPECT_THAT(Model::Load(WriteTempFile(mixtral.Build(), "mixtral_old.gguf")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'blk.0.ffn_gate_inp.weight' is missing")));
}

// What every backend builds one rotation table for: Gemma 3's local layers (base 10000)
// and its global one (the file's base), each layer pointing at its own; a llama has one.
TEST(ModelDefinitionTest, DistinctRopesPerLayer) {
  TinyModelOptions g;
  g.architecture = "gemma3";
  g.n_layers = 6;
  g.sliding_window = 8;
  g.rope_freq_base = 1e6f;
  auto gemma = LoadTiny(g, "ropes_gemma3.gguf");
  ASSERT_TRUE(gemma.ok()) << gemma.status();
  const RopeVariants v = DistinctRopes((*gemma)->impl().definition);
  ASSERT_EQ(v.base_and_factor.size(), 2u);
  EXPECT_EQ(v.base_and_factor[0].first, 10000.0f);
  EXPECT_EQ(v.base_and_factor[1].first, 1e6f);
  EXPECT_THAT(v.of_layer, ::testing::ElementsAre(0, 0, 0, 0, 0, 1));
  auto llama = LoadTiny(TinyModelOptions{}, "ropes_llama.gguf");
  ASSERT_TRUE(llama.ok()) << llama.status();
  const RopeVariants one = DistinctRopes((*llama)->impl().definition);
  EXPECT_EQ(one.base_and_factor.size(), 1u);
  EXPECT_THAT(one.of_layer, ::testing::Each(0));
}

// A 3-D expert tensor as one matrix: every expert's rows in order, the same bytes, and
// expert e's rows exactly where ExpertMatrix finds them.
TEST(ModelDefinitionTest, StackedExpertsIsEveryExpertMatrixInOrder) {
  TinyModelOptions o;
  o.architecture = "olmoe";
  o.n_experts = 5;
  o.n_experts_used = 2;
  o.n_ff_expert = 32;
  auto model = LoadTiny(o, "stacked_experts.gguf");
  ASSERT_TRUE(model.ok()) << model.status();
  const GgufFile& file = *(*model)->impl().gguf;
  const std::string name = "blk.1.ffn_up_exps.weight";
  const GgufTensorInfo stacked = StackedExperts(file, name);
  EXPECT_THAT(stacked.dims, ::testing::ElementsAre(o.n_embd, 32 * 5));
  EXPECT_EQ(stacked.data.data(), file.FindTensor(name)->data.data());
  EXPECT_EQ(stacked.data.size(), file.FindTensor(name)->data.size());
  for (int e = 0; e < 5; ++e) {
    const GgufTensorInfo one = ExpertMatrix(file, name, e);
    EXPECT_EQ(one.data.data(), stacked.data.data() + e * one.data.size());
  }
}

TEST(ModelConfigTest, RopeScaling) {
  testing::GgufBuilder linear = TinyModelBuilder(TinyModelOptions{});
  linear.AddString("llama.rope.scaling.type", "linear").AddFloat32("llama.rope.scaling.factor", 4.0f);
  auto model = Model::Load(WriteTempFile(linear.Build(), "rope_linear.gguf"));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->config().rope_scaling, RopeScaling::kLinear);
  EXPECT_EQ((*model)->config().rope_scaling_factor, 4.0f);

  testing::GgufBuilder legacy = TinyModelBuilder(TinyModelOptions{});
  legacy.AddFloat32("llama.rope.scale_linear", 2.0f);
  model = Model::Load(WriteTempFile(legacy.Build(), "rope_legacy.gguf"));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->config().rope_scaling, RopeScaling::kLinear);
  EXPECT_EQ((*model)->config().rope_scaling_factor, 2.0f);

  // A factor without a type means linear, as in llama.cpp.
  testing::GgufBuilder factor_only = TinyModelBuilder(TinyModelOptions{});
  factor_only.AddFloat32("llama.rope.scaling.factor", 8.0f);
  model = Model::Load(WriteTempFile(factor_only.Build(), "rope_factor_only.gguf"));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->config().rope_scaling, RopeScaling::kLinear);
  EXPECT_EQ((*model)->config().rope_scaling_factor, 8.0f);

  testing::GgufBuilder none = TinyModelBuilder(TinyModelOptions{});
  none.AddString("llama.rope.scaling.type", "none").AddFloat32("llama.rope.scaling.factor", 8.0f);
  model = Model::Load(WriteTempFile(none.Build(), "rope_none.gguf"));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->config().rope_scaling, RopeScaling::kNone);

  testing::GgufBuilder yarn = TinyModelBuilder(TinyModelOptions{});
  yarn.AddString("llama.rope.scaling.type", "yarn").AddFloat32("llama.rope.scaling.factor", 4.0f);
  EXPECT_THAT(Model::Load(WriteTempFile(yarn.Build(), "rope_yarn.gguf")),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("rope scaling type 'yarn'")));
}

TEST(ModelConfigTest, FloatsThatVanishAsFloat32AreRejected) {
  TinyModelOptions o;
  o.omit_keys = {"rope.freq_base"};
  testing::GgufBuilder b = TinyModelBuilder(o);
  b.AddFloat64("llama.rope.freq_base", 1e-300);  // positive as a double, 0 as a float
  EXPECT_THAT(Model::Load(WriteTempFile(b.Build(), "tiny_base.gguf")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'llama.rope.freq_base' is 1e-300")));
}

TEST(ModelConfigTest, PerLayerHeadCounts) {
  TinyModelOptions o;
  o.omit_keys = {"attention.head_count_kv"};
  testing::GgufBuilder uniform = TinyModelBuilder(o);
  uniform.AddInt32Array("llama.attention.head_count_kv", {2, 2});
  auto model = Model::Load(WriteTempFile(uniform.Build(), "kv_array.gguf"));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->config().n_kv_heads, 2);

  testing::GgufBuilder varying = TinyModelBuilder(o);
  varying.AddInt32Array("llama.attention.head_count_kv", {2, 4});
  EXPECT_THAT(Model::Load(WriteTempFile(varying.Build(), "kv_varying.gguf")),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("varies per layer")));
}

TEST(ModelConfigTest, ExtraTensorsAreReportedNotRejected) {
  testing::GgufBuilder b = TinyModelBuilder(TinyModelOptions{});
  b.AddTensorF32("blk.0.mystery.weight", {4}, {1, 2, 3, 4});
  auto model = Model::Load(WriteTempFile(b.Build(), "extra.gguf"));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_THAT((*model)->unused_tensors(), ::testing::ElementsAre("blk.0.mystery.weight"));
}

// What one decode step reads: all of a tied model (its embedding is the output matrix), one
// embedding row of an untied one, the chosen share (2 of 4) of the routed experts, and
// nothing of a tensor the architecture does not use. Expected values come from the tensor
// list and the "_exps" naming, not from the model definition the library counts with.
TEST(ModelConfigTest, DecodeWeightBytesCountWhatOneTokenReads) {
  auto bytes_of = [](const Model& m, const std::string& name) {
    for (const TensorSummary& t : m.tensors()) {
      if (t.name == name) return t.n_bytes;
    }
    ADD_FAILURE() << "no tensor " << name;
    return uint64_t{0};
  };
  auto all_bytes = [](const Model& m) {
    uint64_t sum = 0;
    for (const TensorSummary& t : m.tensors()) sum += t.n_bytes;
    return sum;
  };
  TinyModelOptions o;
  o.n_vocab = 91;
  auto tied = LoadTiny(o, "decode_bytes_tied.gguf");
  ASSERT_TRUE(tied.ok()) << tied.status();
  EXPECT_EQ((*tied)->decode_weight_bytes(), all_bytes(**tied));

  o.tied_embeddings = false;
  o.weight_type = TensorType::kQ8_0;
  auto untied = LoadTiny(o, "decode_bytes_untied.gguf");
  ASSERT_TRUE(untied.ok()) << untied.status();
  const uint64_t embd = bytes_of(**untied, "token_embd.weight");
  EXPECT_EQ((*untied)->decode_weight_bytes(), all_bytes(**untied) - embd + embd / 91);

  // 3 of 8 routed experts (a share no other plausible formula gives); qwen2moe's shared
  // expert and its gate are read whole, as every token runs them.
  for (const std::string architecture : {"olmoe", "qwen2moe"}) {
    SCOPED_TRACE(architecture);
    TinyModelOptions moe;
    moe.architecture = architecture;
    moe.n_experts = 8;
    moe.n_experts_used = 3;
    moe.n_ff_expert = 32;
    if (architecture == "qwen2moe") moe.n_ff_shared = 64;
    moe.weight_type = TensorType::kQ4_0;
    testing::GgufBuilder with_extra = TinyModelBuilder(moe);
    with_extra.AddTensorF32("blk.0.mystery.weight", {4}, {1, 2, 3, 4});
    auto routed = Model::Load(WriteTempFile(with_extra.Build(), "decode_bytes_" + architecture + ".gguf"));
    ASSERT_TRUE(routed.ok()) << routed.status();
    uint64_t expected = 0;
    int expert_tensors = 0, shared_tensors = 0;
    for (const TensorSummary& t : (*routed)->tensors()) {
      if (t.name == "blk.0.mystery.weight") continue;
      if (t.name.find("_exps.weight") != std::string::npos) {
        ASSERT_EQ(t.n_bytes % 8, 0u);
        expected += t.n_bytes / 8 * 3;
        ++expert_tensors;
      } else {
        shared_tensors += t.name.find("_shexp") != std::string::npos;
        expected += t.n_bytes;
      }
    }
    EXPECT_EQ(expert_tensors, 3 * moe.n_layers);
    EXPECT_EQ(shared_tensors, architecture == "qwen2moe" ? 4 * moe.n_layers : 0);
    EXPECT_EQ((*routed)->decode_weight_bytes(), expected);
    EXPECT_LT((*routed)->decode_weight_bytes(), all_bytes(**routed));
  }
}

TEST(ModelPathTest, LookupOrder) {
  const std::string tiny = WriteTinyModel(TinyModelOptions{}, "lookup.gguf");
  ::unsetenv("HETERO_MODEL");
  EXPECT_EQ(*ResolveModelPath(tiny), tiny);
  EXPECT_THAT(ResolveModelPath("/no/such/model.gguf"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("'/no/such/model.gguf' (the given path) not found")));
  ::setenv("HETERO_MODEL", tiny.c_str(), 1);
  EXPECT_EQ(*ResolveModelPath(""), tiny);
  EXPECT_THAT(ResolveModelPath("/explicit/wins.gguf"),  // an explicit path beats the variable
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("'/explicit/wins.gguf' (the given path)")));
  ::setenv("HETERO_MODEL", "/no/such/env.gguf", 1);
  EXPECT_THAT(ResolveModelPath(""), StatusIs(absl::StatusCode::kNotFound, HasSubstr("($HETERO_MODEL)")));
  ::unsetenv("HETERO_MODEL");
  // A directory or a device is named as what it is, not as missing.
  const std::string directory = std::filesystem::path(tiny).parent_path().string();
  EXPECT_THAT(ResolveModelPath(directory),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is a directory; give the path of a .gguf file")));
  EXPECT_THAT(ResolveModelPath("/dev/null"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a regular file")));
  absl::StatusOr<std::string> fallback = ResolveModelPath("");
  if (std::filesystem::exists(kDefaultModelPath)) {
    EXPECT_EQ(*fallback, kDefaultModelPath);
  } else {
    EXPECT_THAT(fallback, StatusIs(absl::StatusCode::kNotFound, HasSubstr("scripts/setup.sh --model")));
  }
}

TEST(ModelConfigTest, DefaultModel) {
  HETERO_SKIP_WITHOUT_DEFAULT_MODEL();
  auto model = Model::Load(kDefaultModelPath);
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelConfig& c = (*model)->config();
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.n_layers, 30);
  EXPECT_EQ(c.n_embd, 576);
  EXPECT_EQ(c.n_heads, 9);
  EXPECT_EQ(c.n_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.n_ff, 1536);
  EXPECT_EQ(c.n_vocab, 49152);
  EXPECT_EQ(c.context_length, 8192);
  EXPECT_EQ(c.rope_freq_base, 100000.0f);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ((*model)->tensors().size(), 272u);
  EXPECT_EQ((*model)->parameter_count(), 134515008u);
  EXPECT_TRUE((*model)->unused_tensors().empty());
}

}  // namespace
}  // namespace hetero
