#!/usr/bin/env bash
# On the development machine: the GPU tier's payload, from the lock, cut into pieces the device tool can carry.
#   bash bench/gpu/prepare.sh          -> bench/gpu/.pieces/p00 .. pNN (ignored by git), MANIFEST with their sha256
# Downloads (PyPI, --require-hashes) into .cache/gpu-wheels, removes FlashAttention 2 from the vLLM wheel (Hopper
# uses FA3; vLLM imports FA2 inside try/except), adds the checkpoint's config, tars it all and splits the tar.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CACHE=${GPU_WHEEL_CACHE:-$ROOT/.cache/gpu-wheels}
PIECES=$HERE/.pieces
PIECE_MB=${PIECE_MB:-52}    # 64 MiB a transfer, less the working tree (~9 MiB with docs/runs)
FA2='vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so'

mkdir -p "$CACHE"
python3 -m pip download -q --no-deps --require-hashes --only-binary=:all: --python-version 3.12 --implementation cp \
  --abi cp312 --abi abi3 --abi none \
  --platform manylinux_2_31_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_26_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 --platform any \
  -d "$CACHE" -r "$HERE/wheels.lock"

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/payload/wheels" "$STAGE/payload/models"
# exactly the lock's files (the cache may hold others)
grep -o '# [^ ]*\.whl$' "$HERE/wheels.lock" | cut -c3- | while read -r whl; do
  cp "$CACHE/$whl" "$STAGE/payload/wheels/"
done
vllm=$(ls "$STAGE"/payload/wheels/vllm-0.24.0-*.whl)
zip -q -d "$vllm" "$FA2"
python3 "$HERE/make_checkpoint.py" config "$STAGE/payload/models" >/dev/null
(cd "$STAGE/payload/wheels" && sha256sum -- *.whl) > "$STAGE/payload/SHA256SUMS"

rm -rf "$PIECES" && mkdir -p "$PIECES"
tar -C "$STAGE" -cf - payload | split -b "${PIECE_MB}M" -d - "$PIECES/p"
(cd "$PIECES" && sha256sum p*) > "$PIECES/MANIFEST"
echo "pieces: $(ls "$PIECES"/p* | wc -l) in $PIECES ($(du -sh "$PIECES" | cut -f1)); stripped vLLM wheel sha256:"
sha256sum "$vllm" | cut -d' ' -f1
