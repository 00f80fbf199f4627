"""Names the fake Hub serves in these tests (shared by conftest and the test modules)."""

PUBLIC_REPO = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"
GATED_REPO = "acme-corp/gated-smollm2"
PLAIN_REPO = "acme-corp/plain-files"
FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GOOD_TOKEN = "hf_valid_token"
