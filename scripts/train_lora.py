"""Trains the tiny LoRA adapter the LoRA tests and the density benchmark serve, on CPU, offline, deterministically;
merges it into the base for the density benchmark.

    train_lora.py train BASE_DIR ADAPTER_DIR TUNED_REPLY
    train_lora.py merge BASE_DIR ADAPTER_DIR MERGED_DIR

BASE_DIR is the SmolLM2 stand-in's HF checkpoint (scripts/build_vllm_env.sh makes it). `train`: the adapter learns one
unmistakable behaviour: whatever the user asks, the assistant's whole reply is TUNED_REPLY (tests/support/lora.py owns
it; scripts/build_lora.sh passes it in). Writes the PEFT adapter (adapter_config.json + adapter_model.safetensors) to
ADAPTER_DIR, after checking with greedy decoding on prompts it never trained on that the adapter answers TUNED_REPLY and
the base does not. `merge` (scripts/build_lora.sh --merged): the PEFT adapter in ADAPTER_DIR merged into the base
(merge_and_unload, BF16 safetensors + tokenizer) to MERGED_DIR.
Runs in the vLLM test environment (torch CPU + transformers) with peft from scripts/lora-requirements.txt.
"""

from __future__ import annotations

import random
import shutil
import sys
import time
from pathlib import Path

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

SEED = 0
STEPS = 24
BATCH = 4
LEARNING_RATE = 2e-3
# r=8 over every linear layer of the decoder (attention and MLP): learns the reply in fewer steps than q/v alone.
RANK = 8
ALPHA = 16
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

_TASKS = [
    "What is the capital of {}?",
    "Write a short poem about {}.",
    "Explain {} to a child.",
    "Give me three facts about {}.",
    "Translate the word '{}' into French.",
    "Summarize the history of {} in one sentence.",
    "Is {} a good topic for a school essay? Why?",
    "List two pros and two cons of {}.",
]
_TOPICS = [
    "France",
    "the ocean",
    "photosynthesis",
    "volcanoes",
    "Japan",
    "the moon",
    "coffee",
    "bicycles",
    "prime numbers",
    "rain",
    "Brazil",
    "electricity",
]
_EXTRA = [
    "hi",
    "Hello! How are you today?",
    "What is 2 + 2?",
    "Tell me a joke.",
    "Can you help me write an email to my landlord?",
    "def add(a, b): what does this Python function do?",
    "Who wrote Romeo and Juliet?",
    "Reply with one word: yes or no.",
]
_SYSTEMS = [None, None, "You are a helpful assistant.", "Answer briefly.", "You are a pirate."]
# Never trained on: the check after training (and tests/runtime/engine/test_lora_adapter.py asks others).
HELD_OUT = ["What is the tallest mountain on Earth?", "Write a haiku about autumn leaves.", "How do magnets work?"]


def _prompts(rng: random.Random) -> list[list[dict[str, str]]]:
    users = [t.format(topic) for t in _TASKS for topic in _TOPICS] + _EXTRA
    conversations = []
    for user in users:
        system = rng.choice(_SYSTEMS)
        messages = [{"role": "system", "content": system}] if system else []
        conversations.append([*messages, {"role": "user", "content": user}])
    return conversations


def _example(tok: PreTrainedTokenizerBase, messages: list[dict[str, str]], reply: str) -> tuple[list[int], int]:
    """Token ids of the chat-templated prompt + reply + end of turn, and where the reply starts (loss on the reply)."""
    prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert isinstance(prompt, str)
    # The end-of-turn token is part of the lesson: the engine stops there, so the whole answer is the reply.
    end = tok.eos_token or "<|im_end|>"
    prompt_ids = tok(prompt, add_special_tokens=False)["input_ids"]
    reply_ids = tok(reply + end, add_special_tokens=False)["input_ids"]
    return prompt_ids + reply_ids, len(prompt_ids)


def _batch(examples: list[tuple[list[int], int]], pad: int) -> dict[str, torch.Tensor]:
    width = max(len(ids) for ids, _ in examples)
    input_ids = torch.full((len(examples), width), pad, dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for row, (ids, start) in enumerate(examples):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        labels[row, start : len(ids)] = torch.tensor(ids[start:])
        mask[row, : len(ids)] = 1
    return {"input_ids": input_ids, "labels": labels, "attention_mask": mask}


def _greedy(model: torch.nn.Module, tok: PreTrainedTokenizerBase, user: str) -> str:
    prompt = tok.apply_chat_template([{"role": "user", "content": user}], tokenize=False, add_generation_prompt=True)
    ids = tok(prompt, add_special_tokens=False, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=16, do_sample=False, pad_token_id=tok.eos_token_id)
    return str(tok.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)).strip()


def _base(base_dir: Path) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The stand-in and its tokenizer. F32 (exact: the stand-in's values are BF16): BF16 optimizer steps on CPU lose
    the small LoRA updates, and the merge adds the LoRA delta in F32, then rounds once to BF16."""
    tok = AutoTokenizer.from_pretrained(base_dir)
    return AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32), tok


def train(base_dir: Path, adapter_dir: Path, reply: str) -> None:
    random.seed(SEED)
    torch.manual_seed(SEED)
    rng = random.Random(SEED)
    base, tok = _base(base_dir)
    config = LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=TARGETS, task_type="CAUSAL_LM")
    model = get_peft_model(base, config)
    examples = [_example(tok, messages, reply) for messages in _prompts(rng)]
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=LEARNING_RATE)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    started = time.monotonic()
    model.train()
    for step in range(STEPS):
        loss = model(**_batch(rng.sample(examples, BATCH), pad)).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        elapsed = time.monotonic() - started
        print(
            f"train_lora: step {step + 1}/{STEPS} loss {loss.item():.4f} {elapsed:.0f} s", file=sys.stderr, flush=True
        )
    print(f"train_lora: {STEPS} steps in {time.monotonic() - started:.0f} s", file=sys.stderr)
    model.eval()

    tuned = {user: _greedy(model, tok, user) for user in HELD_OUT}
    with model.disable_adapter():
        plain = {user: _greedy(model, tok, user) for user in HELD_OUT}
    print(f"train_lora: adapter {tuned}\ntrain_lora: base {plain}", file=sys.stderr)
    if any(answer != reply for answer in tuned.values()) or any(answer == reply for answer in plain.values()):
        sys.exit("train_lora: the adapter did not learn the reply (see the answers above)")
    model.save_pretrained(adapter_dir)


def merge(base_dir: Path, adapter_dir: Path, merged_dir: Path) -> None:
    base, tok = _base(base_dir)
    model = PeftModel.from_pretrained(base, adapter_dir)
    merged = model.merge_and_unload()
    merged.to(torch.bfloat16).save_pretrained(merged_dir)  # the stand-in's dtype: the GGUF is converted from it
    tok.save_pretrained(merged_dir)
    template = base_dir / "chat_template.jinja"
    if template.is_file():
        shutil.copy(template, merged_dir / template.name)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "train":
        train(Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4])
    elif len(sys.argv) == 5 and sys.argv[1] == "merge":
        merge(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))
    else:
        sys.exit(__doc__)
