"""hetero: heterogeneous LLM inference, from Python (ctypes over the C ABI).

    engine = hetero.Engine()                 # the default model
    session = engine.session()
    print(session.run("What is the capital of France?").text)

Tools are Python functions with type hints (see `tool`); errors are `HeteroError`
subclasses named after the C status codes.
"""

import ctypes
import inspect
import json
import queue
import threading
import typing

from . import _args, _lib
from ._errors import invalid as _errors_invalid
from ._errors import (BY_STATUS as _ERRORS, Busy, Cancelled, DeviceError, HeteroError, Internal, InvalidArgument,
                      NotFound, OutOfMemory, Timeout, Unsupported)

__all__ = ["log_to_stderr", "silence_log", "invoke_tool", "Engine", "Session", "Result", "Tool", "tool", "HeteroError", "InvalidArgument", "NotFound", "Unsupported",
           "OutOfMemory", "DeviceError", "Timeout", "Cancelled", "Busy", "Internal", "version", "abi_version"]

_c = _lib.load()


_LOG_LEVELS = {"debug": 0, "info": 1, "warning": 2, "error": 3}


def log_to_stderr(level="warning"):
    """Sends the library's messages at `level` ("debug", "info", "warning", "error") or
    above to stderr ("hetero: warning: no CUDA device ..."). By default they are dropped."""
    if level not in _LOG_LEVELS:
        raise ValueError(f"level must be one of {sorted(_LOG_LEVELS)}")
    _c.hetero_set_log_callback(ctypes.cast(_c.hetero_log_to_stderr, ctypes.c_void_p), None, _LOG_LEVELS[level])


def silence_log():
    """Drops the library's messages again (the default)."""
    _c.hetero_set_log_callback(None, None, 0)


def version():
    """The loaded library's version, "MAJOR.MINOR.PATCH"."""
    return _c.hetero_version_string().decode()


def abi_version():
    """The C ABI version the loaded library implements (capi/hetero.h HETERO_ABI_VERSION);
    the binding refuses to load a library whose version differs from its own."""
    return int(_c.hetero_abi_version())


def _check(status):
    if status != 0:
        cls = _ERRORS.get(status, HeteroError)
        raise cls(_c.hetero_status_name(status).decode(), _c.hetero_last_error().decode(errors="replace"))


def _utf8(text):
    return None if text is None else str(text).encode()


# ---- tools ------------------------------------------------------------------------------

_JSON_TYPES = {int: "integer", float: "number", str: "string", bool: "boolean", type(None): "null"}


def _schema_of(annotation, where):
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation in _JSON_TYPES:
        return {"type": _JSON_TYPES[annotation]}
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin in (list, typing.List) and len(args) == 1:
        return {"type": "array", "items": _schema_of(args[0], where + "[]")}
    if origin is typing.Union and len(args) == 2 and type(None) in args:
        return _schema_of(args[0] if args[1] is type(None) else args[1], where)
    raise TypeError(f"{where}: cannot describe {annotation!r} as a JSON schema "
                    "(use int, float, str, bool, list[...], Literal[...] or Optional[...])")


class Tool:
    """A Python function the model may call: name, description, JSON schema, timeout.

    The schema (from the type hints, or given) uses hetero's subset: type, properties,
    required, additionalProperties (false only), enum, const, minimum, maximum, minLength,
    maxLength, items, minItems, maxItems and the annotations description, title, default,
    examples; 8 levels at most. Other keywords (pattern, oneOf, $ref, format, ...) are
    refused by name when the tool set is built (InvalidArgument)."""

    def __init__(self, function, name=None, description=None, schema=None, timeout=10.0):
        self.function = function
        self.name = name or function.__name__
        doc = inspect.getdoc(function) or ""
        self.description = description if description is not None else doc.split("\n\n")[0].replace("\n", " ")
        self.schema = schema if schema is not None else self._schema_from_hints(function)
        self.timeout = timeout

    def _schema_from_hints(self, function):
        hints = typing.get_type_hints(function)
        properties, required = {}, []
        for pname, param in inspect.signature(function).parameters.items():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise TypeError(f"tool {self.name}: *args and **kwargs cannot be described")
            if pname not in hints:
                raise TypeError(f"tool {self.name}: parameter '{pname}' needs a type hint")
            properties[pname] = _schema_of(hints[pname], f"tool {self.name}: parameter '{pname}'")
            optional = typing.get_origin(hints[pname]) is typing.Union and type(None) in typing.get_args(hints[pname])
            if param.default is param.empty and not optional:
                required.append(pname)
        schema = {"type": "object", "properties": properties}
        if required:
            schema["required"] = required
        return schema

    def __call__(self, *args, **kwargs):
        return self.function(*args, **kwargs)


