"""Build-time check of vLLM's release wheel before the image installs it (run by the Dockerfile, not in the image):

    python3 verify_release_wheel.py WHEEL VERSION [SHA256]

Passes, printing the wheel's sha256, only if the wheel is the distribution `vllm` at VERSION+cpu (its METADATA), every
file it lists in RECORD has the hash RECORD gives (the wheel spec's integrity check, PEP 376/427), and, when SHA256 is
given (the Dockerfile's VLLM_WHEEL_SHA256_<ARCH>), the whole file has that hash. Otherwise: one line on stderr,
exit 1.
Stdlib only: it runs on the base image's python before anything is installed."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import sys
import zipfile


def record_hash(data: bytes) -> str:
    """A RECORD entry's hash: sha256, urlsafe base64 without padding (PEP 376)."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def verify(path: str, version: str, pinned: str = "") -> str:
    """The wheel's sha256, or ValueError naming what is wrong."""
    data = open(path, "rb").read()  # noqa: SIM115 - a one-shot read of the downloaded file
    digest = hashlib.sha256(data).hexdigest()
    if pinned and digest != pinned:
        raise ValueError(f"{path}: sha256 {digest}, expected {pinned}")
    wheel = zipfile.ZipFile(io.BytesIO(data))
    info = f"vllm-{version}+cpu.dist-info/"
    try:
        meta = wheel.read(info + "METADATA").decode()
        record = wheel.read(info + "RECORD").decode()
    except KeyError:
        raise ValueError(f"{path} is not vllm {version}+cpu (no {info})") from None
    if "\nName: vllm\n" not in meta or f"\nVersion: {version}+cpu\n" not in meta:
        raise ValueError(f"{path} is not vllm {version}+cpu")
    rows = [r for r in csv.reader(io.StringIO(record)) if r and r[1]]
    bad = [r[0] for r in rows if record_hash(wheel.read(r[0])) != r[1]]
    if not rows or bad:
        raise ValueError(f"files not matching RECORD: {bad[:5]}")
    return digest


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print("usage: verify_release_wheel.py WHEEL VERSION [SHA256]", file=sys.stderr)
        return 2
    try:
        print(verify(*argv))
    except ValueError as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
