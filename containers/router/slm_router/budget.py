"""How many tokens one SLM slot must hold for this router: what the deployment sizes the SLM's context from.

Two requests reach the SLM (README "Context the SLM needs"):

- the classification: the classifier's own messages (classifier.classification_messages — the instructions,
  the few-shot turns and the request cut to `classify_max_chars`), plus room for the label;
- the answer to a request it keeps: a request of up to `classify_max_chars` characters, plus
  `answer_max_tokens` of room for the answer.

Token counts are bounded from character counts: the slot is sized at deploy time, before anything knows the
tokenizer, so every character counts as 1/CHARS_PER_TOKEN tokens whatever its script. The figure is the
measured minimum over code, JSON and the Latin, Greek and Cyrillic scripts for SmolLM2 (the default SLM; its
English-centred 49k vocabulary is denser than bigger ones: Gemma 3's 262k measured 1.68-5.16 on the same
texts), characters per token through llama-server's POST /tokenize (tests/support/texts.py samples;
tests/k8s/test_prefilter_fidelity.py re-measures them on every run):

    English 5.16  the shipped instructions + few-shot 4.40  Python 3.07  German 2.68  emoji/ASCII mix 1.61
    JSON 1.61  Russian 1.36  Ukrainian 1.31  Greek 1.22   |  below the bound: Arabic 1.07  Hindi 0.89
    Chinese 0.59  Japanese 0.57  Korean 0.49

A bound for every script (~0.45) would give each slot ~2.5x the KV memory the Latin/Cyrillic majority needs.
A request denser than the bound can overflow the slot: its classification is then retried on a shorter head
and tail (classifier.Classifier.classify) rather than escalated unclassified. Lower `classify_max_chars` for
CJK-heavy traffic. The chat template costs 5.7 tokens per message and 30 per prompt with SmolLM2's (ChatML
plus its default system prompt), measured as the prompt_tokens of real chat completions: TOKENS_PER_MESSAGE
and TOKENS_PER_PROMPT leave room for other templates (Llama 3.1's adds a ~20-token date block).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .classifier import FULL_LABEL_TOKENS, classification_messages, clip, prefix_messages
from .config import Config, unvalidated

CHARS_PER_TOKEN = 1.2
# Chat-template tokens around each message (SmolLM2's ChatML: 5.7 measured) and once per prompt (BOS, the
# generation prompt and a template's own system text: 30 measured for SmolLM2's default system prompt).
TOKENS_PER_MESSAGE = 8
TOKENS_PER_PROMPT = 48
DEFAULT_ANSWER_MAX_TOKENS = 512  # a greeting, a short fact, a one-paragraph rewrite or translation


def text_tokens(chars: int) -> int:
    return math.ceil(chars / CHARS_PER_TOKEN)


def prompt_tokens(messages: list[dict[str, str]]) -> int:
    """Upper bound of the tokens a chat prompt of these messages takes, whatever the SLM's tokenizer."""
    return TOKENS_PER_PROMPT + sum(TOKENS_PER_MESSAGE + text_tokens(len(m["content"])) for m in messages)


@dataclass(frozen=True)
class SlmBudget:
    classification_tokens: int  # the longest classification prompt + the label
    answer_tokens: int  # the longest request the SLM classifies + answer_max_tokens

    @property
    def context_per_slot(self) -> int:
        return max(self.classification_tokens, self.answer_tokens)


def slm_budget(cfg: Config, answer_max_tokens: int = DEFAULT_ANSWER_MAX_TOKENS) -> SlmBudget:
    if answer_max_tokens < 1:
        raise ValueError(f"answer_max_tokens: must be >= 1, got {answer_max_tokens}")
    longest = "x" * cfg.classify_max_chars
    classify = classification_messages(prefix_messages(cfg), clip(longest + "x", cfg.classify_max_chars))
    return SlmBudget(
        classification_tokens=prompt_tokens(classify) + FULL_LABEL_TOKENS,
        answer_tokens=prompt_tokens([{"role": "user", "content": longest}]) + answer_max_tokens,
    )


def budget_for(config: Mapping[str, Any], answer_max_tokens: int = DEFAULT_ANSWER_MAX_TOKENS) -> SlmBudget:
    """The budget of a rendered router config (JSON object): its own instructions, few-shot, labels and
    classify_max_chars, or the router's defaults for those it leaves out."""
    return slm_budget(unvalidated(config), answer_max_tokens)
