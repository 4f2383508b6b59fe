"""hetero on Ray Serve: hetero-serve replicas behind one OpenAI-compatible endpoint.

Each replica owns one engine: a `hetero-serve` process it starts on a loopback port, with
its own threads (`cpus_per_replica`) or its own GPU (`gpus_per_replica`). An ingress
deployment takes the HTTP requests and hands each to a replica; Ray Serve supplies the
replica count (fixed, or `autoscaling_config`), health checks (each replica's
`check_health` asks its server's `/health`), and restarts of replicas that fail.

Session affinity: requests of one conversation go to the replica that holds its KV. A
conversation is named by the `X-Session-Id` header, else the request's `user` field, else
its messages up to and including the first user message (every later turn of an OpenAI
client's conversation starts with them); `SessionAffinityRouter` ranks the replicas by
rendezvous hashing of that name, so a replica that goes away moves only its own
conversations. Requests without a name (completions, embeddings) take Ray Serve's default
choice (the less loaded of two).

A replica that dies: its requests fail with HTTP 503 and `Retry-After`, an OpenAI-shaped
error with code `replica_unavailable`, which clients retry (the `openai` client does so by
itself); new requests go to the other replicas while Ray Serve starts a new one. A stream
that has started when its replica dies ends with that error as its last event.

    import ray
    from ray import serve
    from hetero.ray_serve import build_app

    ray.init()
    serve.run(build_app("models/SmolLM2-135M-Instruct.Q4_1.gguf", num_replicas=2, cpus_per_replica=2))
    # http://127.0.0.1:8000/v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models,
    # /health (a replica's), /metrics (one replica's per scrape; Ray's metrics export the
    # deployment's replica counts and queue lengths)

Needs `ray[serve]` (PyPI) and the `hetero-serve` program: `server_binary`, else
$HETERO_SERVE, else the one bundled in this package, else a source tree's
build/bin/hetero-serve, else `hetero-serve` on PATH.
"""

import hashlib
import json
import os
import pathlib
import shutil
import socket
import subprocess
import time
import urllib.request
from typing import Any, Dict, List, Optional

import aiohttp
from ray import serve
from ray.serve.config import RequestRouterConfig
from ray.serve.request_router import PendingRequest, RunningReplica
from ray.serve._private.request_router.pow_2_router import PowerOfTwoChoicesRequestRouter
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

SESSION_HEADER = "x-session-id"
# Hop-by-hop and framing headers are not passed through, nor compression (aiohttp undoes it).
_DROP_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "keep-alive", "content-encoding",
                 "accept-encoding"}


def find_server_binary(explicit: Optional[str] = None) -> str:
    """The hetero-serve program a replica runs (see the module's docstring for the order). A
    path given (argument or $HETERO_SERVE) must be the program: no other is tried then."""
    def runnable(path):
        return os.path.isfile(path) and os.access(path, os.X_OK)
    for given, what in ((explicit, "server_binary"), (os.environ.get("HETERO_SERVE"), "HETERO_SERVE")):
        if given:
            if not runnable(given):
                raise FileNotFoundError(f"hetero-serve not found at {given} ({what})")
            return given
    here = pathlib.Path(__file__).resolve().parent
    candidates = [here / "bin" / "hetero-serve"] + [p / "build" / "bin" / "hetero-serve" for p in here.parents]
    for c in [str(c) for c in candidates] + [shutil.which("hetero-serve")]:
        if c and runnable(c):
            return c
    raise FileNotFoundError("hetero-serve not found: pass server_binary=, set HETERO_SERVE, or build it "
                            "(make build puts it in build/bin/)")


def session_key(body: Any, headers: Dict[str, str]) -> Optional[str]:
    """The conversation a request belongs to, or None (see the module's docstring)."""
    explicit = headers.get(SESSION_HEADER)
    if explicit:
        return "id:" + explicit
    if not isinstance(body, dict):
        return None
    if isinstance(body.get("user"), str) and body["user"]:
        return "user:" + body["user"]
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    opening = []
    for m in messages:
        opening.append(m)
        if isinstance(m, dict) and m.get("role") == "user":
            break
    digest = hashlib.sha256(json.dumps(opening, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
    return "chat:" + digest


def rank_by_session(key: str, replica_ids: List[str]) -> List[str]:
    """Rendezvous hashing: the replicas in order of preference for `key` (stable: removing
    a replica changes the first choice only for the keys it was first for)."""
    def weight(replica_id):
        return hashlib.sha256((key + "|" + replica_id).encode()).digest()
    return sorted(replica_ids, key=weight, reverse=True)


def error_body(status: int, message: str, code: str) -> bytes:
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}}).encode()


