"""lowtide: predict, minimise and measure TensorFlow Lite Micro arena memory."""

__version__ = "0.1.0"
