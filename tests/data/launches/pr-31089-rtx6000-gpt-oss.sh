vllm serve \
  "openai/gpt-oss-120b" \
  --async-scheduling \
  --trust-remote-code \
  --gpu-memory-utilization 0.91 \
  --enable-chunked-prefill \
  --enable-prefix-caching \
  --tensor-parallel-size 1 \
  --max-num-batched-tokens 32768 \
  --max-model-len 131072 \
  --max-num-seqs 512 \
  --disable-log-requests \
  --reasoning-parser openai_gptoss \
  --enable-auto-tool-choice \
  --tool-call-parser openai \
  --port 8000