class SessionAffinityRouter(PowerOfTwoChoicesRequestRouter):
    """Ray Serve request router: a request with a `session_key` goes to its conversation's
    replica first, then to the others in rendezvous order; other requests are routed as
    Ray Serve's default router routes them."""

    async def choose_replicas(self, candidate_replicas: List[RunningReplica],
                              pending_request: Optional[PendingRequest] = None) -> List[List[RunningReplica]]:
        key = pending_request.kwargs.get("session_key") if pending_request is not None else None
        if not key or not candidate_replicas:
            return await super().choose_replicas(candidate_replicas, pending_request)
        by_id = {r.replica_id.unique_id: r for r in candidate_replicas}
        ranked = [by_id[i] for i in rank_by_session(key, list(by_id))]
        return [[ranked[0]], ranked[1:]] if len(ranked) > 1 else [ranked]


@serve.deployment(
    request_router_config=RequestRouterConfig(request_router_class=SessionAffinityRouter),
    health_check_period_s=5, health_check_timeout_s=10, graceful_shutdown_timeout_s=15,
    max_ongoing_requests=16)
class HeteroReplica:
    """One engine: a hetero-serve process on a loopback port, and requests passed to it."""

    def __init__(self, model: str, threads: int, server_binary: Optional[str], extra_args: List[str]):
        binary = find_server_binary(server_binary)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self._port = s.getsockname()[1]
        self._base = f"http://127.0.0.1:{self._port}"
        # --exit-with-parent: the server drains and exits when this replica's process is gone,
        # killed or not, so no engine outlives its replica.
        args = [binary, "-m", model, "--host", "127.0.0.1", "--port", str(self._port), "--exit-with-parent"]
        if threads > 0:
            args += ["-t", str(threads)]
        self._process = subprocess.Popen(args + list(extra_args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 300
        while True:
            if self._process.poll() is not None:
                raise RuntimeError("hetero-serve exited while starting: " +
                                   self._process.stderr.read().decode(errors="replace")[-2000:])
            try:
                with urllib.request.urlopen(self._base + "/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                self._process.kill()
                raise RuntimeError("hetero-serve did not answer /health within 300 s")
            time.sleep(0.1)
        self._session: Optional[aiohttp.ClientSession] = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_read=600))
        return self._session

    async def forward(self, method: str, path: str, headers: Dict[str, str], body: bytes,
                      session_key: Optional[str] = None) -> Dict[str, Any]:
        """A whole response: status, headers and body."""
        async with self._client().request(method, self._base + path, headers=headers, data=body) as r:
            payload = await r.read()
            return {"status": r.status, "headers": {k: v for k, v in r.headers.items()
                                                   if k.lower() not in _DROP_HEADERS}, "body": payload}

    async def forward_stream(self, method: str, path: str, headers: Dict[str, str], body: bytes,
                             session_key: Optional[str] = None):
        """A response piece by piece: first a dict with status and headers, then bytes."""
        async with self._client().request(method, self._base + path, headers=headers, data=body) as r:
            yield {"status": r.status, "headers": {k: v for k, v in r.headers.items()
                                                  if k.lower() not in _DROP_HEADERS}}
            async for piece in r.content.iter_any():
                yield piece

    def check_health(self):
        """Ray Serve calls this; an exception marks the replica unhealthy and replaces it."""
        if self._process.poll() is not None:
            raise RuntimeError(f"hetero-serve exited with {self._process.returncode}")
        with urllib.request.urlopen(self._base + "/health", timeout=5) as r:
            if r.status != 200:
                raise RuntimeError(f"hetero-serve /health answered {r.status}")

    def __del__(self):
        process = getattr(self, "_process", None)
        if process is not None and process.poll() is None:
            process.terminate()  # SIGTERM drains
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()


@serve.deployment(max_ongoing_requests=256)
class HeteroIngress:
    """The HTTP front: each request to a replica, with its session key for the router."""

    def __init__(self, replicas):
        self._replicas = replicas

    async def __call__(self, request: Request) -> Response:
        path = request.url.path
        if request.url.query:
            path += "?" + request.url.query
        body = await request.body()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROP_HEADERS}
        if request.method == "GET" and request.url.path == "/health":
            return await self._health()
        if request.method == "GET" and request.url.path == "/metrics":
            return await self._metrics(headers)
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None  # hetero-serve answers malformed JSON itself, with its 400
        key = session_key(parsed, {k.lower(): v for k, v in headers.items()})
        streaming = isinstance(parsed, dict) and parsed.get("stream") is True
        try:
            if not streaming:
                r = await self._replicas.forward.remote(request.method, path, headers, body, session_key=key)
                return Response(r["body"], status_code=r["status"], headers=r["headers"])
            pieces = self._replicas.options(stream=True).forward_stream.remote(
                request.method, path, headers, body, session_key=key)
            head = await pieces.__anext__()
        except Exception as e:  # noqa: BLE001 - the replica failed before answering: retryable
            return self._unavailable(e)

        async def rest():
            try:
                async for piece in pieces:
                    yield piece
            except Exception as e:  # noqa: BLE001 - the replica went away mid-stream
                yield b"data: " + error_body(503, f"the replica serving this stream failed ({type(e).__name__}); "
                                             "retry the request", "replica_unavailable") + b"\n\ndata: [DONE]\n\n"

        return StreamingResponse(rest(), status_code=head["status"], headers=head["headers"])

    def _unavailable(self, e: Exception) -> Response:
        return Response(error_body(503, f"the replica serving this request failed ({type(e).__name__}); "
                                        "retry the request", "replica_unavailable"),
                        status_code=503, headers={"Retry-After": "1"}, media_type="application/json")

    async def _health(self) -> Response:
        try:
            r = await self._replicas.forward.remote("GET", "/health", {}, b"")
            return Response(r["body"], status_code=r["status"], media_type="application/json")
        except Exception as e:  # noqa: BLE001
            return self._unavailable(e)

    async def _metrics(self, headers: Dict[str, str]) -> Response:
        # One replica's metrics per scrape (Ray Serve chooses it); Ray's own metrics
        # endpoint exports the replica counts and queue lengths of every deployment.
        try:
            r = await self._replicas.forward.remote("GET", "/metrics", headers, b"")
            return Response(r["body"], status_code=r["status"], headers=r["headers"])
        except Exception as e:  # noqa: BLE001
            return self._unavailable(e)


