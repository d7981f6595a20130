vllm serve Qwen/Qwen3-235B-A22B-Instruct-2507-FP8 \
  --gpu-utilization 0.95 \
  --tensor-parallel-size 8 \
  --enable-expert-parallel \
  --max-model-len 262144 \
  --max-num-batched-tokens 16384  # set --max-num-batched-tokens to prove that flashinfer fp8 does not work over this token limit
