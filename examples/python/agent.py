#!/usr/bin/env python3
"""The agent example in Python: two tools from type hints, a question through the agent
loop with the answer streamed, then the task report.

    PYTHONPATH=python python3 examples/python/agent.py ["question"] [-m MODEL]
"""

import argparse
import json
import pathlib
import sys

try:
    import hetero
except ImportError:  # run from a source tree without installing
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python"))
    import hetero


@hetero.tool
def add(a: float, b: float) -> float:
    """Adds two numbers a and b."""
    return a + b


@hetero.tool
def multiply(a: float, b: float) -> float:
    """Multiplies two numbers a and b."""
    return a * b


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("question", nargs="?", default="What is 12.5 times 8?")
    parser.add_argument("-m", "--model", default=None, help="GGUF model (default: $HETERO_MODEL, then the default model)")
    parser.add_argument("-n", "--max-tokens", type=int, default=128)
    args = parser.parse_args()
    hetero.log_to_stderr("warning")  # e.g. the notice that no GPU was found
    try:
        with hetero.Engine(args.model) as engine:
            session = engine.session()
            print(f"question: {args.question}\nanswer (streamed): ", end="", flush=True)
            stream = session.stream(args.question, tools=[add, multiply], max_tokens=args.max_tokens)
            for piece in stream:
                print(piece, end="", flush=True)
            result = stream.result
            print(f"\nanswer: {result.text}")
            for stage in result.report["stages"]:
                print(f"  {stage['stage']:<10} {stage['device']} {stage['end_ms'] - stage['start_ms']:8.1f} ms "
                      f"{stage['tokens_in']:5d} in {stage['tokens_out']:5d} out")
            for call in result.tool_calls:
                print(f"  tool call: {call['name']}({call['arguments']}) -> {call['outcome']}")
            print(json.dumps({"generated_tokens": result.generated_tokens, "total_ms": result.report["total_ms"]}))
    except hetero.HeteroError as e:
        print(f"error: {e.status}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