def build_app(model: str, *, num_replicas: Optional[int] = None, autoscaling_config: Optional[dict] = None,
              cpus_per_replica: float = 1, gpus_per_replica: float = 0, threads: Optional[int] = None,
              server_binary: Optional[str] = None, server_args: Optional[List[str]] = None):
    """The Ray Serve application: pass it to `serve.run`. One replica per `cpus_per_replica`
    CPUs (its engine's threads, unless `threads` says otherwise) or per `gpus_per_replica`
    GPUs; `num_replicas` fixed or `autoscaling_config` (Ray Serve's: min_replicas,
    max_replicas, target_ongoing_requests, ...). `server_args`: more hetero-serve options
    (e.g. ["--api-key", KEY, "--max-concurrent", "16"])."""
    if num_replicas is not None and autoscaling_config is not None:
        raise ValueError("give num_replicas or autoscaling_config, not both")
    if cpus_per_replica <= 0 and gpus_per_replica <= 0:
        raise ValueError("a replica needs cpus_per_replica > 0 or gpus_per_replica > 0")
    find_server_binary(server_binary)  # fail here, not in every replica
    if not os.path.isfile(model):
        raise FileNotFoundError(f"no model file at {model}")
    options: Dict[str, Any] = {"ray_actor_options": {"num_cpus": cpus_per_replica, "num_gpus": gpus_per_replica}}
    if autoscaling_config is not None:
        options["autoscaling_config"] = autoscaling_config
    else:
        options["num_replicas"] = 1 if num_replicas is None else num_replicas
    engine_threads = threads if threads is not None else int(max(cpus_per_replica, 1))
    replicas = HeteroReplica.options(**options).bind(os.path.abspath(model), engine_threads, server_binary,
                                                     list(server_args or []))
    return HeteroIngress.bind(replicas)
