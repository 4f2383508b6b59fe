#!/usr/bin/env python3
"""Writes tests/data/chat_template_vectors.json: prompts rendered by jinja2 (PyPI) from real
chat templates, for conversations covering system prompts (given and default), multi-turn
chats, tool definitions, tool calls and tool results, Unicode and empty messages.

Templates: the default model's own tokenizer.chat_template (read from its GGUF), and, when
a directory of other models' templates is given (file names as in llama.cpp's
models/templates/), Qwen2.5 (ChatML with Hermes tools), Llama 3.1, Gemma 2, Qwen3
(Qwen-Qwen3-0.6B.jinja: Hermes tools and <think> reasoning, also with enable_thinking=False),
Phi-3.5 (microsoft-Phi-3.5-mini-instruct.jinja) and Granite 3.0
(ibm-granite-granite-3.0-8b-instruct.jinja: the template of granite-3.0-8b-instruct, as quoted
in llama.cpp's tests/test-chat-template.cpp); a file missing from the directory keeps the
vectors already written for its template. The
templates themselves are not committed; only the rendered prompts are.

Rendering follows Hugging Face transformers' environment: trim_blocks, lstrip_blocks,
`tojson` = json.dumps(ensure_ascii=False), raise_exception.

    python3 -m pip install jinja2==3.1.6 gguf==0.19.0 numpy
    python3 scripts/gen_chat_template_vectors.py models/SmolLM2-135M-Instruct.Q4_1.gguf [TEMPLATE_DIR]
"""
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from gguf import GGUFReader

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "chat_template_vectors.json")


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


WEATHER = {"name": "get_weather", "description": "Current weather for a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
                                                           "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                          "required": ["city"]}}
SEARCH = {"name": "search", "description": "Search the web; returns snippets — in any language.",
          "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": 10}},
                         "required": ["query"]}}


def call(name, args, cid="call_1"):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


