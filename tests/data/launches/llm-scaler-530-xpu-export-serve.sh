export PYTORCH_ALLOC_CONF=expandable_segments:True
export VLLM_XPU_ENABLE_XPU_GRAPH=0
vllm serve /home/hobo/models/16bit/diffusiongemma-26B-A4B-it \
    --gpu-memory-utilization 0.88 \
    --max_num_seqs=16 \
    --max-num-batched-tokens=8192 \
    --port 8000 \
    --host 0.0.0.0  \
    --max-model-len=262144 \
    --block-size 64 \
    -tp=4 \
    --api-key="hoborific"
