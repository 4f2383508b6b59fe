#!/usr/bin/env python3
"""Load on an OpenAI-compatible server: N concurrent streaming chat clients, each sending
one request after another for a fixed time, with the real `openai` client from PyPI.

Reports per concurrency level: requests completed, 429s (the server's "busy": counted, not
errors) and errors, aggregate generated tokens per second over the run's wall time, and
time to first token (p50, p99). Generated tokens come from the stream's usage chunk
(`stream_options.include_usage`), else one per content chunk.

    python3 scripts/serve_load.py --base-url http://127.0.0.1:8080/v1 [--api-key KEY]
        [--model NAME] [--concurrency 1,4,16] [--seconds 30] [--max-tokens 128] [--json]
    python3 scripts/serve_load.py --base-url ... --turns [--rounds 5]

--turns measures KV reuse across the turns of a conversation instead: the time to first
token of a second turn (the whole conversation sent again with one more user message, as
OpenAI clients do) against that of a first turn, and against a second turn of the same length
whose first turn the server has not seen; each over --rounds fresh conversations, medians.

Works against hetero-serve and llama.cpp's llama-server alike (docs/PERFORMANCE.md compares
them); python/tests/test_server.py runs it as the bounded load test.
"""
import argparse
import json
import statistics
import sys
import threading
import time

PROMPTS = [
    "Write a short story about a robot who learns to paint.",
    "Explain how a bicycle stays upright, step by step.",
    "Describe a walk through a city market in the morning.",
    "What should a beginner know before planting a vegetable garden?",
    "Tell me about the history of the printing press.",
    "Write a letter to a friend about a trip to the mountains.",
    "How do bees make honey? Explain in detail.",
    "Describe the life of a lighthouse keeper.",
]


def percentile(values, q):
    """Nearest-rank percentile (q in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, int(round(q / 100.0 * len(ordered) + 0.5)))
    return ordered[min(rank, len(ordered)) - 1]


def run_level(make_client, model, concurrency, seconds, max_tokens):
    """Runs `concurrency` clients for `seconds`; returns the level's summary dict."""
    import openai

    lock = threading.Lock()
    ttfts, tokens, completed, busy, errors = [], [0], [0], [0], []
    deadline = time.monotonic() + seconds

    def client_loop(index):
        client = make_client()
        turn = 0
        while time.monotonic() < deadline:
            prompt = PROMPTS[(index + turn) % len(PROMPTS)]
            turn += 1
            start = time.monotonic()
            first = None
            chunks = 0
            usage_tokens = None
            try:
                stream = client.chat.completions.create(
                    model=model, messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens,
                    temperature=0, stream=True, stream_options={"include_usage": True})
                for chunk in stream:
                    if chunk.usage is not None:
                        usage_tokens = chunk.usage.completion_tokens
                    if chunk.choices and chunk.choices[0].delta.content:
                        chunks += 1
                        if first is None:
                            first = time.monotonic() - start
            except openai.RateLimitError:
                with lock:
                    busy[0] += 1
                time.sleep(0.05)
                continue
            except Exception as e:  # noqa: BLE001 - every other failure is reported
                with lock:
                    errors.append(f"{type(e).__name__}: {e}")
                continue
            with lock:
                completed[0] += 1
                tokens[0] += usage_tokens if usage_tokens is not None else chunks
                if first is not None:
                    ttfts.append(first)

    started = time.monotonic()
    threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - started
    return {
        "concurrency": concurrency,
        "seconds": wall,
        "requests": completed[0],
        "busy_429": busy[0],
        "errors": errors,
        "generated_tokens": tokens[0],
        "tokens_per_second": tokens[0] / wall if wall > 0 else 0.0,
        "ttft_p50_s": percentile(ttfts, 50),
        "ttft_p99_s": percentile(ttfts, 99),
        "ttft_mean_s": statistics.fmean(ttfts) if ttfts else None,
    }


SYSTEM = ("You are a careful assistant for a hardware shop. You answer questions about tools, "
          "materials and repairs. Keep answers short and practical; say when a job needs a "
          "professional. ") * 6


def first_token_time(client, model, messages):
    start = time.monotonic()
    stream = client.chat.completions.create(model=model, messages=messages, max_tokens=16, temperature=0,
                                            stream=True)
    first = None
    reply = []
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            if first is None:
                first = time.monotonic() - start
            reply.append(chunk.choices[0].delta.content)
    return first, "".join(reply)


def measure_turns(make_client, model, rounds):
    """Medians over `rounds` conversations of: TTFT of turn 1, of turn 2 (turn 1 seen), and of
    an unseen conversation's turn 2 (same length, another system prompt)."""
    client = make_client()
    first, second, unseen = [], [], []
    for r in range(rounds):
        system = {"role": "system", "content": f"Conversation {r}-{time.time_ns()}. " + SYSTEM}
        turn1 = [system, {"role": "user", "content": "Which drill bit do I need for concrete?"}]
        t1, reply = first_token_time(client, model, turn1)
        turn2 = turn1 + [{"role": "assistant", "content": reply},
                         {"role": "user", "content": "And for ceramic tiles?"}]
        t2, _ = first_token_time(client, model, turn2)
        other = [{"role": "system", "content": f"Conversation x{r}-{time.time_ns()}. " + SYSTEM}] + turn2[1:]
        t3, _ = first_token_time(client, model, other)
        first.append(t1)
        second.append(t2)
        unseen.append(t3)
    return {"rounds": rounds, "ttft_turn1_s": statistics.median(first), "ttft_turn2_s": statistics.median(second),
            "ttft_turn2_unseen_s": statistics.median(unseen)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--api-key", default="none")
    parser.add_argument("--model", default=None, help="default: the first of GET /v1/models")
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--turns", action="store_true", help="measure KV reuse across turns instead")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    import openai

    def make_client():
        return openai.OpenAI(base_url=args.base_url, api_key=args.api_key, timeout=args.timeout, max_retries=0)

    model = args.model or make_client().models.list().data[0].id
    if args.turns:
        r = measure_turns(make_client, model, args.rounds)
        print(json.dumps(r, indent=2) if args.json else
              f"TTFT medians over {r['rounds']} conversations: turn 1 {r['ttft_turn1_s']:.3f} s, turn 2 "
              f"{r['ttft_turn2_s']:.3f} s, an unseen turn 2 {r['ttft_turn2_unseen_s']:.3f} s")
        return
    levels = [int(x) for x in args.concurrency.split(",") if x]
    results = []
    for n in levels:
        results.append(run_level(make_client, model, n, args.seconds, args.max_tokens))
        r = results[-1]
        print(f"{n:3d} streams: {r['requests']} requests, {r['busy_429']} x 429, {len(r['errors'])} errors, "
              f"{r['tokens_per_second']:.1f} tok/s, TTFT p50 {r['ttft_p50_s']}, p99 {r['ttft_p99_s']}",
              file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print("| streams | requests | 429s | errors | aggregate tok/s | TTFT p50 (s) | TTFT p99 (s) |")
        print("|---|---|---|---|---|---|---|")
        for r in results:
            fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
            print(f"| {r['concurrency']} | {r['requests']} | {r['busy_429']} | {len(r['errors'])} | "
                  f"{r['tokens_per_second']:.1f} | {fmt(r['ttft_p50_s'])} | {fmt(r['ttft_p99_s'])} |")
    sys.exit(1 if any(r["errors"] for r in results) else 0)


if __name__ == "__main__":
    main()
