"""hetero-serve against the real `openai` client (PyPI): chat, streaming, structured output,
completions, embeddings, models, metrics, prefix reuse across requests, and the errors a
client meets, with the server still serving after each. Skipped without the client or the
built server (HETERO_SERVE, else build/bin/hetero-serve)."""

import json
import os
import pathlib
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from lora_file import write_lora_adapter

openai = pytest.importorskip("openai")

REPO = pathlib.Path(__file__).resolve().parents[2]
SERVE = pathlib.Path(os.environ.get("HETERO_SERVE", REPO / "build" / "bin" / "hetero-serve"))
MODEL = pathlib.Path(os.environ.get("HETERO_MODEL", REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
KEY = "sk-hetero-test"


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not SERVE.exists() or not MODEL.exists():
        pytest.skip(f"needs {SERVE} and {MODEL}")
    port = _free_port()
    adapter = write_lora_adapter(tmp_path_factory.mktemp("lora") / "voice.gguf")
    process = subprocess.Popen([str(SERVE), "-m", str(MODEL), "--port", str(port), "--api-key", KEY, "-t", "2",
                                "--max-concurrent", "4", "--max-body-bytes", "65536", "--model-name", "smol",
                                "--io-timeout", "3", "--lora", f"voice={adapter}"],
                               stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            with urllib.request.urlopen(base + "/health", timeout=1) as r:
                if r.status == 200:
                    break
        except OSError:
            time.sleep(0.1)
    else:
        process.kill()
        pytest.fail("hetero-serve did not start: " + process.stderr.read())
    yield base
    process.terminate()  # SIGTERM drains
    assert process.wait(timeout=30) == 0


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server + "/v1", api_key=KEY, max_retries=0, timeout=60)


def _raw(server, path, body, key=KEY, content_type="application/json"):
    request = urllib.request.Request(server + path, data=body, method="POST",
                                     headers={"Authorization": f"Bearer {key}", "Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def test_models_and_chat(client):
    assert [m.id for m in client.models.list().data] == ["smol", "voice"]
    r = client.chat.completions.create(model="smol", max_tokens=12, messages=[
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is the capital of France? Answer in one word."}])
    assert "Paris" in r.choices[0].message.content
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.completion_tokens > 0 and r.usage.prompt_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    report = r.model_extra["hetero"]  # the vendor field: hetero's task report
    assert [s["stage"] for s in report["stages"]] == ["understand", "generate"]


def test_streaming_with_usage(client):
    pieces, usage, finish = [], None, None
    for chunk in client.chat.completions.create(model="smol", max_tokens=8, stream=True,
                                                stream_options={"include_usage": True},
                                                messages=[{"role": "user", "content": "Say hello."}]):
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            pieces.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    assert "".join(pieces).strip()
    assert finish in ("stop", "length")
    assert usage is not None and usage.completion_tokens > 0


def test_json_schema_output_validates(client):
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
              "required": ["city", "population"]}
    r = client.chat.completions.create(model="smol", max_tokens=48, messages=[
        {"role": "user", "content": "Give the largest city of Japan and its population as JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": schema}})
    value = json.loads(r.choices[0].message.content)
    assert isinstance(value["city"], str) and isinstance(value["population"], int)


def test_prefix_of_an_earlier_request_is_reused(client):
    messages = [{"role": "system", "content": "You are a helpful assistant who answers briefly and exactly. " * 4},
                {"role": "user", "content": "Name a colour."}]
    first = client.chat.completions.create(model="smol", max_tokens=6, messages=messages)
    messages += [{"role": "assistant", "content": first.choices[0].message.content},
                 {"role": "user", "content": "And another one?"}]
    second = client.chat.completions.create(model="smol", max_tokens=6, messages=messages)
    assert second.model_extra["hetero"]["shared_prompt_tokens"] >= 16  # whole KV blocks from the first


def test_completions_and_embeddings(client):
    r = client.completions.create(model="smol", prompt="The capital of France is", max_tokens=4, temperature=0)
    assert r.choices[0].text.strip()
    e = client.embeddings.create(model="smol", input=["Add 3 and 4.", "What is 12 times 7?"])
    assert len(e.data) == 2 and e.data[1].index == 1
    v = e.data[0].embedding
    assert abs(sum(x * x for x in v) - 1.0) < 1e-3


def test_errors_and_still_serving(server, client):
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server + "/v1", api_key="wrong", max_retries=0).models.list()
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.BadRequestError, match="not supported by hetero-serve yet"):
        client.chat.completions.create(model="smol", messages=[{"role": "user", "content": "hi"}],
                                       logit_bias={"1": 5})
    with pytest.raises(openai.BadRequestError, match="temperature"):
        client.chat.completions.create(model="smol", temperature=5, messages=[{"role": "user", "content": "hi"}])
    status, body = _raw(server, "/v1/chat/completions", b"{not json")
    assert status == 400 and "not valid JSON" in body["error"]["message"]
    status, body = _raw(server, "/v1/chat/completions", json.dumps({"model": "smol", "messages": "hi"}).encode())
    assert status == 400 and body["error"]["param"] == "messages"
    bad_utf8 = b'{"model": "smol", "max_tokens": 2, "messages": [{"role": "user", "content": "\xff\xfe"}]}'
    status, body = _raw(server, "/v1/chat/completions", bad_utf8)
    assert status == 400
    status, body = _raw(server, "/v1/chat/completions", b"x" * 100000)
    assert status == 413 and body["error"]["message"]
    status, _ = _raw(server, "/v1/embeddings", b'{"model": "smol", "input": []}')
    assert status == 400
    r = client.chat.completions.create(model="smol", max_tokens=2, messages=[{"role": "user", "content": "hi"}])
    assert r.choices[0].message.content is not None


def test_a_client_that_stalls_is_dropped_and_the_server_serves_on(server, client):
    # Half a request, then nothing: the server closes the connection after --io-timeout (3 s).
    host, port = server.rsplit(":", 1)
    with socket.create_connection((host.split("//")[1], int(port)), timeout=30) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{\"mo")
        start = time.monotonic()
        while s.recv(4096):  # whatever answer, then the close
            pass
        assert time.monotonic() - start < 20
    r = client.chat.completions.create(model="smol", max_tokens=2, messages=[{"role": "user", "content": "hi"}])
    assert r.choices[0].message.content is not None


def _metrics(server):
    request = urllib.request.Request(server + "/metrics", headers={"Authorization": f"Bearer {KEY}"})
    with urllib.request.urlopen(request, timeout=10) as r:
        return dict(line.rsplit(" ", 1) for line in r.read().decode().splitlines() if line and not line.startswith("#"))


# Prompts that run for thousands of tokens here (greedy): the request is still generating when
# its client goes away.
_LONG_RUNS = {
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "Repeat after me, without stopping: "
                                           + ", ".join(str(i) for i in range(1, 31)) + ","}]},
    "/v1/completions": {"prompt": ", ".join(str(i) for i in range(1, 11)) + ","},
}


