"""Reading a label and its confidence from grammar-constrained logprobs, and the circuit breaker's states.

Real engine answers are covered in test_routing.py; here the edge cases a 135M model rarely produces
on demand (tokenizations, shared prefixes, a forced unlikely token) get exact expected values."""

from __future__ import annotations

import asyncio
import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import tests.runtime.router.harness  # noqa: F401  (puts containers/router on sys.path)
from slm_router.breaker import CircuitBreaker
from slm_router.classifier import ClassificationError, Classifier, _Truncated, grammar_for, read_decision
from slm_router.client import HttpClient
from slm_router.config import Config, Escalation

LABELS = ("simple", "complex")


def alt(token: str, p: float, id_: int | None = None) -> dict:
    d = {"token": token, "bytes": list(token.encode()), "logprob": math.log(p)}
    if id_ is not None:
        d["id"] = id_
    return d


def pos(token: str, p: float, top: list[dict], id_: int) -> dict:
    return {**alt(token, p, id_), "top_logprobs": top}


def test_first_token_mass_is_normalized_over_label_starts():
    # "simple", "sim" and "s" all start "simple"; "Simple" and "I" start no label.
    top = [
        alt("simple", 0.6, 1),
        alt("complex", 0.1, 2),
        alt("Simple", 0.1, 3),
        alt("sim", 0.05, 4),
        alt("I", 0.05, 5),
        alt("s", 0.05, 6),
    ]
    label, conf, dist = read_decision("simple", [pos("simple", 0.6, top, 1), pos("", 0.99, [], 7)], LABELS)
    assert label == "simple"
    # hidden rivals: prefixes of "complex" not listed ("c", "co", ... 6 of them) at most 0.05 each, ≤ unlisted 0.05
    assert conf == pytest.approx(0.7 / (0.8 + 0.05))
    assert dist == pytest.approx({"simple": 0.7 / 0.8, "complex": 0.1 / 0.8})


def test_a_grammar_forced_unlikely_token_gives_low_confidence():
    # The model wanted "Hello"; the grammar forced "c" (p=0.002), which is not even in the top list.
    top = [alt("Hello", 0.3, 1), alt("hi", 0.07, 2), alt("Welcome", 0.06, 3)]
    label, conf, _ = read_decision("complex", [pos("c", 0.002, top, 9), pos("om", 0.5, [], 10)], LABELS)
    assert label == "complex" and conf < 0.05


def test_shared_prefix_is_decided_where_labels_diverge():
    labels = ("yes_simple", "yes_complex")
    first = pos("yes", 0.9, [alt("yes", 0.9, 1), alt("no", 0.05, 2)], 1)
    second = pos("_simple", 0.8, [alt("_simple", 0.8, 3), alt("_complex", 0.2, 4)], 3)
    label, conf, _ = read_decision("yes_simple", [first, second], labels)
    # Step 1: "yes" fits both; unlisted tokens like "yes_c" could still hold up to the unlisted 0.05 for
    # the rival. Step 2 decides: 0.8 of a fully listed distribution.
    assert label == "yes_simple" and conf == pytest.approx(0.9 / 0.95 * 0.8)


def test_answers_outside_the_labels_are_errors():
    with pytest.raises(ClassificationError, match="not one of the labels"):
        read_decision("banana", [pos("banana", 0.9, [], 1)], LABELS)
    with pytest.raises(ClassificationError, match="no logprobs"):
        read_decision("simple", [], LABELS)


def test_grammar_escapes_labels():
    assert grammar_for(['a"b', "c\\d"]) == 'root ::= "a\\"b" | "c\\\\d"'


def test_breaker_opens_half_opens_and_closes():
    now = [0.0]
    changes = []
    b = CircuitBreaker("llm", 2, 10.0, clock=lambda: now[0], on_change=lambda n, s: changes.append(s))
    b.failure()
    assert b.state == "closed" and b.allow()
    b.failure()
    assert b.state == "open" and not b.allow()
    now[0] = 10.0
    assert b.state == "half_open"
    assert b.allow() and not b.allow()  # one trial at a time
    b.failure()  # the trial failed: open again for another 10 s
    assert b.state == "open" and not b.allow()
    now[0] = 20.0
    assert b.allow()
    b.success()
    assert b.state == "closed" and b.allow()
    assert changes == ["open", "open", "closed"]


def test_a_label_prefix_maps_to_its_label_or_asks_for_more():
    top = [alt("sim", 0.9, 1), alt("com", 0.1, 2)]
    label, conf, _ = read_decision("sim", [pos("sim", 0.9, top, 1)], LABELS)  # max_tokens cut after "sim"
    assert label == "simple" and conf == pytest.approx(0.9)
    with pytest.raises(_Truncated):  # "yes" still fits both labels: the classifier must ask again
        read_decision("yes", [pos("yes", 0.9, [alt("yes", 0.9, 1)], 1)], ("yes_simple", "yes_complex"))


def test_a_truncated_answer_is_asked_again_with_room_for_the_whole_label():
    """A loopback SLM stand-in whose tokenizer splits the labels finer than the generation budget: the
    classifier re-asks once with full room, and that is neither a retry nor a failure."""
    labels = ("yes_simple", "yes_complex")
    seen: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(body)
            if self.path == "/tokenize":
                answer = {"tokens": [1]}  # claims one token per label: the budget becomes 1
            elif body["max_tokens"] == 1:
                answer = {
                    "choices": [
                        {
                            "message": {"content": "yes"},
                            "logprobs": {"content": [pos("yes", 0.9, [alt("yes", 0.9, 1)], 1)]},
                        }
                    ]
                }
            else:
                steps = [
                    pos("yes", 0.9, [alt("yes", 0.9, 1)], 1),
                    pos("_complex", 0.7, [alt("_complex", 0.7, 3), alt("_simple", 0.3, 4)], 3),
                ]
                answer = {"choices": [{"message": {"content": "yes_complex"}, "logprobs": {"content": steps}}]}
            raw = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    retries = []
    try:
        cfg = Config(
            slm_url=f"http://127.0.0.1:{server.server_port}",
            labels=labels,
            slm_labels=("yes_simple",),
            few_shot=(),
            escalation=Escalation(url="http://llm/v1"),
        ).validate()

        async def run():
            c = Classifier(cfg, HttpClient(cfg.slm_url, connect_timeout=2), on_retry=lambda: retries.append(1))
            await c.calibrate()
            assert c.max_tokens == 1
            return await c.classify("anything")

        decision = asyncio.run(run())
    finally:
        server.shutdown()
    assert decision.label == "yes_complex" and decision.attempts == 1 and retries == []
    assert decision.confidence == pytest.approx(
        0.9 / (0.9 + 0.1) * 0.7
    )  # step 1: up to 0.1 unlisted for "yes_"-less rivals
    assert [b.get("max_tokens") for b in seen if "messages" in b] == [1, 32]
