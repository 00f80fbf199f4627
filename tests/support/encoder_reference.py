"""The transformers reference for the encoder and the reranker stand-in (cpu_inference.cli.local_models): the same
checkpoints scripts/build_encoders.sh converted, run by PyTorch in the vLLM test environment's python (torch CPU +
transformers; the dev virtualenv has neither), in a subprocess.

- reference_embeddings: what sentence-transformers computes for all-MiniLM-L6-v2 (its modules.json: Transformer,
  Pooling with pooling_mode_mean_tokens, Normalize): the last hidden states averaged over the attention mask, L2
  normalised. llama-server's /v1/embeddings normalises too (embd_normalize 2, the Euclidean norm, by default).
- reference_rerank_scores: what the pinned llama.cpp computes for a BERT sequence classifier, which is not
  BertForSequenceClassification's forward:
  * the converter drops pooler.dense (vendor/llama.cpp/conversion/bert.py, BertModel.filter_tensors: "we are only
    using BERT for embeddings so we don't need the pooling layer") and renames classifier.* to
    classifier.out_proj.*, so RANK pooling (src/llama-graph.cpp, build_pooling, LLAMA_POOLING_TYPE_RANK) takes
    the CLS token's last hidden state (build_inp_cls) and applies only cls_out: score = h_cls · w + b;
  * the tokens: tools/server/server-common.cpp format_prompt_rerank builds BOS? query EOS? SEP? doc EOS?, with the
    GGUF's tokenizer flags; the converter writes add_bos_token = true, add_eos_token = true, add_sep_token = false
    and eos = sep = [SEP] (gguf-py SpecialVocab reading tokenizer.json's TemplateProcessing), so the sequence is
    [CLS] query [SEP] doc [SEP] — the tokenizer's own pair encoding;
  * token types: all zero (conversion/bert.py set_vocab: "currently we are passing all zeros to the token_type
    embeddings"), where the tokenizer would give the document type 1.
  The score llama-server returns is that raw logit (server-context.cpp send_rerank: `res->score = embd[0]`).
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

from cpu_inference.cli.local_models import encoder_files
from tests.support.vllm import vllm_python

# How close llama-server's answers must be to these references (tests/runtime/engine/test_encoder_fidelity.py
# measures them; the task tests reuse them). Measured here (2 vCPUs, x86_64) with the F16 GGUFs
# (local_models.ENCODER_OUTTYPE), F32 in brackets: embeddings min cosine 0.999997 (0.999998) over 10 varied
# sentences; rerank max |score - reference| 6.0e-4 (3.5e-4), scores spanning -0.35..-0.11.
MIN_COSINE = 0.999
# 2.5x the F16 error, and below what any other reading of the sources gives: with the tokenizer's token types (1 for
# the document) the scores move by up to 1.2e-2, without the trailing [SEP] by 1.5e-2, and through
# BertForSequenceClassification's pooler (dense + tanh, which the converter drops) they land near +0.01..+0.05.
RERANK_TOLERANCE = 1.5e-3

_SCRIPT = r"""
import json, sys
import torch
from transformers import AutoTokenizer, BertForSequenceClassification, BertModel

req = json.load(sys.stdin)
torch.manual_seed(0)
with torch.inference_mode():
    if req["kind"] == "embeddings":
        tok = AutoTokenizer.from_pretrained(req["dir"])
        model = BertModel.from_pretrained(req["dir"], add_pooling_layer=False).eval()
        enc = tok(req["texts"], padding=True, return_tensors="pt")
        hidden = model(**enc).last_hidden_state
        mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        out = torch.nn.functional.normalize(pooled, p=2, dim=1).tolist()
    else:
        tok = AutoTokenizer.from_pretrained(req["dir"])
        model = BertForSequenceClassification.from_pretrained(req["dir"]).eval()
        enc = tok([req["query"]] * len(req["docs"]), req["docs"], padding=True, return_tensors="pt")
        enc["token_type_ids"] = torch.zeros_like(enc["input_ids"])
        cls = model.bert(**enc).last_hidden_state[:, 0]
        out = {"scores": model.classifier(cls).squeeze(-1).tolist(), "tokens": int(enc["attention_mask"].sum())}
json.dump(out, sys.stdout)
"""


def _run(request: dict[str, Any]) -> Any:
    out = subprocess.run(
        [str(vllm_python()), "-c", _SCRIPT],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"},
    )
    if out.returncode != 0:
        raise RuntimeError(f"the transformers reference failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout)


def reference_embeddings(texts: list[str]) -> list[list[float]]:
    """all-MiniLM-L6-v2's sentence embeddings by transformers (F32): mean pooling over the attention mask, L2
    normalised — what sentence-transformers returns for this checkpoint."""
    return _run({"kind": "embeddings", "dir": str(encoder_files()["encoder_dir"]), "texts": texts})


def reference_rerank(query: str, docs: list[str]) -> tuple[list[float], int]:
    """(the reranker stand-in's score for each document by transformers (F32), as llama.cpp computes it (module
    docstring): the CLS token's last hidden state of [CLS] query [SEP] doc [SEP] with token types 0, through the
    classifier, no pooler; the number of tokens of those sequences, to compare with the engine's usage)."""
    out = _run({"kind": "rerank", "dir": str(encoder_files()["reranker_dir"]), "query": query, "docs": docs})
    return out["scores"], out["tokens"]


def reference_rerank_scores(query: str, docs: list[str]) -> list[float]:
    """The reranker stand-in's score for each document by transformers (reference_rerank)."""
    return reference_rerank(query, docs)[0]


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / ((sum(x * x for x in a) ** 0.5) * (sum(y * y for y in b) ** 0.5))