def tool(function=None, *, name=None, description=None, timeout=10.0):
    """Decorator: a function with type hints becomes a Tool (its docstring describes it).

        @hetero.tool
        def convert(value: float, unit: Literal["km", "mi"]) -> str: ...
    """
    def wrap(f):
        return Tool(f, name=name, description=description, timeout=timeout)
    return wrap(function) if function is not None else wrap


# Handler trampolines live as long as the process, one per function: a handler that
# outlived its timeout may still call back into Python after its tool set is gone.
_TRAMPOLINES = {}
_TRAMPOLINES_LOCK = threading.Lock()


def _make_handler(t):
    with _TRAMPOLINES_LOCK:
        if t.function not in _TRAMPOLINES:
            _TRAMPOLINES[t.function] = _new_handler(t.function)
        return _TRAMPOLINES[t.function]


def _new_handler(function):
    def handler(arguments_json, reply, _user_data):
        try:
            arguments = json.loads(arguments_json.decode())
            value = function(**arguments)
            text = value if isinstance(value, str) else json.dumps(value)
            data = text.encode()
            _c.hetero_tool_reply_set_result(reply, data, len(data))
        except BaseException as e:  # noqa: BLE001 - every failure becomes the model's error result
            _c.hetero_tool_reply_set_error(reply, f"{type(e).__name__}: {e}".encode(errors="replace"))
    return _lib.TOOL_HANDLER(handler)


class _ToolSet:
    """The C tool set for a list of Tools (or plain functions with type hints)."""

    def __init__(self, tools):
        self.handle = ctypes.c_void_p()
        _check(_c.hetero_tools_create(ctypes.byref(self.handle)))
        self.tools = {}
        try:
            for t in tools:
                t = t if isinstance(t, Tool) else Tool(t)
                c_tool = _lib.Tool()
                _c.hetero_tool_default(ctypes.byref(c_tool))
                c_tool.name = _utf8(t.name)
                c_tool.description = _utf8(t.description)
                c_tool.parameters_json = _utf8(json.dumps(t.schema))
                c_tool.handler = _make_handler(t)
                c_tool.timeout_ms = max(1, int(t.timeout * 1000))
                _check(_c.hetero_tools_add(self.handle, ctypes.byref(c_tool)))
                self.tools[t.name] = t
        except BaseException:
            self.close()
            raise

    def invoke(self, name, arguments):
        """Runs one call as the agent loop would; returns (text the model reads, report)."""
        result = ctypes.c_void_p()
        _check(_c.hetero_tools_invoke(self.handle, _utf8(name), _utf8(json.dumps(arguments)), ctypes.byref(result)))
        try:
            report = json.loads(_c.hetero_result_report_json(result).decode())
            return _c.hetero_result_text(result).decode(errors="replace"), report["tool_calls"][0]
        finally:
            _c.hetero_result_destroy(result)

    def close(self):
        if self.handle:
            _c.hetero_tools_destroy(self.handle)
            self.handle = ctypes.c_void_p()

    def __del__(self):
        self.close()


def invoke_tool(tools, name, arguments):
    """Runs `name` from `tools` on `arguments` (a dict) exactly as the agent loop would,
    without a model; returns (text the model would read, the call's report dict)."""
    toolset = _ToolSet(tools)
    try:
        return toolset.invoke(name, arguments)
    finally:
        toolset.close()


# ---- engine, sessions, results ------------------------------------------------------------

