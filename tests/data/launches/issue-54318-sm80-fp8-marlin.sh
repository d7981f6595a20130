vllm serve /model \
  --pipeline-parallel-size 4 --tensor-parallel-size 1 \
  --moe-backend marlin \
  --gpu-memory-utilization 0.95 \
  --max-model-len 262144 \
  --max-num-batched-tokens 4096 --max-num-seqs 8
# with VLLM_PP_LAYER_PARTITION=2,16,16,14
