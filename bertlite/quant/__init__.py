"""int8 inference: the Int8Linear modules, the swap that installs them, and their compiled input quantization."""