class Result:
    """A run's final answer (`text`) and its task report (`report`, a dict). `reasoning`:
    the reply's <think> text where the model's chat template keeps it apart (Qwen3), else
    "". With
    run(logprobs=True): `logprobs`, one dict per token of the last Generate stage,
    {"token": id, "logprob": float, "top": [(id, logprob), ...]} (natural logs of the model's
    probabilities, before sampling's penalties, temperature and masks); else None."""

    def __init__(self, handle, logprobs=False):
        self.text = _c.hetero_result_text(handle).decode(errors="replace")
        self.reasoning = _c.hetero_result_reasoning(handle).decode(errors="replace")
        self.report = json.loads(_c.hetero_result_report_json(handle).decode())
        self.generated_tokens = _c.hetero_result_generated_tokens(handle)
        self.tool_calls = self.report["tool_calls"]
        self.logprobs = _read_logprobs(handle) if logprobs else None

    def __repr__(self):
        return f"Result(text={self.text!r}, generated_tokens={self.generated_tokens})"


def _read_logprobs(handle):
    token, logprob = ctypes.c_int32(), ctypes.c_float()
    entries = []
    for i in range(_c.hetero_result_logprob_count(handle)):
        _check(_c.hetero_result_logprob(handle, i, ctypes.byref(token), ctypes.byref(logprob)))
        entry = {"token": token.value, "logprob": logprob.value, "top": []}
        for rank in range(_c.hetero_result_top_logprob_count(handle, i)):
            _check(_c.hetero_result_top_logprob(handle, i, rank, ctypes.byref(token), ctypes.byref(logprob)))
            entry["top"].append((token.value, logprob.value))
        entries.append(entry)
    return entries


