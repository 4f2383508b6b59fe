"""Loading libhetero_c and declaring the C functions (capi/hetero.h) for ctypes."""

import ctypes
import ctypes.util
import os
import pathlib

ABI_VERSION = 2  # HETERO_ABI_VERSION of the header this binding was written against


def _candidates():
    env = os.environ.get("HETERO_LIBRARY")
    if env:
        yield env
        return
    here = pathlib.Path(__file__).resolve().parent
    yield str(here / "libhetero_c.so")  # bundled beside the package
    for parent in here.parents:  # a source tree: <repo>/python/hetero -> <repo>/build/lib
        candidate = parent / "build" / "lib" / "libhetero_c.so"
        if candidate.exists():
            yield str(candidate)
            break
    found = ctypes.util.find_library("hetero_c")
    if found:
        yield found


def load():
    errors = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
            continue
        _declare(lib)
        if lib.hetero_abi_version() != ABI_VERSION:
            raise ImportError(
                f"{path} implements hetero C ABI {lib.hetero_abi_version()}, this binding needs {ABI_VERSION}")
        return lib
    raise ImportError("cannot load libhetero_c.so (set HETERO_LIBRARY to its path): " +
                      ("; ".join(errors) if errors else "not found"))


c_status = ctypes.c_int


class EngineOptions(ctypes.Structure):
    # The scheduler callback fields are left NULL: Python policies are not offered (a
    # callback per stage would take the GIL on the engine's hot path).
    _fields_ = [("struct_size", ctypes.c_size_t), ("model_path", ctypes.c_char_p), ("threads", ctypes.c_int32),
                ("scheduler", ctypes.c_char_p), ("max_sessions", ctypes.c_int32),
                ("scheduler_callback", ctypes.c_void_p), ("scheduler_user_data", ctypes.c_void_p),
                ("scheduler_name", ctypes.c_char_p), ("gpu_memory_budget_bytes", ctypes.c_uint64),
                ("expert_usage_path", ctypes.c_char_p)]


TOOL_HANDLER = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p)
TEXT_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
TOKEN_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_float, ctypes.c_void_p)


class Tool(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("name", ctypes.c_char_p), ("description", ctypes.c_char_p),
                ("parameters_json", ctypes.c_char_p), ("handler", TOOL_HANDLER), ("user_data", ctypes.c_void_p),
                ("timeout_ms", ctypes.c_uint32)]


class RunOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("max_tokens", ctypes.c_int32), ("temperature", ctypes.c_float),
                ("top_k", ctypes.c_int32), ("top_p", ctypes.c_float), ("seed", ctypes.c_uint64),
                ("timeout_ms", ctypes.c_uint32), ("on_text", TEXT_CALLBACK), ("on_text_user_data", ctypes.c_void_p),
                ("tools", ctypes.c_void_p), ("max_tool_rounds", ctypes.c_int32),
                ("constrain_tool_calls", ctypes.c_int32), ("min_p", ctypes.c_float),
                ("repetition_penalty", ctypes.c_float), ("frequency_penalty", ctypes.c_float),
                ("presence_penalty", ctypes.c_float), ("penalty_window", ctypes.c_int32),
                ("stop", ctypes.POINTER(ctypes.c_char_p)), ("stop_count", ctypes.c_size_t),
                ("response_schema_json", ctypes.c_char_p), ("logprobs", ctypes.c_int32),
                ("top_logprobs", ctypes.c_int32), ("on_token", TOKEN_CALLBACK), ("on_token_user_data", ctypes.c_void_p),
                ("disable_thinking", ctypes.c_int32)]


class DeviceState(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("device", ctypes.c_int), ("available", ctypes.c_int32),
                ("queued_tasks", ctypes.c_int32), ("active_tasks", ctypes.c_int32),
                ("kv_capacity_tokens", ctypes.c_int64), ("kv_free_tokens", ctypes.c_int64),
                ("kv_bytes_per_token", ctypes.c_int64), ("prefill_tokens_per_s", ctypes.c_double),
                ("decode_tokens_per_s", ctypes.c_double), ("active_watts", ctypes.c_double),
                ("idle_watts", ctypes.c_double)]