@pytest.mark.parametrize("endpoint", sorted(_LONG_RUNS))
def test_a_client_that_goes_away_cancels_a_request_not_streamed(server, endpoint):
    cancelled = f'hetero_requests_total{{endpoint="{endpoint}",code="499"}}'
    before = float(_metrics(server).get(cancelled, 0))
    body = json.dumps({"model": "smol", "max_tokens": 2000, "temperature": 0, **_LONG_RUNS[endpoint]})
    host, port = server.split("//")[1].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall((f"POST {endpoint} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
                   f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode())
        time.sleep(1.0)  # generating: 2000 tokens take well over ten seconds here
    closed = time.monotonic()
    while time.monotonic() - closed < 10:
        m = _metrics(server)
        if float(m.get(cancelled, 0)) > before and float(m["hetero_num_requests_running"]) == 0:
            break
        time.sleep(0.05)
    assert float(m.get(cancelled, 0)) == before + 1  # ended as cancelled, not by finishing
    assert float(m["hetero_num_requests_running"]) == 0 and float(m["hetero_kv_cache_usage_perc"]) == 0
    assert time.monotonic() - closed < 5


def test_metrics(server, client):
    request = urllib.request.Request(server + "/metrics", headers={"Authorization": f"Bearer {KEY}"})
    with urllib.request.urlopen(request, timeout=10) as r:
        text = r.read().decode()
    for name in ("hetero_num_requests_running", "hetero_num_requests_waiting", "hetero_kv_cache_usage_perc",
                 'hetero_requests_total{endpoint="/v1/chat/completions",code="200"}',
                 "hetero_time_to_first_token_seconds_bucket", "hetero_energy_joules_total"):
        assert name in text, name


ADD = {"type": "function", "function": {
    "name": "add", "description": "Adds two numbers.",
    "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                   "required": ["a", "b"]}}}
NOW = {"type": "function", "function": {"name": "current_time", "description": "The time now.",
                                        "parameters": {"type": "object", "properties": {}}}}


def test_tools_required_named_and_the_result_fed_back(client):
    question = [{"role": "user", "content": "What is 2.5 plus 4?"}]
    r = client.chat.completions.create(model="smol", max_tokens=64, messages=question, tools=[ADD, NOW],
                                       tool_choice="required")
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls
    assert calls and all(c.function.name in ("add", "current_time") for c in calls)
    for c in calls:
        json.loads(c.function.arguments)  # valid JSON by construction
    named = client.chat.completions.create(model="smol", max_tokens=64, messages=question, tools=[ADD, NOW],
                                           tool_choice={"type": "function", "function": {"name": "current_time"}},
                                           parallel_tool_calls=False)
    assert [c.function.name for c in named.choices[0].message.tool_calls] == ["current_time"]
    add = client.chat.completions.create(model="smol", max_tokens=64, messages=question, tools=[ADD],
                                         tool_choice={"type": "function", "function": {"name": "add"}})
    call = add.choices[0].message.tool_calls[0]
    arguments = json.loads(call.function.arguments)
    assert set(arguments) >= {"a", "b"} and all(isinstance(v, (int, float)) for v in arguments.values())
    # The client runs the tool and sends the result back: the model answers.
    answer = client.chat.completions.create(model="smol", max_tokens=32, tools=[ADD], messages=question + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function", "function": {"name": "add", "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": "6.5"}])
    assert answer.choices[0].finish_reason in ("stop", "length", "tool_calls")
    # Streamed: the calls arrive as deltas with their index.
    deltas = []
    for chunk in client.chat.completions.create(model="smol", max_tokens=64, messages=question, tools=[ADD],
                                                tool_choice="required", stream=True):
        for c in chunk.choices:
            deltas.extend(c.delta.tool_calls or [])
    assert deltas and [d.index for d in deltas] == list(range(len(deltas)))
    assert all(d.function.name == "add" for d in deltas)


def test_load_sixteen_streaming_clients(server):
    """16 streaming clients, one request after another, for HETERO_LOAD_SECONDS (30) against
    a limit of 4 at once: no errors (429s are the server saying busy), and afterwards nothing
    running and no KV in use. scripts/serve_load.py is the same load the llama-server
    comparison in docs/PERFORMANCE.md uses."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("serve_load", REPO / "scripts" / "serve_load.py")
    serve_load = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(serve_load)
    seconds = float(os.environ.get("HETERO_LOAD_SECONDS", "30"))

    def make_client():
        return openai.OpenAI(base_url=server + "/v1", api_key=KEY, max_retries=0, timeout=60)

    r = serve_load.run_level(make_client, "smol", concurrency=16, seconds=seconds, max_tokens=32)
    print(f"\n16 streams for {r['seconds']:.0f} s: {r['requests']} requests, {r['busy_429']} x 429, "
          f"{r['tokens_per_second']:.1f} tok/s, TTFT p50 {r['ttft_p50_s']:.3f} s, p99 {r['ttft_p99_s']:.3f} s")
    assert r["errors"] == []
    assert r["requests"] > 0 and r["busy_429"] > 0  # 16 clients against --max-concurrent 4
    assert r["ttft_p99_s"] is not None
    for _ in range(50):  # the last streams' sessions end just after their [DONE]
        with urllib.request.urlopen(urllib.request.Request(server + "/metrics",
                                                           headers={"Authorization": f"Bearer {KEY}"})) as m:
            metrics = dict(line.rsplit(" ", 1) for line in m.read().decode().splitlines()
                           if line and not line.startswith("#"))
        if float(metrics["hetero_num_requests_running"]) == 0 and float(metrics["hetero_kv_cache_usage_perc"]) == 0:
            break
        time.sleep(0.1)
    assert float(metrics["hetero_num_requests_running"]) == 0
    assert float(metrics["hetero_kv_cache_usage_perc"]) == 0


def test_a_lora_adapter_is_a_model_of_its_own_name(server, client):
    # --lora voice=FILE: "voice" is the base model with that adapter (as vLLM serves them).
    ask = [{"role": "user", "content": "Name a colour."}]
    base = client.chat.completions.create(model="smol", max_tokens=12, temperature=0, messages=ask)
    voice = client.chat.completions.create(model="voice", max_tokens=12, temperature=0, messages=ask)
    assert voice.model == "voice"
    assert voice.choices[0].message.content != base.choices[0].message.content
    again = client.chat.completions.create(model="voice", max_tokens=12, temperature=0, messages=ask)
    assert again.choices[0].message.content == voice.choices[0].message.content
    streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model="voice", max_tokens=12, temperature=0, messages=ask, stream=True) if c.choices)
    assert streamed == voice.choices[0].message.content
    text = client.completions.create(model="voice", prompt="Colours:", max_tokens=8, temperature=0)
    assert text.model == "voice"
    assert text.choices[0].text != client.completions.create(model="smol", prompt="Colours:", max_tokens=8,
                                                             temperature=0).choices[0].text
    with pytest.raises(openai.BadRequestError, match="LoRA adapter"):
        client.embeddings.create(model="voice", input=["a"])


def test_expert_usage_file_is_read_at_start_and_written_at_stop(tmp_path):
    if not SERVE.exists() or not MODEL.exists():
        pytest.skip(f"needs {SERVE} and {MODEL}")
    usage = tmp_path / "usage.json"

    def start():
        port = _free_port()
        process = subprocess.Popen([str(SERVE), "-m", str(MODEL), "--port", str(port), "-t", "1",
                                    "--expert-usage", str(usage)], stderr=subprocess.PIPE, text=True)
        for _ in range(200):
            if process.poll() is not None:
                return process, None
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                    return process, port
            except OSError:
                time.sleep(0.1)
        process.kill()
        pytest.fail("hetero-serve did not start")

    # First run: no file yet; the server writes one when it stops (the model is dense: no layers).
    for _ in range(2):  # the second run reads the first's file and writes it back
        process, port = start()
        assert port is not None, process.stderr.read()
        process.terminate()
        assert process.wait(timeout=30) == 0
        assert "expert usage written to" in process.stderr.read()
        assert json.loads(usage.read_text()) == {"expert_usage_version": 1, "layers": []}
    # A corrupt or misfit file, or one that could not be written, stops the server at start.
    process = subprocess.Popen([str(SERVE), "-m", str(MODEL), "--port", str(_free_port()), "-t", "1",
                                "--expert-usage", str(tmp_path / "missing-dir" / "usage.json")],
                               stderr=subprocess.PIPE, text=True)
    assert process.wait(timeout=30) != 0
    assert "no directory" in process.stderr.read()
    for text, why in [('{"expert_usage_version": 1, "layers": [', "not JSON"),
                      ('{"expert_usage_version": 1, "layers": [{"layer": 0, "evaluations": [1]}]}',
                       "has no mixture of experts")]:
        usage.write_text(text)
        process, port = start()
        assert port is None
        assert process.wait(timeout=30) != 0
        assert why in process.stderr.read()