class Engine:
    """A loaded model and its workers. `model_path` None: $HETERO_MODEL, then the default.
    `gpu_memory_budget_bytes`: the most device memory the model may hold on each GPU (0:
    no budget); a mixture-of-experts model then keeps the experts that do not fit on the CPU.
    `expert_usage_path`: a file save_expert_usage() wrote on an earlier run; the experts it
    counts as most used are the ones kept on the GPU."""

    def __init__(self, model_path=None, threads=0, scheduler="seed", max_sessions=0, gpu_memory_budget_bytes=0,
                 expert_usage_path=None):
        options = _lib.EngineOptions()
        _c.hetero_engine_options_default(ctypes.byref(options))
        options.model_path = _args.path(model_path, "model_path")
        options.threads = _args.integer(threads, "threads", minimum=0, maximum=1 << 16)
        options.scheduler = _args.text(scheduler, "scheduler")
        options.max_sessions = _args.integer(max_sessions, "max_sessions", minimum=0, maximum=(1 << 31) - 1)
        options.gpu_memory_budget_bytes = _args.integer(gpu_memory_budget_bytes, "gpu_memory_budget_bytes", minimum=0,
                                                        maximum=(1 << 64) - 1)
        options.expert_usage_path = _args.path(expert_usage_path, "expert_usage_path")
        self._handle = ctypes.c_void_p()
        _check(_c.hetero_engine_create(ctypes.byref(options), ctypes.byref(self._handle)))

    def restore_session(self, state):
        """A Session continuing from Session.save_state()'s bytes: the same greedy tokens
        as the saved session would give, without encoding its tokens again. InvalidArgument
        for corrupt, truncated or other-model state."""
        if not isinstance(state, (bytes, bytearray, memoryview)):
            raise TypeError(f"state must be bytes, not {type(state).__name__}")
        self._check_open()
        data = bytes(state)
        buffer = (ctypes.c_uint8 * max(1, len(data))).from_buffer_copy(data or b"\0")
        return Session._adopt(self, lambda out: _c.hetero_engine_restore_session(self._handle, buffer, len(data), out))

    def restore_session_file(self, path):
        """restore_session() from a file Session.save_state_file wrote."""
        encoded = _args.path(path, "path")
        self._check_open()
        return Session._adopt(self, lambda out: _c.hetero_engine_restore_session_file(self._handle, encoded, out))

    def save_expert_usage(self, path):
        """Writes how often each routed expert of a mixture-of-experts model was chosen
        (expert_usage_path's counts plus this engine's) to `path`, for a later Engine's
        expert_usage_path. A dense model writes no layers."""
        if path is None:
            raise TypeError("path must be a str, bytes or os.PathLike, not None")
        encoded = _args.path(path, "path")
        self._check_open()
        _check(_c.hetero_engine_save_expert_usage(self._handle, encoded))

    def load_adapter(self, name, path):
        """Loads a LoRA adapter in llama.cpp's GGUF adapter format (convert_lora_to_gguf.py)
        under `name`, for Session.set_adapter; it stays loaded as long as the engine.
        NotFound for a missing file; InvalidArgument for a name in use or a file that is not
        a LoRA adapter of this model (the message names the key or tensor); Unsupported for
        tensors hetero cannot adapt (the embedding lookup, experts, norms)."""
        encoded_name = _args.text(name, "name")
        encoded_path = _args.path(path, "path")
        self._check_open()
        _check(_c.hetero_engine_load_adapter(self._handle, encoded_name, encoded_path))

    def session(self, system_prompt=None):
        """A new conversation, with `system_prompt` (a str) as its first turn if given."""
        _args.text(system_prompt, "system_prompt", optional=True)
        if not self._handle:
            raise InvalidArgument("HETERO_INVALID_ARGUMENT", "the engine is closed")
        return Session(self, system_prompt)

    def devices(self):
        """The engine's devices as the scheduler sees them now, the CPU first, then each GPU
        (available or not): a list of dicts with name ("cpu", "gpu", "gpu:1", ...),
        description (the backend, or why it is unavailable), available, queued_tasks,
        active_tasks, kv_capacity_tokens, kv_free_tokens."""
        self._check_open()
        out = []
        for i in range(_c.hetero_engine_device_count(self._handle)):
            state = _lib.DeviceState()
            state.struct_size = ctypes.sizeof(state)
            name = ctypes.create_string_buffer(32)
            description = ctypes.create_string_buffer(512)
            _check(_c.hetero_engine_device(self._handle, i, ctypes.byref(state), name, len(name), description,
                                           len(description)))
            out.append({"name": name.value.decode(), "description": description.value.decode(errors="replace"),
                        "available": bool(state.available), "queued_tasks": state.queued_tasks,
                        "active_tasks": state.active_tasks, "kv_capacity_tokens": state.kv_capacity_tokens,
                        "kv_free_tokens": state.kv_free_tokens})
        return out

    def embed(self, texts, last_token=False, layers=0):
        """Unit-length embeddings (lists of floats) of `texts`, from the model's hidden states
        (computed where the scheduler places the embed stage, the CPU with the built-in
        policies): mean over each text's tokens (or its last token) after the first `layers`
        layers (0: all). Cosine similarity is the dot product."""
        if not self._handle:
            raise InvalidArgument("HETERO_INVALID_ARGUMENT", "the engine is closed")
        if isinstance(texts, (str, bytes)):
            raise TypeError("texts must be a list of texts, not one text")
        _args.sequence(texts, "texts")
        encoded = [_args.text(t, f"texts[{i}]") for i, t in enumerate(texts)]
        last_token = _args.flag(last_token, "last_token")
        layers = _args.integer(layers, "layers", minimum=0, maximum=(1 << 31) - 1)
        dim = _c.hetero_engine_embedding_dimension(self._handle)
        array = (ctypes.c_char_p * max(1, len(encoded)))(*encoded)
        out = (ctypes.c_float * (dim * max(1, len(encoded))))()
        _check(_c.hetero_engine_embed(self._handle, array, len(encoded), 1 if last_token else 0, layers, out,
                                      len(out)))
        return [list(out[i * dim:(i + 1) * dim]) for i in range(len(encoded))]

    def tokenize(self, text, add_bos=False, parse_special=True):
        """Token ids of `text` in the model's vocabulary: BOS first with `add_bos`, and the
        text of control tokens such as "<|im_start|>" as those tokens with `parse_special`."""
        encoded = _args.text(text, "text")
        add_bos = _args.flag(add_bos, "add_bos")
        parse_special = _args.flag(parse_special, "parse_special")
        self._check_open()
        count = ctypes.c_size_t()
        _check(_c.hetero_engine_tokenize(self._handle, encoded, int(add_bos), int(parse_special), None, 0,
                                         ctypes.byref(count)))
        ids = (ctypes.c_int32 * max(1, count.value))()
        _check(_c.hetero_engine_tokenize(self._handle, encoded, int(add_bos), int(parse_special), ids, count.value,
                                         ctypes.byref(count)))
        return list(ids[:count.value])

    def detokenize(self, tokens, skip_special=False, errors="replace"):
        """The text `tokens` (ids) stand for; control tokens as their text unless
        `skip_special`. Bytes that are not UTF-8 (ids ending inside a character) are decoded
        with `errors` ("strict" raises UnicodeDecodeError)."""
        _args.sequence(tokens, "tokens")
        ids = [_args.integer(t, f"tokens[{i}]", minimum=-(1 << 31), maximum=(1 << 31) - 1) for i, t in enumerate(tokens)]
        skip_special = _args.flag(skip_special, "skip_special")
        self._check_open()
        array = (ctypes.c_int32 * max(1, len(ids)))(*ids)
        length = ctypes.c_size_t()
        _check(_c.hetero_engine_detokenize(self._handle, array, len(ids), int(skip_special), None, 0,
                                           ctypes.byref(length)))
        out = ctypes.create_string_buffer(length.value + 1)
        _check(_c.hetero_engine_detokenize(self._handle, array, len(ids), int(skip_special), out, len(out),
                                           ctypes.byref(length)))
        return out.raw[:length.value].decode(errors=errors)

    @property
    def vocab_size(self):
        """The number of ids in the model's vocabulary."""
        self._check_open()
        return int(_c.hetero_engine_vocab_size(self._handle))

    def _check_open(self):
        if not self._handle:
            raise InvalidArgument("HETERO_INVALID_ARGUMENT", "the engine is closed")

    def close(self):
        if getattr(self, "_handle", None):
            _c.hetero_engine_destroy(self._handle)
            self._handle = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()


