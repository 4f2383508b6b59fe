"""hetero on Ray Serve (hetero.ray_serve): a local two-replica application answering the
real `openai` client, conversations kept on the replica that holds their KV, and one
replica killed mid-run with its requests failing as retryable and the rest served.
Skipped without `ray[serve]` and `openai` (PyPI), the built hetero-serve or the model."""

import os
import pathlib
import socket
import threading
import time

import pytest

openai = pytest.importorskip("openai")
ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")

import hetero  # noqa: E402 - after the skips
from hetero import ray_serve  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
MODEL = pathlib.Path(os.environ.get("HETERO_MODEL", REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
NAME = MODEL.stem
SYSTEM = ("You are a helpful assistant of a bicycle shop. You answer briefly and politely, and you "
          "recommend a visit to the shop for anything that needs tools. ") * 4


def test_session_key_and_rendezvous_ranking():
    turn1 = {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "a"}]}
    turn2 = {"messages": turn1["messages"] + [{"role": "assistant", "content": "b"},
                                              {"role": "user", "content": "c"}]}
    assert ray_serve.session_key(turn1, {}) == ray_serve.session_key(turn2, {})
    other = {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "x"}]}
    assert ray_serve.session_key(other, {}) != ray_serve.session_key(turn1, {})
    assert ray_serve.session_key(turn1, {"x-session-id": "abc"}) == "id:abc"
    assert ray_serve.session_key({"prompt": "p", "user": "u1"}, {}) == "user:u1"
    assert ray_serve.session_key({"prompt": "p"}, {}) is None
    assert ray_serve.session_key(None, {}) is None
    # Removing a replica moves only the keys it was first for.
    replicas = [f"r{i}" for i in range(5)]
    keys = [f"k{i}" for i in range(200)]
    first = {k: ray_serve.rank_by_session(k, replicas)[0] for k in keys}
    assert len(set(first.values())) == 5  # every replica gets some
    after = {k: ray_serve.rank_by_session(k, replicas[:2] + replicas[3:])[0] for k in keys}
    assert all(after[k] == first[k] for k in keys if first[k] != "r2")
    assert all(after[k] == ray_serve.rank_by_session(k, replicas)[1] for k in keys if first[k] == "r2")


def test_build_app_refuses_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="not both"):
        ray_serve.build_app(str(MODEL), num_replicas=2, autoscaling_config={"max_replicas": 2})
    with pytest.raises(ValueError, match="cpus_per_replica"):
        ray_serve.build_app(str(MODEL), cpus_per_replica=0)
    with pytest.raises(FileNotFoundError, match="no model file"):
        ray_serve.build_app(str(tmp_path / "missing.gguf"))
    with pytest.raises(FileNotFoundError, match="hetero-serve not found"):
        ray_serve.build_app(str(MODEL), server_binary=str(tmp_path / "nothing"))


@pytest.fixture(scope="module")
def app():
    try:
        ray_serve.find_server_binary()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    if not MODEL.exists():
        pytest.skip(f"needs {MODEL}")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Ray's workers import hetero from where this test did (a source tree or the wheel).
    package_root = str(pathlib.Path(hetero.__file__).resolve().parents[1])
    env = {"PYTHONPATH": os.pathsep.join([package_root] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    for name in ("HETERO_LIBRARY", "HETERO_SERVE"):
        if os.environ.get(name):
            env[name] = os.environ[name]
    ray.init(num_cpus=4, include_dashboard=False, runtime_env={"env_vars": env}, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(ray_serve.build_app(str(MODEL), num_replicas=2, cpus_per_replica=1))
    yield f"http://127.0.0.1:{port}/v1"
    serve.shutdown()
    ray.shutdown()


def client(base, retries=0):
    return openai.OpenAI(base_url=base, api_key="none", max_retries=retries, timeout=120)


def test_two_replicas_answer_the_openai_client(app):
    c = client(app)
    assert c.models.list().data[0].id == NAME
    r = c.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "Name a colour."}],
                                  max_tokens=8, temperature=0)
    assert r.choices[0].message.content and r.usage.completion_tokens > 0
    pieces = [ch.choices[0].delta.content or "" for ch in
              c.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "Count to three."}],
                                        max_tokens=8, temperature=0, stream=True) if ch.choices]
    assert "".join(pieces)
    e = c.embeddings.create(model=NAME, input=["one", "two"])
    assert len(e.data) == 2
    with pytest.raises(openai.NotFoundError):  # the replica's own errors come through
        c.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])


def test_a_conversation_returns_to_the_replica_holding_its_kv(app):
    # With two replicas and no affinity, about half of the second turns would land on the
    # replica that never saw the first and reuse nothing.
    c = client(app)
    for i in range(8):
        messages = [{"role": "system", "content": f"Session {i}. " + SYSTEM},
                    {"role": "user", "content": "Do you repair brakes?"}]
        first = c.chat.completions.create(model=NAME, messages=messages, max_tokens=8, temperature=0)
        messages += [{"role": "assistant", "content": first.choices[0].message.content},
                     {"role": "user", "content": "And tyres?"}]
        second = c.chat.completions.with_raw_response.create(model=NAME, messages=messages, max_tokens=8,
                                                             temperature=0)
        report = second.http_response.json()["hetero"]
        assert report["shared_prompt_tokens"] >= first.usage.prompt_tokens // 2, (i, report["shared_prompt_tokens"])


def test_a_killed_replica_fails_its_requests_as_retryable_and_the_rest_are_served(app):
    outcomes = []  # (time, "ok" | "retryable" | error text)
    lock = threading.Lock()
    stop = time.monotonic() + 20

    def loop(index):
        c = client(app, retries=0)
        n = 0
        while time.monotonic() < stop:
            n += 1
            messages = [{"role": "user", "content": f"Client {index}, question {n}: tell me about bicycles."}]
            try:
                if n % 2:
                    c.chat.completions.create(model=NAME, messages=messages, max_tokens=24, temperature=0)
                else:
                    for _ in c.chat.completions.create(model=NAME, messages=messages, max_tokens=24, temperature=0,
                                                       stream=True):
                        pass
                result = "ok"
            except openai.APIStatusError as e:
                result = "retryable" if e.status_code == 503 and e.code == "replica_unavailable" else repr(e)
            except openai.APIError as e:  # an error event ending a stream
                result = "retryable" if e.code == "replica_unavailable" else repr(e)
            with lock:
                outcomes.append((time.monotonic(), result))

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    time.sleep(5)
    replicas = [a for a in ray.util.list_named_actors(all_namespaces=True) if "HeteroReplica" in a["name"]]
    assert len(replicas) == 2, replicas
    killed_at = time.monotonic()
    ray.kill(ray.get_actor(replicas[0]["name"], namespace=replicas[0]["namespace"]), no_restart=True)
    for t in threads:
        t.join()
    failures = [r for _, r in outcomes if r not in ("ok", "retryable")]
    assert failures == [], failures
    assert any(r == "ok" and t < killed_at for t, r in outcomes)
    assert sum(1 for t, r in outcomes if r == "ok" and t > killed_at + 2) >= 4  # the other replica serves on
    # The openai client's own retries (its default) turn the retryable failures into answers.
    r = client(app, retries=3).chat.completions.create(model=NAME, messages=[{"role": "user", "content": "Hi"}],
                                                       max_tokens=4)
    assert r.choices[0].message.content is not None
