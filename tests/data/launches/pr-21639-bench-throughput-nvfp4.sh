vllm bench throughput --model nm-testing/Qwen3-30B-A3B-NVFP4 --load-format dummy --input-len 100 --output-len 100 --trust_remote_code --enable-expert-parallel