def _check_run_arguments(message, *, max_tokens, temperature, top_k, top_p, min_p, repetition_penalty,
                         frequency_penalty, presence_penalty, penalty_window, stop, seed, timeout, tools,
                         max_tool_rounds, constrain_tool_calls, response_schema, logprobs, top_logprobs, on_text,
                         on_token, enable_thinking=True):
    """Checks run()'s arguments (TypeError or InvalidArgument naming the parameter);
    returns the message as UTF-8."""
    encoded = _args.text(message, "message")
    _args.integer(max_tokens, "max_tokens", minimum=1, maximum=(1 << 31) - 1)
    _args.real(temperature, "temperature", minimum=0)
    _args.integer(top_k, "top_k", minimum=0, maximum=(1 << 31) - 1)
    _args.real(top_p, "top_p", above=0, maximum=1)
    _args.real(min_p, "min_p", minimum=0)
    if min_p >= 1:
        raise _errors_invalid(f"min_p must be < 1, got {min_p}")
    _args.real(repetition_penalty, "repetition_penalty", above=0)
    _args.real(frequency_penalty, "frequency_penalty")
    _args.real(presence_penalty, "presence_penalty")
    _args.integer(penalty_window, "penalty_window", minimum=0, maximum=(1 << 31) - 1)
    if stop is not None:
        _args.sequence(stop, "stop")
        for i, s in enumerate(stop):
            _args.text(s, f"stop[{i}]")
            if not s:
                raise _errors_invalid(f"stop[{i}] is empty")
    _args.integer(seed, "seed", minimum=0, maximum=(1 << 64) - 1)
    if timeout is not None:
        _args.real(timeout, "timeout", above=0, maximum=(1 << 31) / 1000)
    if tools is not None:
        _args.sequence(tools, "tools")
        for i, t in enumerate(tools):
            if not isinstance(t, Tool) and not callable(t):
                raise TypeError(f"tools[{i}] must be a hetero.Tool or a function, not {type(t).__name__}")
    _args.integer(max_tool_rounds, "max_tool_rounds", minimum=0, maximum=(1 << 31) - 1)
    _args.flag(constrain_tool_calls, "constrain_tool_calls")
    _args.flag(enable_thinking, "enable_thinking")
    if response_schema is not None and not isinstance(response_schema, (dict, str)):
        raise TypeError(f"response_schema must be a dict, a JSON str or None, not {type(response_schema).__name__}")
    _args.flag(logprobs, "logprobs")
    _args.integer(top_logprobs, "top_logprobs", minimum=0, maximum=20)
    if top_logprobs and not logprobs:
        raise _errors_invalid("top_logprobs needs logprobs=True")
    _args.callback(on_text, "on_text")
    _args.callback(on_token, "on_token")
    return encoded


