"""The Python binding: schemas from type hints, tool outcomes, errors mapped from status
codes, and runs on the default model (skipped when it is not present). Run from the
repository root: python3 -m pytest python/tests"""

import json
import os
import pathlib
import subprocess
import threading
import time
import typing

import pytest

import hetero
from lora_file import write_lora_adapter

MODEL = pathlib.Path(os.environ.get("HETERO_MODEL", "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
needs_model = pytest.mark.skipif(not MODEL.exists(), reason=f"default model not present at {MODEL}")


def test_log_levels():
    hetero.log_to_stderr("error")
    hetero.silence_log()
    with pytest.raises(ValueError):
        hetero.log_to_stderr("loud")


def test_version():
    major, minor, patch = hetero.version().split(".")
    assert major.isdigit() and minor.isdigit() and patch.isdigit()


def test_schema_from_type_hints():
    @hetero.tool
    def convert(value: float, unit: typing.Literal["km", "mi"], places: int = 2, exact: typing.Optional[bool] = None,
                tags: typing.List[str] = ()) -> str:
        """Converts a distance.

        More text that is not part of the description."""
        return ""

    assert convert.name == "convert"
    assert convert.description == "Converts a distance."
    assert convert.schema == {
        "type": "object",
        "properties": {
            "value": {"type": "number"},
            "unit": {"enum": ["km", "mi"]},
            "places": {"type": "integer"},
            "exact": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["value", "unit"],
    }


def test_schema_refuses_what_it_cannot_describe():
    def no_hint(x):
        return x

    def dict_arg(x: dict):
        return x

    def star(*args: int):
        return args

    with pytest.raises(TypeError, match="needs a type hint"):
        hetero.Tool(no_hint)
    with pytest.raises(TypeError, match="cannot describe"):
        hetero.Tool(dict_arg)
    with pytest.raises(TypeError, match=r"\*args"):
        hetero.Tool(star)


def add(a: float, b: float) -> float:
    """Adds two numbers."""
    return a + b


def test_tool_outcomes():
    text, report = hetero.invoke_tool([add], "add", {"a": 2.5, "b": 4})
    assert (text, report["outcome"]) == ("6.5", "ok")

    text, report = hetero.invoke_tool([add], "add", {"a": "two", "b": 4})
    assert report["outcome"] == "invalid_arguments" and "arguments.a" in report["detail"]

    text, report = hetero.invoke_tool([add], "subtract", {})
    assert report["outcome"] == "unknown_tool" and "add" in text

    def broken() -> str:
        """Fails."""
        raise ValueError("no such city")

    text, report = hetero.invoke_tool([broken], "broken", {})
    assert report["outcome"] == "handler_error"
    assert "ValueError: no such city" in text

    @hetero.tool(timeout=0.1)
    def slow() -> str:
        """Takes too long."""
        time.sleep(0.4)
        return "late"

    text, report = hetero.invoke_tool([slow], "slow", {})
    assert report["outcome"] == "timeout" and "100 ms" in text
    time.sleep(0.4)  # the abandoned call finishes

    def big() -> str:
        """Returns a megabyte."""
        return "x" * (1 << 20)

    text, report = hetero.invoke_tool([big], "big", {})
    assert report["outcome"] == "ok" and report["truncated"] and report["result_bytes"] == 1 << 20
    assert len(text) < 20000 and "truncated" in text


def test_registration_errors():
    def bad(x: int) -> int:
        return x

    with pytest.raises(hetero.InvalidArgument, match="pattern"):
        hetero.invoke_tool([hetero.Tool(bad, schema={"type": "object", "properties": {
            "x": {"type": "string", "pattern": "^a"}}})], "bad", {})
    with pytest.raises(hetero.InvalidArgument):
        hetero.invoke_tool([hetero.Tool(bad, name="bad name!")], "bad name!", {})


def test_abi_version():
    assert hetero.abi_version() == hetero._lib.ABI_VERSION


def test_status_codes_map_to_their_exceptions():
    names = {1: "InvalidArgument", 2: "NotFound", 3: "Unsupported", 4: "OutOfMemory", 5: "DeviceError", 6: "Timeout",
             7: "Cancelled", 8: "Busy", 9: "Internal"}
    for status, name in names.items():
        with pytest.raises(getattr(hetero, name)) as info:
            hetero._check(status)
        assert info.value.status == hetero._c.hetero_status_name(status).decode()
    assert issubclass(hetero.InvalidArgument, ValueError) and issubclass(hetero.Timeout, TimeoutError)
    with pytest.raises(hetero.HeteroError):
        hetero._check(77)  # a status this binding does not know still raises


def test_engine_argument_types():
    with pytest.raises(TypeError, match="model_path"):
        hetero.Engine(123)
    with pytest.raises(TypeError, match="threads"):
        hetero.Engine(str(MODEL), threads="2")
    with pytest.raises(TypeError, match="threads"):
        hetero.Engine(str(MODEL), threads=True)
    with pytest.raises(TypeError, match="scheduler"):
        hetero.Engine(str(MODEL), scheduler=None)
    with pytest.raises(hetero.InvalidArgument, match="max_sessions"):
        hetero.Engine(str(MODEL), max_sessions=-3)
    with pytest.raises(hetero.InvalidArgument, match="gpu_memory_budget_bytes"):
        hetero.Engine(str(MODEL), gpu_memory_budget_bytes=-1)
    with pytest.raises(hetero.InvalidArgument, match="gpu_memory_budget_bytes"):
        hetero.Engine(str(MODEL), gpu_memory_budget_bytes=1 << 64)
    with pytest.raises(TypeError, match="gpu_memory_budget_bytes"):
        hetero.Engine(str(MODEL), gpu_memory_budget_bytes=1.5e9)
    with pytest.raises(TypeError, match="expert_usage_path"):
        hetero.Engine(str(MODEL), expert_usage_path=7)


@needs_model
def test_expert_usage_file(engine, tmp_path):
    # The default model is dense: its usage file names no layers, and reads back.
    path = tmp_path / "usage.json"
    engine.save_expert_usage(path)
    assert json.loads(path.read_text()) == {"expert_usage_version": 1, "layers": []}
    hetero.Engine(str(MODEL), threads=1, expert_usage_path=path).close()
    with pytest.raises(hetero.NotFound, match="cannot read"):
        hetero.Engine(str(MODEL), threads=1, expert_usage_path=tmp_path / "missing.json")
    path.write_text('{"expert_usage_version": 1, "layers": [{"layer": 0, "evaluations": [1, 2]}]}')
    with pytest.raises(hetero.InvalidArgument, match="layer 0 has no mixture of experts"):
        hetero.Engine(str(MODEL), threads=1, expert_usage_path=path)
    path.write_text('{"expert_usage_version": 1, "layers": [')
    with pytest.raises(hetero.InvalidArgument, match="not JSON"):
        hetero.Engine(str(MODEL), threads=1, expert_usage_path=path)
    with pytest.raises(hetero.InvalidArgument, match="empty path"):
        engine.save_expert_usage("")
    with pytest.raises(hetero.NotFound, match="cannot write"):
        engine.save_expert_usage(tmp_path / "no-such-dir" / "usage.json")
    with pytest.raises(TypeError, match="path"):
        engine.save_expert_usage(None)


@needs_model
def test_run_argument_checks(engine):
    with pytest.raises(TypeError, match="system_prompt"):
        engine.session(5)
    session = engine.session()
    with pytest.raises(TypeError, match="message"):
        session.run(123)
    with pytest.raises(TypeError, match="message"):
        session.run(None)
    with pytest.raises(TypeError, match="texts\\[1\\]"):
        engine.embed(["a", 2])
    with pytest.raises(TypeError, match="texts"):
        engine.embed(("a" for _ in range(2)))
    with pytest.raises(TypeError, match="last_token"):
        engine.embed(["a"], last_token="yes")
    with pytest.raises(TypeError, match="enable_thinking"):
        session.run("Hi", enable_thinking="no")
    with pytest.raises(TypeError, match="tools"):
        session.run("Hi", tools="add")
    with pytest.raises(TypeError, match="tools\\[0\\]"):
        session.run("Hi", tools=[42])
    with pytest.raises(hetero.InvalidArgument, match="timeout"):
        session.run("Hi", timeout=-1)
    with pytest.raises(hetero.InvalidArgument, match="timeout"):
        session.run("Hi", timeout=0)
    with pytest.raises(hetero.InvalidArgument, match="max_tokens"):
        session.run("Hi", max_tokens=0)
    with pytest.raises(TypeError, match="max_tokens"):
        session.run("Hi", max_tokens=2.5)
    with pytest.raises(hetero.InvalidArgument, match="temperature"):
        session.run("Hi", temperature=float("nan"))
    with pytest.raises(hetero.InvalidArgument, match="top_p"):
        session.run("Hi", top_p=0)
    with pytest.raises(hetero.InvalidArgument, match="seed"):
        session.run("Hi", seed=-1)
    with pytest.raises(TypeError, match="on_text"):
        session.run("Hi", on_text="print")
    with pytest.raises(TypeError, match="constrain_tool_calls"):
        session.run("Hi", constrain_tool_calls=1)
    with pytest.raises(TypeError, match="max_tokens"):
        session.stream("Hi", max_tokens="8")
    with pytest.raises(TypeError, match="unexpected keyword"):
        session.stream("Hi", max_token=8)
    # None of these reached the model: the session is untouched and runs.
    assert session.run("Say hi.", max_tokens=4).generated_tokens > 0


@needs_model
def test_tokens_in_and_out(engine):
    assert engine.vocab_size == 49152
    ids = engine.tokenize("Hello world!")
    assert ids == [19556, 905, 17]
    assert engine.detokenize(ids) == "Hello world!"
    assert len(engine.tokenize("<|im_start|>")) == 1
    assert len(engine.tokenize("<|im_start|>", parse_special=False)) > 1
    assert engine.detokenize(engine.tokenize("<|im_start|>"), skip_special=True) == ""
    assert engine.detokenize([]) == ""
    text = "Grüße, 東京 🙂"
    assert engine.detokenize(engine.tokenize(text)) == text
    with pytest.raises(hetero.InvalidArgument, match=r"tokens\[1\] is 49152"):
        engine.detokenize([1, 49152])
    with pytest.raises(TypeError, match=r"tokens\[0\]"):
        engine.detokenize(["1"])
    with pytest.raises(TypeError, match="text"):
        engine.tokenize(b"bytes")
    with pytest.raises(TypeError, match="add_bos"):
        engine.tokenize("x", add_bos=1)


@needs_model
def test_stop_strings_and_penalties(engine):
    reply = engine.session().run("Count from one to ten in words.", max_tokens=24).text
    assert len(reply) > 8
    stop_at = reply[len(reply) // 2:len(reply) // 2 + 4]
    stopped = engine.session().run("Count from one to ten in words.", max_tokens=24, stop=["never here", stop_at])
    assert stop_at not in stopped.text and reply.startswith(stopped.text)
    assert stopped.report["stop_reason"] == "stop_string"
    penalised = engine.session().run("Count from one to ten in words.", max_tokens=24, repetition_penalty=100.0,
                                     penalty_window=256)
    assert penalised.text != reply
    session = engine.session()
    with pytest.raises(hetero.InvalidArgument, match=r"stop\[0\] is empty"):
        session.run("Hi", stop=[""])
    with pytest.raises(TypeError, match="stop"):
        session.run("Hi", stop="x")
    with pytest.raises(hetero.InvalidArgument, match="min_p"):
        session.run("Hi", min_p=1.0)
    with pytest.raises(hetero.InvalidArgument, match="repetition_penalty"):
        session.run("Hi", repetition_penalty=0)
    with pytest.raises(hetero.InvalidArgument, match="penalty_window"):
        session.run("Hi", penalty_window=-1)


@needs_model
def test_response_schema(engine):
    schema = {"type": "object", "required": ["city", "country"],
              "properties": {"city": {"type": "string", "maxLength": 30}, "country": {"type": "string", "maxLength": 30}}}
    result = engine.session().run("Where is the Eiffel Tower?", response_schema=schema, max_tokens=48)
    reply = json.loads(result.text)
    assert set(reply) == {"city", "country"} and all(isinstance(v, str) for v in reply.values())
    same = engine.session().run("Where is the Eiffel Tower?", response_schema=json.dumps(schema), max_tokens=48)
    assert same.text == result.text
    assert result.reasoning == ""  # SmolLM2's template does not keep reasoning apart
    with pytest.raises(TypeError, match="response_schema"):
        engine.session().run("Hi", response_schema=["not", "a", "schema"])
    with pytest.raises(hetero.InvalidArgument, match="'pattern'"):
        engine.session().run("Hi", response_schema={"type": "object", "properties": {"a": {"type": "string",
                                                                                          "pattern": "x"}}})
    def echo(text: str) -> str:
        """Echoes the text."""
        return text

    with pytest.raises(hetero.Unsupported, match="tool_registry"):
        engine.session().run("Hi", response_schema=schema, tools=[echo])


@needs_model
def test_logprobs(engine):
    result = engine.session().run("Say hello.", max_tokens=12, logprobs=True, top_logprobs=3)
    assert len(result.logprobs) == result.generated_tokens > 0
    for entry in result.logprobs:
        assert entry["logprob"] <= 0 and len(entry["top"]) == 3
        assert entry["top"][0][1] >= entry["top"][1][1] >= entry["top"][2][1]
        assert entry["token"] == entry["top"][0][0]  # greedy: the most likely token
        assert abs(entry["logprob"] - entry["top"][0][1]) < 1e-6
    assert engine.detokenize([e["token"] for e in result.logprobs]).startswith(result.text[:4])
    assert engine.session().run("Say hello.", max_tokens=4).logprobs is None
    ids = []
    plain = engine.session().run("Say hello.", max_tokens=12, on_token=lambda token, logprob: ids.append(token))
    assert len(ids) == plain.generated_tokens and engine.detokenize(ids) == plain.text
    with pytest.raises(hetero.Cancelled):
        engine.session().run("Tell me a story.", max_tokens=40, on_token=lambda token, logprob: False)
    with pytest.raises(ZeroDivisionError):
        engine.session().run("Tell me a story.", max_tokens=40, on_token=lambda token, logprob: 1 / 0)
    with pytest.raises(TypeError, match="on_token"):
        engine.session().run("Hi", on_token=3)
    with pytest.raises(hetero.InvalidArgument, match="top_logprobs"):
        engine.session().run("Hi", logprobs=True, top_logprobs=21)
    with pytest.raises(hetero.InvalidArgument, match="needs logprobs"):
        engine.session().run("Hi", top_logprobs=2)


def test_engine_errors():
    with pytest.raises(hetero.NotFound, match="/nonexistent/model.gguf") as info:
        hetero.Engine("/nonexistent/model.gguf")
    assert info.value.status == "HETERO_NOT_FOUND"
    with pytest.raises(hetero.InvalidArgument, match="threads"):
        hetero.Engine(str(MODEL), threads=-1)


@pytest.fixture(scope="module")
def engine():
    with hetero.Engine(str(MODEL), threads=2) as e:
        yield e


@needs_model
def test_run_and_stream(engine):
    session = engine.session()
    pieces = []
    result = session.run("What is the capital of France? Answer in one word.", max_tokens=24,
                         on_text=pieces.append)
    assert result.text and "".join(pieces) == result.text
    assert [s["stage"] for s in result.report["stages"]][:2] == ["understand", "generate"]
    assert result.generated_tokens > 0

    stream = session.stream("Say hello in French.", max_tokens=16)
    streamed = "".join(stream)
    assert streamed == stream.result.text


@needs_model
@pytest.mark.skipif(os.environ.get("HETERO_EXPECT_INSTALLED") != "1", reason="checks an installed wheel (CI)")
def test_the_installed_package_carries_its_library():
    # `pip install ./python` in a fresh venv: the package and the library it loads are both
    # inside site-packages, with no HETERO_LIBRARY to point at a build tree.
    assert "HETERO_LIBRARY" not in os.environ
    package = pathlib.Path(hetero.__file__).resolve().parent
    assert "site-packages" in package.parts, package
    assert (package / "libhetero_c.so").exists()
    assert hetero.abi_version() >= 2
    # hetero-serve too (hetero.ray_serve's replicas run it), and it starts from there.
    serve = package / "bin" / "hetero-serve"
    assert serve.exists()
    assert subprocess.run([str(serve), "--help"], capture_output=True, timeout=60).returncode == 0


def test_devices(engine):
    devices = engine.devices()
    assert devices[0]["name"] == "cpu" and devices[0]["available"]
    assert devices[0]["description"].startswith("cpu")
    assert devices[0]["kv_capacity_tokens"] > 0
    assert devices[1]["name"] == "gpu"  # unavailable without one, with the reason
    if not devices[1]["available"]:
        assert devices[1]["description"].startswith("unavailable: ")


def test_embed(engine):
    a, b, c = engine.embed(["What is 12 times 7?", "What is 12 times 7?", "Book me a flight to Paris."])
    assert len(a) == 576
    assert abs(sum(x * x for x in a) - 1.0) < 1e-4
    same = sum(x * y for x, y in zip(a, b))
    other = sum(x * y for x, y in zip(a, c))
    assert abs(same - 1.0) < 1e-4 and other < same - 0.01
    assert len(engine.embed(["Hello"], last_token=True, layers=6)[0]) == 576
    with pytest.raises(hetero.InvalidArgument, match="no tokens"):
        engine.embed([""])
    with pytest.raises(hetero.InvalidArgument, match="at least 1"):
        engine.embed([])
    with pytest.raises(TypeError, match="list of texts"):
        engine.embed("one text")
    with pytest.raises(hetero.InvalidArgument, match="layers"):
        engine.embed(["x"], layers=-1)


@needs_model
def test_cancellation_and_callback_errors(engine):
    session = engine.session()
    with pytest.raises(hetero.Cancelled):
        session.run("Tell me a story about a fox.", max_tokens=64, on_text=lambda piece: False)

    def explode(piece):
        raise RuntimeError("callback failed")

    with pytest.raises(RuntimeError, match="callback failed"):
        session.run("Tell me a story about a fox.", max_tokens=64, on_text=explode)

    stream = session.stream("Tell me a long story about a fox.", max_tokens=128)
    next(stream)
    stream.close()  # ends the run early
    assert stream.result is None

    # cancel() from another thread ends a run: the callback holds the run at its first
    # piece until the main thread has cancelled, so the run is surely in progress.
    started, cancelled = threading.Event(), threading.Event()

    def hold(piece):
        started.set()
        cancelled.wait(5)
        return True

    outcome = []

    def run():
        try:
            session.run("Tell me a long story about a fox.", max_tokens=64, on_text=hold)
            outcome.append("finished")
        except hetero.Cancelled:
            outcome.append("cancelled")

    worker = threading.Thread(target=run)
    worker.start()
    assert started.wait(30)
    session.cancel()
    cancelled.set()
    worker.join(30)
    assert outcome == ["cancelled"]
    assert session.run("Say hi.", max_tokens=8).text


@needs_model
def test_agent_run_with_a_python_tool(engine):
    calls = []

    @hetero.tool
    def multiply(a: float, b: float) -> float:
        """Multiplies two numbers."""
        calls.append((a, b))
        return a * b

    result = engine.session().run("Use the multiply tool: what is 12.5 times 8?", tools=[multiply], max_tokens=96,
                                  max_tool_rounds=2)
    assert result.report["tool_format"] == "generic"
    for call in result.tool_calls:  # constrained calls are always well-formed
        assert call["outcome"] in ("ok", "handler_error", "timeout")
        assert call["name"] == "multiply"
    assert len(calls) <= len(result.tool_calls)


def test_session_state_moves_between_processes(engine, tmp_path):
    # Another process runs the first turn and saves the session; this one restores it.
    path = tmp_path / "session.state"
    script = (
        "import hetero, sys\n"
        f"e = hetero.Engine({str(MODEL)!r}, threads=2)\n"
        "s = e.session()\n"
        "s.run('Name a colour.', max_tokens=12)\n"
        "s.save_state_file(sys.argv[1])\n"
    )
    import subprocess
    import sys
    package_root = str(pathlib.Path(hetero.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
    subprocess.run([sys.executable, "-c", script, str(path)], check=True, env=env)
    whole = engine.session()
    whole.run("Name a colour.", max_tokens=12)
    expected = whole.run("And another one?", max_tokens=12)
    restored = engine.restore_session_file(path)
    got = restored.run("And another one?", max_tokens=12)
    assert got.text == expected.text
    assert got.report["reused_prompt_tokens"] > 0  # the saved tokens were not encoded again
    # In memory, and the misuse cases.
    state = whole.save_state()
    assert isinstance(state, bytes) and state[:8] == b"HETSTATE"
    again = engine.restore_session(state)
    assert again.run("Thanks.", max_tokens=4).text is not None
    with pytest.raises(ValueError, match="checksum"):
        engine.restore_session(state[:100] + bytes([state[100] ^ 1]) + state[101:])
    with pytest.raises(ValueError, match="truncated|HETSTATE"):
        engine.restore_session(state[:12])
    with pytest.raises(TypeError):
        engine.restore_session("not bytes")
    with pytest.raises(hetero.NotFound):
        engine.restore_session_file(tmp_path / "missing.state")


def test_lora_adapter(engine, tmp_path):
    adapter = write_lora_adapter(tmp_path / "voice.gguf")
    engine.load_adapter("py-voice", adapter)
    with pytest.raises(hetero.InvalidArgument, match="loaded already"):
        engine.load_adapter("py-voice", adapter)
    with pytest.raises(hetero.InvalidArgument, match="general.type"):
        engine.load_adapter("py-model", MODEL)
    with pytest.raises(hetero.NotFound):
        engine.load_adapter("py-missing", tmp_path / "missing.gguf")
    with pytest.raises(TypeError, match="name"):
        engine.load_adapter(123, adapter)
    texts = []
    for scale in (None, 0.0, 1.0):
        s = engine.session()
        if scale is not None:
            s.set_adapter("py-voice", scale)
        texts.append(s.run("Name a colour.", max_tokens=12).text)
    assert texts[1] == texts[0]  # scale 0: the base model
    assert texts[2] != texts[0]
    s = engine.session()
    with pytest.raises(hetero.NotFound, match="py-voice"):
        s.set_adapter("py-other")
    with pytest.raises(hetero.InvalidArgument, match="finite"):
        s.set_adapter("py-voice", float("nan"))
    with pytest.raises(TypeError, match="scale"):
        s.set_adapter("py-voice", "1")
    s.set_adapter(None)
