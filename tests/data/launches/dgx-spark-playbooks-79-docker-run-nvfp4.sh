docker run -d --name vllm-bench --gpus all --network host --ipc=host \
  --ulimit memlock=-1 --ulimit stack=67108864 \
  -e HF_TOKEN=$HF_TOKEN \
  -v $HOME/.cache/huggingface:/root/.cache/huggingface \
  nvcr.io/nvidia/vllm:26.02-py3 \
  vllm serve nvidia/Llama-3.3-70B-Instruct-NVFP4 \
    --port 8012 --max-model-len 16384