class Session:
    """A conversation. One run at a time; `cancel()` from any thread."""

    def __init__(self, engine, system_prompt=None, _create=None):
        self._engine = engine  # the engine outlives its sessions' handles
        self._handle = ctypes.c_void_p()
        if _create is not None:
            _check(_create(ctypes.byref(self._handle)))
            return
        _check(_c.hetero_session_create(engine._handle, _args.text(system_prompt, "system_prompt", optional=True),
                                        ctypes.byref(self._handle)))

    @classmethod
    def _adopt(cls, engine, create):
        return cls(engine, _create=create)

    def run(self, message, *, max_tokens=256, temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0,
            frequency_penalty=0.0, presence_penalty=0.0, penalty_window=64, stop=None, seed=0, timeout=None,
            tools=None, max_tool_rounds=4, constrain_tool_calls=True, response_schema=None, logprobs=False,
            top_logprobs=0, on_text=None, on_token=None, enable_thinking=True):
        """Runs `message` to the final answer. `tools`: Tools or functions with type hints.
        `on_text(piece)` receives answer text as it is generated; returning False cancels.
        Sampling: penalties (repetition, frequency, presence, over the last `penalty_window`
        tokens) first, then top_k, min_p, top_p and the temperature draw (0: greedy). `stop`:
        strings that end the reply before them (not shown). `response_schema` (a dict or JSON
        text; not with tools): the reply is one JSON value passing that schema, by
        constrained decoding; `json.loads(result.text)` reads it. `logprobs`: each generated
        token's log-probability in `Result.logprobs`, with `top_logprobs` (0-20) alternatives.
        `on_token(id, logprob)` receives each generated token as it is chosen (logprob 0
        without `logprobs`; with tools, call and envelope tokens too); False cancels.
        `enable_thinking=False`: reasoning templates (Qwen3) answer without reasoning."""
        encoded_message = _check_run_arguments(
            message, max_tokens=max_tokens, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
            repetition_penalty=repetition_penalty, frequency_penalty=frequency_penalty,
            presence_penalty=presence_penalty, penalty_window=penalty_window, stop=stop, seed=seed, timeout=timeout,
            tools=tools, max_tool_rounds=max_tool_rounds, constrain_tool_calls=constrain_tool_calls,
            response_schema=response_schema, logprobs=logprobs, top_logprobs=top_logprobs, on_text=on_text,
            on_token=on_token, enable_thinking=enable_thinking)
        options = _lib.RunOptions()
        _c.hetero_run_options_default(ctypes.byref(options))
        options.max_tokens = max_tokens
        options.temperature = temperature
        options.top_k = top_k
        options.top_p = top_p
        options.seed = seed
        options.min_p = min_p
        options.repetition_penalty = repetition_penalty
        options.frequency_penalty = frequency_penalty
        options.presence_penalty = presence_penalty
        options.penalty_window = penalty_window
        stop_strings = [s.encode() for s in stop] if stop else []
        stop_array = (ctypes.c_char_p * max(1, len(stop_strings)))(*stop_strings)  # lives through the run
        if stop_strings:
            options.stop = ctypes.cast(stop_array, ctypes.POINTER(ctypes.c_char_p))
            options.stop_count = len(stop_strings)
        if response_schema is not None:
            schema_text = response_schema if isinstance(response_schema, str) else json.dumps(response_schema)
            options.response_schema_json = schema_text.encode()
        options.logprobs = 1 if logprobs else 0
        options.top_logprobs = top_logprobs
        options.timeout_ms = 0 if timeout is None else max(1, int(timeout * 1000))
        options.max_tool_rounds = max_tool_rounds
        options.constrain_tool_calls = 1 if constrain_tool_calls else 0
        options.disable_thinking = 0 if enable_thinking else 1
        raised = []
        if on_text is not None:
            def text_callback(data, length, _user_data):
                try:
                    go_on = on_text(ctypes.string_at(data, length).decode(errors="replace"))
                    return 0 if go_on is None or go_on else 1
                except BaseException as e:  # noqa: BLE001 - re-raised after the run
                    raised.append(e)
                    return 1
            callback = _lib.TEXT_CALLBACK(text_callback)
            options.on_text = callback
        if on_token is not None:
            def token_callback(token, logprob, _user_data):
                try:
                    go_on = on_token(token, logprob)
                    return 0 if go_on is None or go_on else 1
                except BaseException as e:  # noqa: BLE001 - re-raised after the run
                    raised.append(e)
                    return 1
            token_trampoline = _lib.TOKEN_CALLBACK(token_callback)  # lives through the run
            options.on_token = token_trampoline
        toolset = _ToolSet(tools) if tools else None
        if toolset is not None:
            options.tools = toolset.handle
        result = ctypes.c_void_p()
        try:
            status = _c.hetero_session_run(self._handle, encoded_message, ctypes.byref(options), ctypes.byref(result))
            if raised:
                raise raised[0]
            _check(status)
            try:
                return Result(result, logprobs=logprobs)
            finally:
                _c.hetero_result_destroy(result)
        finally:
            if toolset is not None:
                toolset.close()

    def stream(self, message, **kwargs):
        """Yields answer text as it is generated; the Result is then in `.result` of the
        returned iterator. Stopping the iteration early cancels the run. Takes run()'s
        arguments but on_text, checked here, before the run starts."""
        if "on_text" in kwargs:
            raise TypeError("stream() streams the text itself: on_text is not an argument of stream()")
        unknown = set(kwargs) - set(_RUN_DEFAULTS)
        if unknown:
            raise TypeError(f"stream() got an unexpected keyword argument '{sorted(unknown)[0]}'")
        _check_run_arguments(message, **{**_RUN_DEFAULTS, **kwargs})
        return _Stream(self, message, kwargs)

    def cancel(self):
        _check(_c.hetero_session_cancel(self._handle))

    def set_adapter(self, name, scale=1.0):
        """Runs from the next one on apply the engine's LoRA adapter `name`
        (Engine.load_adapter) scaled by `scale` (1: as trained; 0: the base model); None or
        "" removes it. The session's KV cache is released (it was computed without the
        adapter): the next run encodes the conversation again. NotFound for a name not
        loaded; Busy during a run."""
        encoded = _args.text(name, "name", optional=True)
        _check(_c.hetero_session_set_adapter(self._handle, encoded, _args.real(scale, "scale")))

    def save_state(self):
        """The session's state as bytes (its conversation and KV cache; versioned,
        checksummed, independent of the device and of the weights' quantization), for
        Engine.restore_session in this process or another. Busy during a run."""
        data = ctypes.POINTER(ctypes.c_uint8)()
        size = ctypes.c_size_t()
        _check(_c.hetero_session_save_state(self._handle, ctypes.byref(data), ctypes.byref(size)))
        try:
            return ctypes.string_at(data, size.value)
        finally:
            _c.hetero_bytes_free(data)

    def save_state_file(self, path):
        """save_state() into the file `path` (written whole, then renamed into place)."""
        _check(_c.hetero_session_save_state_file(self._handle, _args.path(path, "path")))

    def close(self):
        if getattr(self, "_handle", None):
            _c.hetero_session_destroy(self._handle)
            self._handle = ctypes.c_void_p()

    def __del__(self):
        self.close()


