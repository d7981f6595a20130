!VLLM_USE_V1=0 vllm serve "nvidia/Nemotron-Content-Safety-Reasoning-4B" \
  --tensor-parallel-size 4 \
  --gpu-memory-utilization 0.8 \
  --max-model-len 4096 \
  --port 8000 \
  --host 0.0.0.0 \
  --enforce-eager 
