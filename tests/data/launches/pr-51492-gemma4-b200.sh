vllm serve google/gemma-4-26B-A4B-it \
  --dtype bfloat16 \
  --gpu-memory-utilization 0.85 \
  --max-model-len 131072
