from vllm.platforms import Platform


class CudaPlatform(Platform):
    device_type = "cuda"