# run()'s keyword arguments and their defaults, read off its signature (stream() checks its
# arguments against them).
_RUN_DEFAULTS = {name: p.default for name, p in inspect.signature(Session.run).parameters.items()
                 if p.kind is inspect.Parameter.KEYWORD_ONLY}


class _Stream:
    _DONE = object()

    def __init__(self, session, message, kwargs):
        self.result = None
        self._session = session
        self._queue = queue.Queue()
        self._stopped = threading.Event()
        self._error = None

        def on_text(piece):
            self._queue.put(piece)
            return not self._stopped.is_set()

        def run():
            try:
                self.result = session.run(message, on_text=on_text, **kwargs)
            except BaseException as e:  # noqa: BLE001 - handed to the iterating thread
                self._error = e
            finally:
                self._queue.put(self._DONE)

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def __iter__(self):
        return self

    def __next__(self):
        item = self._queue.get()
        if item is self._DONE:
            self._thread.join()
            if self._error is not None and not (isinstance(self._error, Cancelled) and self._stopped.is_set()):
                raise self._error
            raise StopIteration
        return item

    def close(self):
        """Stops the run (it ends Cancelled) and waits for it."""
        self._stopped.set()
        self._session.cancel()
        while self._queue.get() is not self._DONE:
            pass
        self._thread.join()

    def __del__(self):
        if self._thread.is_alive():
            self.close()