def _declare(lib):
    p = ctypes.c_void_p
    pp = ctypes.POINTER(ctypes.c_void_p)
    sigs = {
        "hetero_abi_version": (ctypes.c_uint32, []),
        "hetero_version_string": (ctypes.c_char_p, []),
        "hetero_status_name": (ctypes.c_char_p, [c_status]),
        "hetero_last_error": (ctypes.c_char_p, []),
        "hetero_set_log_callback": (None, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]),
        "hetero_engine_options_default": (None, [ctypes.POINTER(EngineOptions)]),
        "hetero_engine_create": (c_status, [ctypes.POINTER(EngineOptions), pp]),
        "hetero_engine_destroy": (None, [p]),
        "hetero_engine_embedding_dimension": (ctypes.c_int32, [p]),
        "hetero_engine_device_count": (ctypes.c_size_t, [p]),
        "hetero_engine_device": (c_status, [p, ctypes.c_size_t, ctypes.POINTER(DeviceState), ctypes.c_char_p,
                                            ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]),
        "hetero_engine_embed": (c_status, [p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_int32, ctypes.c_int32,
                                           ctypes.c_int32, ctypes.POINTER(ctypes.c_float), ctypes.c_size_t]),
        "hetero_engine_tokenize": (c_status, [p, ctypes.c_char_p, ctypes.c_int32, ctypes.c_int32,
                                              ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t,
                                              ctypes.POINTER(ctypes.c_size_t)]),
        "hetero_engine_detokenize": (c_status, [p, ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t, ctypes.c_int32,
                                                ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]),
        "hetero_engine_vocab_size": (ctypes.c_int32, [p]),
        "hetero_tool_reply_set_result": (c_status, [p, ctypes.c_char_p, ctypes.c_size_t]),
        "hetero_tool_reply_set_error": (c_status, [p, ctypes.c_char_p]),
        "hetero_tool_default": (None, [ctypes.POINTER(Tool)]),
        "hetero_tools_create": (c_status, [pp]),
        "hetero_tools_destroy": (None, [p]),
        "hetero_tools_add": (c_status, [p, ctypes.POINTER(Tool)]),
        "hetero_tools_invoke": (c_status, [p, ctypes.c_char_p, ctypes.c_char_p, pp]),
        "hetero_session_create": (c_status, [p, ctypes.c_char_p, pp]),
        "hetero_session_destroy": (None, [p]),
        "hetero_session_save_state": (c_status, [p, ctypes.POINTER(ctypes.POINTER(ctypes.c_uint8)),
                                                 ctypes.POINTER(ctypes.c_size_t)]),
        "hetero_session_save_state_file": (c_status, [p, ctypes.c_char_p]),
        "hetero_bytes_free": (None, [ctypes.POINTER(ctypes.c_uint8)]),
        "hetero_engine_restore_session": (c_status, [p, ctypes.POINTER(ctypes.c_uint8), ctypes.c_size_t, pp]),
        "hetero_engine_restore_session_file": (c_status, [p, ctypes.c_char_p, pp]),
        "hetero_session_cancel": (c_status, [p]),
        "hetero_engine_load_adapter": (c_status, [p, ctypes.c_char_p, ctypes.c_char_p]),
        "hetero_engine_save_expert_usage": (c_status, [p, ctypes.c_char_p]),
        "hetero_session_set_adapter": (c_status, [p, ctypes.c_char_p, ctypes.c_float]),
        "hetero_run_options_default": (None, [ctypes.POINTER(RunOptions)]),
        "hetero_session_run": (c_status, [p, ctypes.c_char_p, ctypes.POINTER(RunOptions), pp]),
        "hetero_result_destroy": (None, [p]),
        "hetero_result_text": (ctypes.c_char_p, [p]),
        "hetero_result_reasoning": (ctypes.c_char_p, [p]),
        "hetero_result_report_json": (ctypes.c_char_p, [p]),
        "hetero_result_generated_tokens": (ctypes.c_int32, [p]),
        "hetero_result_tool_call_count": (ctypes.c_int32, [p]),
        "hetero_result_logprob_count": (ctypes.c_size_t, [p]),
        "hetero_result_logprob": (c_status, [p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_int32),
                                             ctypes.POINTER(ctypes.c_float)]),
        "hetero_result_top_logprob_count": (ctypes.c_size_t, [p, ctypes.c_size_t]),
        "hetero_result_top_logprob": (c_status, [p, ctypes.c_size_t, ctypes.c_size_t, ctypes.POINTER(ctypes.c_int32),
                                                 ctypes.POINTER(ctypes.c_float)]),
    }
    for name, (restype, argtypes) in sigs.items():
        f = getattr(lib, name)
        f.restype = restype
        f.argtypes = argtypes
