from vllm.platforms import Platform


class CpuPlatform(Platform):
    device_type = "cpu"