CONVERSATIONS = [
    {"messages": [{"role": "user", "content": "Hello!"}]},
    {"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}]},
    {"messages": [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4."},
                  {"role": "user", "content": "And 3+3?"}]},
    {"messages": [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Hi"},
                  {"role": "assistant", "content": "Hello! How can I help?"}, {"role": "user", "content": "Tell me a joke."}]},
    {"messages": [{"role": "user", "content": "Résumé: naïve café, 中文, مرحبا, 👍🏽 and 👨‍👩‍👧‍👦"}]},
    {"messages": [{"role": "user", "content": ""}]},
    {"messages": [{"role": "user", "content": "  padded with spaces  \n"}]},
    {"messages": [{"role": "user", "content": "line one\nline two\n\nline four"}]},
    {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER]},
    {"messages": [{"role": "system", "content": "You can use tools."}, {"role": "user", "content": "Weather in Paris?"}],
     "tools": [WEATHER, SEARCH]},
    {"messages": [{"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": "", "tool_calls": [call("get_weather", {"city": "Paris"})]},
                  {"role": "tool", "name": "get_weather", "content": "{\"temp_c\": 18, \"sky\": \"clear\"}"}],
     "tools": [WEATHER]},
    {"messages": [{"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": "", "tool_calls": [call("get_weather", {"city": "Paris", "unit": "celsius"})]},
                  {"role": "tool", "name": "get_weather", "content": "18 C and clear"},
                  {"role": "assistant", "content": "It is 18 °C and clear in Paris."}],
     "tools": [WEATHER]},
    {"messages": [{"role": "user", "content": "Paris and Rome?"},
                  {"role": "assistant", "content": "Checking both.", "tool_calls": [
                      call("get_weather", {"city": "Paris"}, "a"), call("get_weather", {"city": "Rome"}, "b")]},
                  {"role": "tool", "name": "get_weather", "content": "Paris: 18"},
                  {"role": "tool", "name": "get_weather", "content": "Rome: 24"}],
     "tools": [WEATHER]},
    {"messages": [{"role": "system", "content": "Tools available."}, {"role": "user", "content": "Search cats"},
                  {"role": "assistant", "content": "", "tool_calls": [call("search", {"query": "cats — \"fluffy\"", "limit": 3})]},
                  {"role": "tool", "name": "search", "content": "Cats are small carnivorous mammals."},
                  {"role": "user", "content": "Thanks"}],
     "tools": [SEARCH]},
    {"messages": [{"role": "user", "content": "A"}, {"role": "user", "content": "B"}]},
    {"messages": [{"role": "user", "content": "Hi"}, {"role": "system", "content": "Late system note."},
                  {"role": "user", "content": "Again"}]},
    {"messages": [{"role": "system", "content": ""}, {"role": "user", "content": "Empty system"}]},
    {"messages": [{"role": "user", "content": "<|im_start|> looks special"}, {"role": "assistant", "content": "It is text here."}]},
    {"messages": [{"role": "user", "content": "Tabs\tand\ttabs"}, {"role": "assistant", "content": "  Sure.  "}]},
    {"messages": [{"role": "user", "content": "Numbers: 3.14159, 1e-9, 1,000,000"}]},
    {"messages": [{"role": "user", "content": "JSON please"}, {"role": "assistant", "content": "{\"a\": [1, 2, {\"b\": null}]}"}]},
    {"messages": [{"role": "system", "content": "Sys"}, {"role": "user", "content": "Hi"}], "tools": [WEATHER]},
    # Appended for reasoning templates (Qwen3); the other templates take them as plain turns.
    {"messages": [{"role": "user", "content": "What is 2+2?"},
                  {"role": "assistant", "content": "4.", "reasoning_content": "Two plus two.\nThat is four."},
                  {"role": "user", "content": "And 3+3?"}]},
    {"messages": [{"role": "user", "content": "What is 2+2?"},
                  {"role": "assistant", "content": "<think>\nAdd them.\n</think>\n\n4."}]},
    {"messages": [{"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": "", "reasoning_content": "I should call the tool.",
                   "tool_calls": [call("get_weather", {"city": "Paris"})]},
                  {"role": "tool", "name": "get_weather", "content": "18 C"},
                  {"role": "assistant", "content": "It is 18 C.", "reasoning_content": "The tool said 18."}],
     "tools": [WEATHER]},
    {"messages": [{"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": "Let me check.", "tool_calls": [call("get_weather", {"city": "Paris"})]},
                  {"role": "tool", "name": "get_weather", "content": "18 C"}],
     "tools": [WEATHER]},
]
REASONING = range(22, 26)  # the conversations above, from "What is 2+2?" with reasoning

# Which conversations a template can take (Gemma 2 rejects system turns; Llama 3.1 takes
# one tool call per turn and needs a user message for its tools).
ACCEPTS = {
    "qwen3": lambda c: True,
    "smollm2": lambda c: True,
    "qwen2.5": lambda c: True,
    "llama3.1": lambda c: all(len(m.get("tool_calls", [])) <= 1 for m in c["messages"]),
    "gemma2": lambda c: not c.get("tools") and all(m["role"] in ("user", "assistant") for m in c["messages"]) and
              all((m["role"] == "user") == (i % 2 == 0) for i, m in enumerate(c["messages"])),
}
ACCEPTS["phi3.5"] = lambda c: all(m["role"] in ("system", "user", "assistant") for m in c["messages"])
# Granite 3.0's call turn is the calls alone: no text beside them.
ACCEPTS["granite3.0"] = lambda c: all(not (m.get("tool_calls") and m["content"]) for m in c["messages"])


def granite_messages(messages):
    """Granite 3.0's template knows only its own roles for calls and results: an assistant
    turn with calls becomes "assistant_tool_call" holding the JSON list of {name, arguments},
    a "tool" result "tool_response" (as hetero writes them)."""
    out = []
    for m in messages:
        if m.get("tool_calls"):
            calls = [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in m["tool_calls"]]
            out.append({"role": "assistant_tool_call", "content": json.dumps(calls, ensure_ascii=False)})
        elif m["role"] == "tool":
            out.append({"role": "tool_response", "content": m["content"]})
        else:
            out.append(m)
    return out


