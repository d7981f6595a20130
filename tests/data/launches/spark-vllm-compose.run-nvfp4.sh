#!/bin/bash
set -e

MODEL="${1:-GadflyII/Qwen3-Coder-Next-NVFP4}"

if [[ "$MODEL" == /* ]] || [[ "$MODEL" == ./* ]]; then
    MODEL_PATH="/models/$(basename $MODEL)"
else
    MODEL_PATH="$MODEL"
fi

# Try NVFP4 first, fallbacks are handled by vLLM
docker compose run --rm --service-ports \
    -e VLLM_ENABLE_NVFP4=1 \
    -e VLLM_USE_FLASHINFER_MOE_MXFP4_BF16=1 \
    vllm serve "$MODEL_PATH" \
    --host 0.0.0.0 \
    --port 8000 \
    --max-model-len 8192 \
    --quantization mxfp4 \
    --kv-cache-dtype fp8 \
    --dtype float16 \
    --gpu-memory-utilization 0.95 \
    --enable-prefix-caching \
    --enable-chunked-prefill \
    --async-scheduling
