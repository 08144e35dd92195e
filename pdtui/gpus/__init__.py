"""The GPUs of the deployment's hosts: nvidia-smi and sysfs (nvidia_smi: argv and parsers), each host's
inventory and the preflight's findings on the GPU split (inventory), the live samples (sampler)."""