MESSAGES = {"granite3.0": granite_messages}
FILES = {"qwen2.5": "Qwen-Qwen2.5-7B-Instruct.jinja", "llama3.1": "meta-llama-Llama-3.1-8B-Instruct.jinja",
         "gemma2": "google-gemma-2-2b-it.jinja", "qwen3": "Qwen-Qwen3-0.6B.jinja",
         "phi3.5": "microsoft-Phi-3.5-mini-instruct.jinja", "granite3.0": "ibm-granite-granite-3.0-8b-instruct.jinja"}
BOS = {"qwen3": "", "smollm2": "<|im_start|>", "qwen2.5": "", "llama3.1": "<|begin_of_text|>", "gemma2": "<bos>",
       "phi3.5": "<s>", "granite3.0": "<|end_of_text|>"}
EOS = {"qwen3": "<|im_end|>", "smollm2": "<|im_end|>", "qwen2.5": "<|im_end|>", "llama3.1": "<|eot_id|>", "gemma2": "<eos>",
       "phi3.5": "<|endoftext|>", "granite3.0": "<|end_of_text|>"}


def main():
    reader = GGUFReader(sys.argv[1])
    field = reader.fields["tokenizer.chat_template"]
    templates = {"smollm2": bytes(field.parts[field.data[0]]).decode("utf-8")}
    # A template whose file is not in TEMPLATE_DIR keeps the vectors already written for it.
    kept = []
    if len(sys.argv) > 2:
        previous = []
        if os.path.exists(OUT):
            with open(OUT) as f:
                previous = json.load(f)["vectors"]
        for name, file in FILES.items():
            path = os.path.join(sys.argv[2], file)
            if os.path.exists(path):
                with open(path) as f:
                    templates[name] = f.read()
            else:
                kept += [v for v in previous if v["template"] == name]
                print(f"{file} not in {sys.argv[2]}: its {sum(1 for v in previous if v['template'] == name)} "
                      "vectors are kept as they were")
    env = environment()
    vectors = []
    for name, text in templates.items():
        template = env.from_string(text)
        for index, conversation in enumerate(CONVERSATIONS):
            if not ACCEPTS[name](conversation):
                continue
            # The reasoning conversations only where they mean something (and Qwen2.5, as plain turns).
            if index in REASONING and name not in ("qwen3", "qwen2.5"):
                continue
            thinking = (True, False) if name == "qwen3" else (None,)
            for add_generation_prompt in (True, False):
                for enable_thinking in thinking:
                    messages = MESSAGES.get(name, lambda m: m)(conversation["messages"])
                    kwargs = {"messages": messages, "add_generation_prompt": add_generation_prompt,
                              "bos_token": BOS[name], "eos_token": EOS[name]}
                    if conversation.get("tools"):
                        kwargs["tools"] = [{"type": "function", "function": t} for t in conversation["tools"]]
                    vector = {"template": name, "conversation": index, "add_generation_prompt": add_generation_prompt}
                    if enable_thinking is not None:
                        kwargs["enable_thinking"] = enable_thinking
                        vector["enable_thinking"] = enable_thinking
                    vector["expected"] = template.render(**kwargs)
                    vectors.append(vector)
    order = ["smollm2"] + list(FILES)
    vectors = sorted(vectors + kept, key=lambda v: order.index(v["template"]))
    with open(OUT, "w") as f:
        json.dump({"conversations": CONVERSATIONS, "vectors": vectors}, f, ensure_ascii=False, indent=1)
    counts = {n: sum(1 for v in vectors if v["template"] == n) for n in order}
    print(f"wrote {len(vectors)} rendered prompts {counts} to {os.path.normpath(OUT)}")


if __name__ == "__main__":
    main()
