// hetero-tokenize: token ids of a text, or the text of token ids, with a model's own
// tokenizer.
//
//   hetero-tokenize [-m MODEL] [--no-special] [--no-bos] TEXT     ids as a JSON array
//   hetero-tokenize [-m MODEL] [--no-special] [--no-bos] -        text from stdin
//   hetero-tokenize [-m MODEL] --decode ID...                     the text (raw bytes)
//
// BOS is added when the model asks for it (tokenizer.ggml.add_bos_token) unless --no-bos.
// Special-token text such as "<|im_start|>" is parsed as those tokens unless --no-special.
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "hetero/model.h"
#include "hetero/tokenizer.h"

namespace {

int Fail(const std::string& message) {
  std::string line = message;
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  std::fprintf(stderr, "error: %s\n", line.c_str());
  return 1;
}

void PrintUsage() {
  std::printf(
      "usage: hetero-tokenize [-m MODEL] [--no-special] [--no-bos] TEXT|-\n"
      "       hetero-tokenize [-m MODEL] --decode ID...\n"
      "Prints token ids as a JSON array, or with --decode the text of token ids.\n"
      "Without -m: $HETERO_MODEL, then %s.\n",
      hetero::kDefaultModelPath);
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path;
  bool parse_special = true;
  bool no_bos = false;
  bool decode = false;
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-m" || arg == "--model") {
      if (i + 1 >= argc) return Fail("-m needs a model path");
      model_path = argv[++i];
    } else if (arg == "--no-special") {
      parse_special = false;
    } else if (arg == "--no-bos") {
      no_bos = true;
    } else if (arg == "--decode") {
      decode = true;
    } else if (arg == "-h" || arg == "--help") {
      PrintUsage();
      return 0;
    } else if (arg.size() > 1 && arg[0] == '-' && !(decode && arg.size() > 1 && std::isdigit(static_cast<unsigned char>(arg[1])))) {
      return Fail("unknown option '" + arg + "' (try --help)");
    } else {
      args.push_back(arg);
    }
  }
  absl::StatusOr<std::string> resolved = hetero::ResolveModelPath(model_path);
  if (!resolved.ok()) return Fail(std::string(resolved.status().message()));
  absl::StatusOr<std::unique_ptr<hetero::Model>> model = hetero::Model::Load(*resolved);
  if (!model.ok()) return Fail(std::string(model.status().message()));
  absl::StatusOr<std::unique_ptr<hetero::Tokenizer>> tokenizer = hetero::Tokenizer::Create(**model);
  if (!tokenizer.ok()) return Fail(std::string(tokenizer.status().message()));

  if (decode) {
    if (args.empty()) return Fail("--decode needs token ids");
    std::vector<int32_t> ids;
    for (const std::string& a : args) {
      int32_t id;
      if (!absl::SimpleAtoi(a, &id)) return Fail("'" + a + "' is not a token id");
      ids.push_back(id);
    }
    absl::StatusOr<std::string> text = (*tokenizer)->Decode(ids);
    if (!text.ok()) return Fail(std::string(text.status().message()));
    std::fwrite(text->data(), 1, text->size(), stdout);
    std::fputc('\n', stdout);
    return 0;
  }

  if (args.size() != 1) return Fail(args.empty() ? "no text given (use - for stdin)" : "give the text as one argument");
  std::string text = args[0];
  if (text == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  const bool add_bos = !no_bos && (*tokenizer)->add_bos_by_default();
  absl::StatusOr<std::vector<int32_t>> ids = (*tokenizer)->Encode(text, add_bos, parse_special);
  if (!ids.ok()) return Fail(std::string(ids.status().message()));
  std::printf("[%s]\n", absl::StrJoin(*ids, ", ").c_str());
  return 0;
}
